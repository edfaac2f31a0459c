/* placeholder, replaced by the GGUF work */
#include <stdio.h>
#include "commands.h"
int cmd_inspect(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "inspect: not built yet\n"); return 1; }
