/* grammar.h — grammar-constrained sampling: GBNF grammars, the vocabulary trie, the matcher that
 * says which tokens may come next, and the JSON-schema-to-GBNF compiler.
 *
 * Three objects, three lifetimes:
 *   qr_grammar        a compiled grammar (rules over Unicode code points). Immutable and reference
 *                     counted: one compile can serve many requests on many threads.
 *   qr_grammar_vocab  a model's vocabulary as token byte strings plus flags, arranged as a byte trie
 *                     (preorder, with subtree ends) so that a mask walk prunes whole subtrees.
 *                     Immutable; build it once per model and share it.
 *   qr_grammar_matcher  one generation's position in the grammar (a set of pushdown stacks) plus
 *                     its caches: a lazily built DFA over bytes (state = stack set + pending UTF-8
 *                     bytes) and the allowed-token bitset of recently seen states. One thread.
 *
 * The vocabulary is given as plain arrays (this layer knows no tokenizer): token i has the bytes it
 * adds to the output and flags. QR_GRAMMAR_TOKEN_SPECIAL tokens (control tokens) are never allowed;
 * QR_GRAMMAR_TOKEN_EOG tokens are allowed exactly when the text so far is a complete sentence of the
 * grammar, and when the grammar can take nothing more, only they are allowed.
 *
 * GBNF as llama.cpp documents it: `name ::= alternatives` (one rule per line; a line that starts
 * with `|` continues the rule above), "literals" with \n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH escapes,
 * [character classes] and [^negated] ones, `.` (any character), ( groups ), postfix * + ? {m} {m,}
 * {m,n} {,n}, `#` comments. Left recursion is refused (rewrite it with repetition).
 *
 * Design for later users (tool calls): a caller builds the GBNF text of what it wants to force (for
 * example an alternation over tool-call objects whose arguments come from
 * qr_json_schema_to_gbnf with a rule prefix per tool) and compiles it like any other grammar.
 */
#ifndef QR_SAMPLING_GRAMMAR_H
#define QR_SAMPLING_GRAMMAR_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "quarrel.h"

#define QR_GRAMMAR_TOKEN_SPECIAL 1u /* never produced under a grammar */
#define QR_GRAMMAR_TOKEN_EOG 2u     /* ends generation: allowed only where the grammar may end */

/* Largest GBNF text qr_grammar_parse accepts (bytes). */
#define QR_GRAMMAR_MAX_TEXT (8u << 20)

typedef struct qr_grammar qr_grammar;
typedef struct qr_grammar_vocab qr_grammar_vocab;
typedef struct qr_grammar_matcher qr_grammar_matcher;

/* ---- grammars ---------------------------------------------------------------------------- */

/* Compiles GBNF text[0..len) whose start rule is `root` (NULL = "root"). Errors (QR_ERR_INVALID_ARG)
 * say where and what: "grammar: line 3, column 9: expected '::=' after the rule name 'value'",
 * "grammar: rule 'item' is used (line 2) but never defined", "grammar: rule 'expr' is
 * left-recursive (expr -> term -> expr)". On success *out holds one reference. */
qr_status qr_grammar_parse(const char *text, size_t len, const char *root, qr_grammar **out, char *err,
                           size_t err_len);

/* Adds a reference (returns g). Thread-safe. */
qr_grammar *qr_grammar_retain(qr_grammar *g);

/* Drops a reference; the last one frees. NULL is fine. Thread-safe. */
void qr_grammar_free(qr_grammar *g);

/* Rules after lowering groups and repetitions (for tests and logs). */
int32_t qr_grammar_n_rules(const qr_grammar *g);

/* ---- vocabularies ------------------------------------------------------------------------ */

/* Builds the trie of n_vocab tokens: token i adds bytes pieces[i][0..lens[i]) to the output (pieces[i]
 * may be NULL when lens[i] is 0) and has flags[i] (QR_GRAMMAR_TOKEN_* bits; flags may be NULL).
 * Everything is copied. Tokens with no bytes that are not EOG are never allowed.
 * Errors: QR_ERR_INVALID_ARG (n_vocab <= 0, a piece longer than 65535 bytes), QR_ERR_NOMEM. */
qr_status qr_grammar_vocab_create(const char *const *pieces, const uint32_t *lens, const uint8_t *flags,
                                  int32_t n_vocab, qr_grammar_vocab **out, char *err, size_t err_len);
void qr_grammar_vocab_free(qr_grammar_vocab *v);
int32_t qr_grammar_vocab_n_vocab(const qr_grammar_vocab *v);
/* Trie nodes (for benchmarks). */
int64_t qr_grammar_vocab_n_nodes(const qr_grammar_vocab *v);

/* ---- matchers ---------------------------------------------------------------------------- */

/* A matcher at the start of g over the vocabulary v (both must outlive it; g gets a reference).
 * Errors: QR_ERR_NOMEM; QR_ERR_INVALID_ARG when the grammar's start already blows the limits
 * (more than 4096 stacks: an ambiguous grammar). */
qr_status qr_grammar_matcher_create(qr_grammar *g, const qr_grammar_vocab *v, qr_grammar_matcher **out,
                                    char *err, size_t err_len);
void qr_grammar_matcher_free(qr_grammar_matcher *m);

/* Back to the start of the grammar (the caches are kept). */
void qr_grammar_matcher_reset(qr_grammar_matcher *m);

/* Whether token may come next. Out-of-range ids are not allowed. */
bool qr_grammar_matcher_allows(qr_grammar_matcher *m, int32_t token);

/* Advances over token (an EOG token ends the matcher: nothing is allowed afterwards).
 * QR_ERR_INVALID_ARG when the token is not allowed (the matcher is unchanged). */
qr_status qr_grammar_matcher_accept(qr_grammar_matcher *m, int32_t token, char *err, size_t err_len);

/* Advances over raw bytes s[0..n) (prompt prefill, tests). Returns false, and leaves the matcher
 * unchanged, when the bytes cannot continue the grammar. */
bool qr_grammar_matcher_accept_bytes(qr_grammar_matcher *m, const char *s, size_t n);

/* The set of tokens allowed next, as a bitset of (n_vocab + 63) / 64 words (bit t%64 of word t/64).
 * Valid until the next call on m. NULL only when memory runs out. */
const uint64_t *qr_grammar_matcher_mask(qr_grammar_matcher *m);

/* The bytes accepted so far form a complete sentence (EOG tokens are allowed). */
bool qr_grammar_matcher_can_end(qr_grammar_matcher *m);

/* Complete, and no byte may follow (only EOG tokens are allowed), or an EOG token was accepted. */
bool qr_grammar_matcher_done(qr_grammar_matcher *m);

/* Counters for benchmarks: DFA states built and full mask walks run since create. */
void qr_grammar_matcher_stats(const qr_grammar_matcher *m, int64_t *n_states, int64_t *n_mask_walks);

/* ---- JSON schema --------------------------------------------------------------------------- */

/* Compiles a JSON schema to GBNF text (malloc'd, NUL-terminated, in *gbnf). The start rule is named
 * `prefix` ("root" when NULL) and every other rule starts with "<prefix>-", so that several
 * compiled schemas can share one grammar text. Supported: type (one or a list), enum, const,
 * properties / required / additionalProperties (false, true or a schema), items, prefixItems,
 * minItems / maxItems, minLength / maxLength, pattern (a regular-expression subset), format (date,
 * time, date-time, uuid, email, ipv4, uri), minimum 0 / exclusiveMinimum for "no sign", $ref to
 * #/$defs/... or #/definitions/... (recursion allowed), anyOf / oneOf, allOf of one schema, and
 * the annotations (title, description, examples, default, $schema, $id, $comment). Anything else
 * is refused with QR_ERR_UNSUPPORTED and a message naming the keyword and where it is
 * ("json schema: unsupported keyword 'patternProperties' at #/properties/tags"). Objects are
 * generated with their properties in the order the schema declares them, and without undeclared
 * properties unless additionalProperties allows them (an additional property's name is any string:
 * the declared names are not excluded from it). oneOf is compiled as anyOf. Malformed schemas give QR_ERR_INVALID_ARG. */
qr_status qr_json_schema_to_gbnf(const json_t *schema, const char *prefix, char **gbnf, char *err,
                                 size_t err_len);

/* Compiles schema straight to a grammar (qr_json_schema_to_gbnf + qr_grammar_parse). A schema that
 * yields a grammar with no finite sentence through a $ref loop is QR_ERR_INVALID_ARG. */
qr_status qr_json_schema_compile(const json_t *schema, qr_grammar **out, char *err, size_t err_len);

/* The grammar of any JSON object (OpenAI's json_object mode, Ollama's format "json"). */
qr_status qr_json_object_grammar(qr_grammar **out, char *err, size_t err_len);

#endif /* QR_SAMPLING_GRAMMAR_H */
