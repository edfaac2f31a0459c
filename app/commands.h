/* commands.h — every `quarrel` subcommand: int cmd_NAME(int argc, char **argv), argv[0] = NAME.
 * Each returns the process exit code: 0 success, 1 runtime failure, 2 usage error. */
#ifndef QR_APP_COMMANDS_H
#define QR_APP_COMMANDS_H

#include <stdio.h>

int cmd_inspect(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_template(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_keys(int argc, char **argv);
int cmd_embed(int argc, char **argv);
int cmd_push(int argc, char **argv);
int cmd_search(int argc, char **argv);
int cmd_list(int argc, char **argv);
int cmd_worker(int argc, char **argv);

/* cmd_list.c: "models (quarrel list): NAME, ..." — the names that resolve as MODEL — for the --help
 * texts; nothing when there are none. */
void app_print_model_names(FILE *f);

#endif
