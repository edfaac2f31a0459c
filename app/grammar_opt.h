/* grammar_opt.h — `quarrel run --grammar-file / --json-schema`: compile the grammar and attach it
 * to a sampler. */
#ifndef QR_APP_GRAMMAR_OPT_H
#define QR_APP_GRAMMAR_OPT_H

#include "engine.h"
#include "sampling/grammar.h"

/* Compiles grammar_file (GBNF) or json_schema (inline JSON when it starts with '{', else a file
 * holding the schema) -- at most one of them non-NULL; both NULL: nothing to do -- and attaches a
 * matcher to smp. *vocab receives the vocabulary trie, which must outlive smp (free it after the
 * sampler with qr_grammar_vocab_free). Prints its error; returns an exit code (2: bad grammar). */
int app_attach_grammar(const app_engine *e, const char *grammar_file, const char *json_schema, qr_sampler *smp,
                       qr_grammar_vocab **vocab);

#endif /* QR_APP_GRAMMAR_OPT_H */
