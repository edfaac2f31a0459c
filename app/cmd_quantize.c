/* cmd_quantize.c — `quarrel quantize IN.gguf OUT.gguf TYPE [-t N]`. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "internal.h" /* the GGUF converter */

static void usage(FILE *f) {
    fprintf(f,
            "usage: quarrel quantize IN.gguf OUT.gguf TYPE [-t N] [--pure] [--allow-requantize] [-v]\n\n"
            "Converts every tensor of IN to the type llama-quantize would give it for TYPE (norms and other\n"
            "1-D tensors stay as they are; the _M mixes keep some attn_v/ffn_down layers at Q6_K; output.weight\n"
            "gets Q6_K; K-quants fall back to Q5_0/Q5_1/Q8_0/Q4_0 when a row is not a multiple of 256).\n\n"
            "  TYPE                 %s\n"
            "  -t, --threads N      worker threads (default: all CPUs; the output does not depend on it)\n"
            "  --pure               every quantizable weight gets the base type (no mix rules)\n"
            "  --allow-requantize   accept inputs that are already quantized\n"
            "  -v, --verbose        one line per tensor\n"
            "  -h, --help\n\n"
            "Exit status: 0 ok, 1 failure, 2 usage error.\n",
            qr_ftype_names());
}

int cmd_quantize(int argc, char **argv) {
    qr_quantize_options o = {.progress = true};
    const char *pos[3] = {NULL, NULL, NULL};
    int n_pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--pure")) {
            o.pure = true;
        } else if (!strcmp(a, "--allow-requantize")) {
            o.allow_requantize = true;
        } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
            o.verbose = true;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            const char *val = i + 1 < argc ? argv[++i] : NULL;
            char *end = NULL;
            errno = 0;
            long t = val ? strtol(val, &end, 10) : 0;
            if (!val || errno || *end || t < 1 || t > 1024) {
                fprintf(stderr, "quarrel quantize: %s needs a thread count in 1..1024\n", a);
                return 2;
            }
            o.n_threads = (int)t;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "quarrel quantize: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        } else if (n_pos < 3) {
            pos[n_pos++] = a;
        } else {
            fprintf(stderr, "quarrel quantize: too many arguments ('%s')\n", a);
            return 2;
        }
    }
    if (n_pos != 3) {
        fprintf(stderr, "quarrel quantize: expected IN.gguf OUT.gguf TYPE\n");
        usage(stderr);
        return 2;
    }
    o.ftype = pos[2];
    if (!qr_ftype_from_name(o.ftype)) {
        fprintf(stderr, "quarrel quantize: unknown type '%s'; expected one of: %s\n", o.ftype, qr_ftype_names());
        return 2;
    }
    if (!strcmp(pos[0], pos[1])) {
        fprintf(stderr, "quarrel quantize: input and output are the same file\n");
        return 2;
    }
    qr_quantize_stats s;
    char err[512];
    qr_status st = qr_quantize_model(pos[0], pos[1], &o, &s, err, sizeof err);
    if (st != QR_OK) {
        fprintf(stderr, "quarrel quantize: %s\n", err);
        return 1;
    }
    fprintf(stderr,
            "quantize: %s -> %s (%s): %" PRIu64 " tensors, %" PRIu64 " converted, %" PRIu64
            " fallbacks, %.2f MiB -> %.2f MiB in %.1f s\n",
            pos[0], pos[1], o.ftype, s.n_tensors, s.n_quantized, s.n_fallback, (double)s.bytes_in / 1048576.0,
            (double)s.bytes_out / 1048576.0, s.seconds);
    return 0;
}
