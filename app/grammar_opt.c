/* grammar_opt.c — grammar options of `quarrel run` (see grammar_opt.h). */
#include "grammar_opt.h"

#include <stdio.h>
#include <stdlib.h>

int app_attach_grammar(const app_engine *e, const char *grammar_file, const char *json_schema, qr_sampler_chain *smp) {
    if (!grammar_file && !json_schema) return 0;
    if (grammar_file && json_schema) {
        fprintf(stderr, "quarrel: give either --grammar-file or --json-schema, not both\n");
        return 2;
    }
    char err[1024], *text = NULL;
    size_t len = 0;
    const char *path = grammar_file ? grammar_file : json_schema[0] == '{' ? NULL : json_schema;
    if (path) {
        int rc = app_read_file(path, &text, &len);
        if (rc) return rc;
    }
    const char *src = text ? text : json_schema;
    const qr_status st = qr_sampler_chain_set_grammar(smp, e->tok, grammar_file ? src : NULL,
                                                      grammar_file ? NULL : src, err, sizeof err);
    if (st != QR_OK)
        fprintf(stderr, "quarrel: %s: %s\n", grammar_file ? grammar_file : path ? path : "--json-schema", err);
    free(text);
    return st == QR_OK ? 0 : st == QR_ERR_INVALID_ARG ? 2 : 1;
}
