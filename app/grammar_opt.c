/* grammar_opt.c — grammar options of `quarrel run` (see grammar_opt.h). */
#include "grammar_opt.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/grammar_vocab.h"

int app_attach_grammar(const app_engine *e, const char *grammar_file, const char *json_schema, qr_sampler *smp,
                       qr_grammar_vocab **vocab) {
    *vocab = NULL;
    if (!grammar_file && !json_schema) return 0;
    if (grammar_file && json_schema) {
        fprintf(stderr, "quarrel: give either --grammar-file or --json-schema, not both\n");
        return 2;
    }
    char err[1024];
    char *text = NULL;
    size_t len = 0;
    qr_grammar *g = NULL;
    qr_grammar_matcher *m = NULL;
    int rc = 2;
    if (grammar_file) {
        if ((rc = app_read_file(grammar_file, &text, &len))) return rc;
        rc = 2;
        if (qr_grammar_parse(text, len, "root", &g, err, sizeof err) != QR_OK) {
            fprintf(stderr, "quarrel: %s: %s\n", grammar_file, err);
            goto out;
        }
    } else {
        json_error_t je;
        json_t *schema = NULL;
        if (json_schema[0] == '{') {
            schema = json_loads(json_schema, 0, &je);
        } else {
            if ((rc = app_read_file(json_schema, &text, &len))) return rc;
            rc = 2;
            schema = json_loadb(text, len, 0, &je);
        }
        if (!schema) {
            fprintf(stderr, "quarrel: --json-schema: malformed JSON at line %d: %s\n", je.line, je.text);
            goto out;
        }
        const qr_status st = qr_json_schema_compile(schema, &g, err, sizeof err);
        json_decref(schema);
        if (st != QR_OK) {
            fprintf(stderr, "quarrel: --json-schema: %s\n", err);
            goto out;
        }
    }
    rc = 1;
    if (qr_grammar_vocab_from_tokenizer(e->tok, vocab, err, sizeof err) != QR_OK ||
        qr_grammar_matcher_create(g, *vocab, &m, err, sizeof err) != QR_OK) {
        fprintf(stderr, "quarrel: grammar: %s\n", err);
        qr_grammar_vocab_free(*vocab);
        *vocab = NULL;
        goto out;
    }
    qr_sampler_set_grammar(smp, m);
    rc = 0;
out:
    qr_grammar_free(g);
    free(text);
    return rc;
}
