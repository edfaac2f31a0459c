/* cmd_synth.c — `quarrel synth`: write a deterministic random-weight GGUF model. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "internal.h" /* the synthetic model writer */

static void usage(FILE *f) {
    fprintf(f,
            "usage: quarrel synth --arch ARCH --preset NAME -o OUT.gguf [--type T] [--seed S] [--pure] [--layers N] [-t N]\n"
            "       quarrel synth --arch eagle3 --preset NAME [--target-arch ARCH] [eagle3 options] -o OUT.gguf ...\n"
            "       quarrel synth --list\n\n"
            "Writes a model with real shapes, random weights and a synthetic tokenizer that quarrel and\n"
            "llama.cpp both load. The same arguments give a byte-identical file.\n\n"
            "  --arch ARCH     architecture (llama, gemma3, bert, nomic-bert); optional when the preset name is unique\n"
            "  --preset NAME   shapes to use (see --list)\n"
            "  -o, --output F  output file\n"
            "  --type T        file type, as llama-quantize names them (default F16):\n"
            "                  %s\n"
            "  --pure          no mix rules: every quantizable weight gets the base type\n"
            "  --seed S        weights seed (default 0)\n"
            "  --layers N      N layers instead of the preset's (the same shapes: quick speed probes)\n"
            "  --pooling P     write {arch}.pooling_type: mean, cls or last (an embedding model)\n"
            "  --tokenizer-from M  copy the tokenizer of GGUF M (the preset's vocabulary size): a draft model or\n"
            "                  EAGLE-3 head for a real model\n"
            "  -t, --threads N worker threads (default: all CPUs; the output does not depend on it)\n"
            "  --list          print the presets and exit\n"
            "  -h, --help\n\n"
            "EAGLE-3 speculative-decoding heads (--arch eagle3; --preset names the TARGET's preset, so the head pairs\n"
            "with `synth --arch TARGET_ARCH --preset NAME`: its tokenizer, width and layers):\n"
            "  --target-arch A     the target preset's architecture (default llama)\n"
            "  --draft-vocab N     draft vocabulary of N tokens with a d2t table (default: half the target's)\n"
            "  --no-d2t            no d2t: the draft vocabulary is the target's\n"
            "  --no-output         no output.weight: the target's is shared (implies --no-d2t)\n"
            "  --no-token-embd     no token_embd.weight: the target's is shared\n"
            "  --head-embd E       the head's width (default: the target's n_embd)\n"
            "  --norm-before-fc    write eagle3.norm_before_fc = true and enc.output_norm.weight\n\n"
            "Exit status: 0 ok, 1 failure, 2 usage error.\n",
            qr_ftype_names());
}

static void list_presets(void) {
    printf("%-8s %-16s %6s %6s %6s %6s %4s %5s %8s %12s\n", "arch", "preset", "layers", "d", "ffn", "heads", "kv", "hdim",
           "vocab", "rope_theta");
    for (size_t i = 0; i < qr_synth_n_presets(); i++) {
        const qr_synth_preset *p = qr_synth_preset_at(i);
        printf("%-8s %-16s %6u %6u %6u %6u %4u %5u %8u %12.0f%s%s\n", p->arch, p->name, p->n_layer, p->n_embd, p->n_ff,
               p->n_head, p->n_head_kv, p->head_dim, p->n_vocab, (double)p->rope_theta,
               p->tied_output ? " tied" : "", p->rope_scaling == QR_SYNTH_ROPE_LLAMA3 ? " llama3-rope" : "");
    }
}

/* Parses a non-negative integer option value; false on garbage. */
static bool parse_u64(const char *s, uint64_t *out) {
    if (!s || !*s || *s == '-') return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || *end) return false;
    *out = v;
    return true;
}

int cmd_synth(int argc, char **argv) {
    qr_synth_options o = {.type = "F16", .progress = true};
    const char *out = NULL, *eagle3_flag = NULL; /* the last eagle3 option seen */
    bool no_d2t = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--list")) {
            list_presets();
            return 0;
        } else if (!strcmp(a, "--pure")) {
            o.pure = true;
        } else if (!strcmp(a, "--no-d2t") || !strcmp(a, "--no-output") || !strcmp(a, "--no-token-embd") ||
                   !strcmp(a, "--norm-before-fc")) {
            eagle3_flag = a;
            if (!strcmp(a, "--no-d2t")) no_d2t = true;
            else if (!strcmp(a, "--no-output")) o.eagle3.no_output = true;
            else if (!strcmp(a, "--no-token-embd")) o.eagle3.no_token_embd = true;
            else o.eagle3.norm_before_fc = true;
        } else if (!strcmp(a, "--target-arch") || !strcmp(a, "--draft-vocab") || !strcmp(a, "--head-embd")) {
            if (!val) {
                fprintf(stderr, "quarrel synth: %s needs a value\n", a);
                return 2;
            }
            i++;
            eagle3_flag = a;
            uint64_t n = 0;
            if (!strcmp(a, "--target-arch")) {
                o.eagle3.target_arch = val;
            } else if (!parse_u64(val, &n) || n == 0 || n > (1u << 30)) {
                fprintf(stderr, "quarrel synth: %s needs a positive count, got '%s'\n", a, val);
                return 2;
            } else if (!strcmp(a, "--draft-vocab")) {
                o.eagle3.draft_vocab = (int32_t)n;
            } else {
                o.eagle3.n_embd = (int32_t)n;
            }
        } else if (!strcmp(a, "--arch") || !strcmp(a, "--preset") || !strcmp(a, "-o") || !strcmp(a, "--output") ||
                   !strcmp(a, "--type") || !strcmp(a, "--seed") || !strcmp(a, "-t") || !strcmp(a, "--threads") ||
                   !strcmp(a, "--pooling") || !strcmp(a, "--layers") || !strcmp(a, "--tokenizer-from")) {
            if (!val) {
                fprintf(stderr, "quarrel synth: %s needs a value\n", a);
                return 2;
            }
            i++;
            if (!strcmp(a, "--arch")) o.arch = val;
            else if (!strcmp(a, "--preset")) o.preset = val;
            else if (!strcmp(a, "-o") || !strcmp(a, "--output")) out = val;
            else if (!strcmp(a, "--type")) o.type = val;
            else if (!strcmp(a, "--tokenizer-from")) o.tokenizer_from = val;
            else if (!strcmp(a, "--pooling")) {
                o.pooling_type = !strcmp(val, "mean") ? 1 : !strcmp(val, "cls") ? 2 : !strcmp(val, "last") ? 3 : -1;
                if (o.pooling_type < 0) {
                    fprintf(stderr, "quarrel synth: --pooling needs mean, cls or last, got '%s'\n", val);
                    return 2;
                }
            }
            else if (!strcmp(a, "--seed")) {
                if (!parse_u64(val, &o.seed)) {
                    fprintf(stderr, "quarrel synth: --seed needs a non-negative integer, got '%s'\n", val);
                    return 2;
                }
            } else if (!strcmp(a, "--layers")) {
                uint64_t n;
                if (!parse_u64(val, &n) || n == 0 || n > 4096) {
                    fprintf(stderr, "quarrel synth: --layers needs a layer count in 1..4096, got '%s'\n", val);
                    return 2;
                }
                o.n_layer = (int32_t)n;
            } else {
                uint64_t t;
                if (!parse_u64(val, &t) || t == 0 || t > 1024) {
                    fprintf(stderr, "quarrel synth: %s needs a thread count in 1..1024, got '%s'\n", a, val);
                    return 2;
                }
                o.n_threads = (int)t;
            }
        } else {
            fprintf(stderr, "quarrel synth: unknown argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!o.preset || !out) {
        fprintf(stderr, "quarrel synth: %s is required\n", !o.preset ? "--preset" : "-o OUT.gguf");
        usage(stderr);
        return 2;
    }
    const bool eagle3 = o.arch && !strcmp(o.arch, "eagle3");
    if (eagle3_flag && !eagle3) {
        fprintf(stderr, "quarrel synth: %s is an option of EAGLE-3 heads (--arch eagle3)\n", eagle3_flag);
        return 2;
    }
    if (no_d2t && o.eagle3.draft_vocab > 0) {
        fprintf(stderr, "quarrel synth: --no-d2t and --draft-vocab exclude each other\n");
        return 2;
    }
    if (eagle3 && (no_d2t || o.eagle3.no_output)) { /* the draft vocabulary is the target preset's */
        const qr_synth_preset *tp = qr_synth_find_preset(o.eagle3.target_arch ? o.eagle3.target_arch : "llama", o.preset);
        if (tp && o.eagle3.draft_vocab == 0) o.eagle3.draft_vocab = (int32_t)tp->n_vocab;
    }
    qr_synth_stats stats;
    char err[512];
    qr_status st = qr_synth_write(&o, out, &stats, err, sizeof err);
    if (st != QR_OK) {
        fprintf(stderr, "quarrel synth: %s\n", err);
        return st == QR_ERR_INVALID_ARG ? 2 : 1;
    }
    fprintf(stderr, "synth: wrote %s: %" PRIu64 " tensors, %.2f M parameters, %.2f MiB in %.1f s\n", out, stats.n_tensors,
            (double)stats.n_params / 1e6, (double)stats.file_size / 1048576.0, stats.seconds);
    return 0;
}
