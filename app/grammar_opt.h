/* grammar_opt.h — `quarrel run --grammar-file / --json-schema`: read the grammar and attach it to the
 * sampler chain (public API: qr_sampler_chain_set_grammar). */
#ifndef QR_APP_GRAMMAR_OPT_H
#define QR_APP_GRAMMAR_OPT_H

#include "engine.h"

/* Reads grammar_file (GBNF) or json_schema (inline JSON when it starts with '{', else a file holding the
 * schema) -- at most one of them non-NULL; both NULL: nothing to do -- and attaches it to smp. Prints
 * its error; returns an exit code (0 ok, 1 failure, 2 bad grammar or usage). */
int app_attach_grammar(const app_engine *e, const char *grammar_file, const char *json_schema, qr_sampler_chain *smp);

#endif /* QR_APP_GRAMMAR_OPT_H */
