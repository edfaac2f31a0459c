/* grammar_api.c — qr_sampler_chain_set_grammar (quarrel.h): a GBNF grammar or a JSON schema compiled
 * against a tokenizer's vocabulary and attached to a public sampler chain. It lives in sched/ because it
 * needs both the tokenizer and the sampler (sched/grammar_vocab.c builds the trie). */
#include <jansson.h>
#include <string.h>

#include "sampling/sampler.h"
#include "sched/grammar_vocab.h"
#include "util/util.h"

qr_status qr_sampler_chain_set_grammar(qr_sampler_chain *s, const qr_tokenizer *tok, const char *gbnf,
                                       const char *json_schema, char *err, size_t err_len) {
    if (!s) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "qr_sampler_chain_set_grammar: NULL sampler");
    if (gbnf && json_schema)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "give a GBNF grammar or a JSON schema, not both");
    qr_sampler *smp = qr_sampler_chain_sampler(s);
    if (!gbnf && !json_schema) {
        qr_sampler_set_grammar(smp, NULL);
        qr_sampler_chain_keep_vocab(s, NULL);
        return QR_OK;
    }
    if (!tok) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "qr_sampler_chain_set_grammar: NULL tokenizer");
    qr_grammar *g = NULL;
    qr_grammar_vocab *v = NULL;
    qr_grammar_matcher *m = NULL;
    qr_status st;
    if (gbnf) {
        st = qr_grammar_parse(gbnf, strlen(gbnf), "root", &g, err, err_len);
    } else {
        json_error_t je;
        json_t *schema = json_loads(json_schema, 0, &je);
        if (!schema)
            return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "JSON schema: malformed JSON at line %d, column %d: %s",
                           je.line, je.column, je.text);
        st = qr_json_schema_compile(schema, &g, err, err_len);
        json_decref(schema);
    }
    if (st == QR_OK) st = qr_grammar_vocab_from_tokenizer(tok, &v, err, err_len);
    if (st == QR_OK) st = qr_grammar_matcher_create(g, v, &m, err, err_len);
    qr_grammar_free(g);
    if (st != QR_OK) {
        qr_grammar_vocab_free(v);
        return st;
    }
    qr_sampler_set_grammar(smp, m); /* frees the previous matcher, then its vocabulary goes */
    qr_sampler_chain_keep_vocab(s, v);
    return QR_OK;
}
