/* commands.h — every `quarrel` subcommand: int cmd_NAME(int argc, char **argv), argv[0] = NAME.
 * Each returns the process exit code: 0 success, 1 runtime failure, 2 usage error. */
#ifndef QR_APP_COMMANDS_H
#define QR_APP_COMMANDS_H

int cmd_inspect(int argc, char **argv);

#endif
