/* cmd_worker.c — `quarrel worker`: one rank (1..N-1) of a tensor-parallel model whose ranks are processes on this
 * host or several. It loads the model, keeps its rank's shard, joins the driver (rank 0: `quarrel run / bench /
 * serve ... --tp N --tp-addr HOST:PORT`) at --tp-addr, runs the driver's passes until the driver exits, then exits. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "engine.h"

static void usage_worker(FILE *f) {
    fprintf(f, "usage: quarrel worker -m MODEL --tp N --tp-rank R --tp-addr HOST:PORT [options]\n"
               "Runs rank R (1..N-1) of MODEL split over N processes (one GPU or a CPU share each), for the driver\n"
               "(rank 0: quarrel run / bench / serve ... --tp N --tp-addr HOST:PORT) listening at HOST:PORT.\n"
               "Exits when the driver does. Waits QUARREL_TP_TIMEOUT seconds (default 300) for the driver.\n"
               "  -m, --model MODEL    the same GGUF file as the driver's (checked)\n"
               "  -t, --threads N      CPU threads of this rank (default all)\n" APP_ENGINE_HELP);
}

int cmd_worker(int argc, char **argv) {
    static const struct option longopts[] = {{"model", 1, 0, 'm'}, {"threads", 1, 0, 't'}, {"help", 0, 0, 'h'},
                                             APP_ENGINE_LONGOPTS, {0, 0, 0, 0}};
    app_engine_opts eo = {0};
    int c, rc;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:t:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'm': eo.model = optarg; break;
        case 't':
            if ((rc = app_parse_int("-t", optarg, 1, 1024, &eo.n_threads))) return rc;
            break;
        case 'h': usage_worker(stdout); return 0;
        default:
            if ((rc = app_engine_opt(c, optarg, &eo)) >= 0) {
                if (rc) return rc;
                break;
            }
            usage_worker(stderr);
            return 2;
        }
    }
    if (!eo.model || optind < argc || eo.tp < 2 || !eo.tp_addr || eo.tp_rank < 1 || eo.tp_rank >= eo.tp) {
        if (eo.model && optind >= argc)
            fprintf(stderr, "quarrel worker: needs --tp N (N > 1), --tp-addr HOST:PORT and --tp-rank R in 1..N-1\n");
        usage_worker(stderr);
        return 2;
    }
    app_engine e;
    return app_engine_open(&e, &eo); /* a worker rank serves and exits inside; a failure returns here */
}
