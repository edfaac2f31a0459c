/* cmd_run.c — `quarrel run` (one generation, streamed to stdout; `quarrel run MODEL` without a prompt
 * is `quarrel chat -m MODEL`, as with Ollama). */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "engine.h"
#include "generate.h"
#include "grammar_opt.h"

/* The MoE / SSM counters of the context (qr_context_arch_stats) in Prometheus text form, on stderr;
 * nothing for models without experts or SSM layers. */
static void print_arch_stats(const app_engine *e) {
    const qr_arch_stats *a = qr_context_arch_stats(e->ctx);
    if (a->moe_layer_calls) {
        fprintf(stderr, "quarrel_moe_layer_latency_seconds_sum %.6f\nquarrel_moe_layer_latency_seconds_count %llu\n",
                a->moe_layer_seconds, (unsigned long long)a->moe_layer_calls);
        fprintf(stderr, "quarrel_moe_routing_latency_seconds_sum %.6f\nquarrel_moe_routing_latency_seconds_count %llu\n",
                a->moe_routing_seconds, (unsigned long long)a->moe_layer_calls);
        uint64_t total = 0, used = 0;
        for (int32_t l = 0; l < a->n_layer && a->expert_selection; l++) {
            uint64_t lt = 0;
            for (int32_t x = 0; x < a->n_expert; x++) lt += a->expert_selection[(int64_t)l * a->n_expert + x];
            if (!lt) continue; /* not an MoE layer */
            for (int32_t x = 0; x < a->n_expert; x++) {
                const uint64_t c = a->expert_selection[(int64_t)l * a->n_expert + x];
                fprintf(stderr, "quarrel_moe_expert_selection{layer=\"%d\",expert=\"%d\"} %llu\n", l, x,
                        (unsigned long long)c);
                used += c > 0;
                total++;
            }
        }
        fprintf(stderr, "quarrel_moe_expert_utilization %.4f\n", total ? (double)used / (double)total : 0.0);
    }
    if (a->ssm_calls) {
        fprintf(stderr, "quarrel_ssm_scan_latency_seconds_sum %.6f\nquarrel_ssm_scan_latency_seconds_count %llu\n",
                a->ssm_scan_seconds, (unsigned long long)a->ssm_calls);
        fprintf(stderr, "quarrel_ssm_conv_latency_seconds_sum %.6f\nquarrel_ssm_conv_latency_seconds_count %llu\n",
                a->ssm_conv_seconds, (unsigned long long)a->ssm_calls);
        fprintf(stderr, "quarrel_ssm_state_bytes %llu\nquarrel_ssm_divergence_total %llu\n",
                (unsigned long long)a->ssm_state_bytes, (unsigned long long)a->ssm_divergence_total);
    }
}

/* `quarrel run MODEL` with no prompt: `quarrel chat` on the same options, a positional MODEL as -m (the
 * options only run knows are refused by chat's parser, with its usage). positional: the argv entry
 * that named the model (left out), or NULL when -m did. */
static int run_as_chat(int argc, char **argv, const char *model, const char *positional) {
    char **av = calloc((size_t)argc + 3, sizeof *av);
    if (!av) return fprintf(stderr, "quarrel: out of memory\n"), 1;
    int n = 0;
    av[n++] = "chat";
    av[n++] = "-m";
    av[n++] = (char *)model;
    for (int i = 1; i < argc; i++)
        if (argv[i] != positional) av[n++] = argv[i];
    const int rc = cmd_chat(n, av);
    free(av);
    return rc;
}

static void usage_run(FILE *f) {
    fprintf(f, "usage: quarrel run -m MODEL (-p PROMPT | -f FILE | --tokens IDS.json) [options]\n"
               "       quarrel run MODEL [PROMPT]   (no prompt: an interactive chat, as quarrel chat)\n"
               "  -m, --model MODEL    GGUF path, a name in the model directory (smollm2) or an Ollama name\n"
               "  -p, --prompt TEXT    prompt text\n"
               "  -f, --file FILE      read the prompt from FILE\n"
               "  --tokens IDS.json    the prompt as a JSON array of token ids (no BOS added)\n"
               "  --chat               wrap the prompt in the model's chat template (user turn)\n"
               "  --system TEXT        system message (with --chat)\n"
               "  -n, --n-predict N    tokens to generate (default 128)\n"
               "  -t, --threads N      CPU threads (default: all)\n"
               "  -c, --ctx N          context size in tokens (default min(train, 4096))\n"
               "  --stop TEXT          stop string (repeatable, up to 16)\n"
               "  --ignore-eos         do not stop at end-of-generation tokens\n"
               "  --ids-only           print the generated token ids as a JSON array\n"
               "  -q, --quiet          no timing line\n"
               "  --stats              print the MoE / SSM counters (Prometheus text) on stderr\n"
               "  --grammar-file FILE  constrain the output to a GBNF grammar (start rule: root)\n"
               "  --json-schema S      constrain the output to a JSON schema (inline JSON or a file)\n"
               "  -v, --verbose        print the speculative decoding counters (acceptance rate)\n" APP_ENGINE_HELP
               APP_SPEC_HELP
               APP_SAMPLER_HELP);
    app_print_model_names(f);
}

int cmd_run(int argc, char **argv) {
    static const struct option longopts[] = {
        {"model", 1, 0, 'm'}, {"prompt", 1, 0, 'p'}, {"file", 1, 0, 'f'}, {"tokens", 1, 0, 't' + 256},
        {"chat", 0, 0, 'C'}, {"system", 1, 0, 'S'}, {"n-predict", 1, 0, 'n'}, {"threads", 1, 0, 't'},
        {"ctx", 1, 0, 'c'}, {"stop", 1, 0, 's' + 256}, {"ignore-eos", 0, 0, 'i' + 256},
        {"ids-only", 0, 0, 'I' + 256}, {"quiet", 0, 0, 'q'}, {"stats", 0, 0, 'Z' + 256}, {"help", 0, 0, 'h'},
        {"grammar-file", 1, 0, 'G' + 256}, {"json-schema", 1, 0, 'J' + 256}, {"verbose", 0, 0, 'v'},
        APP_SAMPLER_LONGOPTS, APP_ENGINE_LONGOPTS, APP_SPEC_LONGOPTS, {0, 0, 0, 0}};
    app_engine_opts eo = {.spec = qr_spec_default_params()};
    gen_opts go = {.n_predict = 128};
    qr_sampler_chain_params sp = qr_sampler_chain_default_params();
    const char *prompt = NULL, *file = NULL, *tokens = NULL, *system = NULL, *grammar_file = NULL, *schema = NULL;
    bool chat = false, arch_stats = false;
    int c, rc;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:p:f:n:t:c:qvh", longopts, NULL)) != -1) {
        switch (c) {
        case 'G' + 256: grammar_file = optarg; break;
        case 'J' + 256: schema = optarg; break;
        case 'm': eo.model = optarg; break;
        case 'p': prompt = optarg; break;
        case 'f': file = optarg; break;
        case 't' + 256: tokens = optarg; break;
        case 'C': chat = true; break;
        case 'S': system = optarg; break;
        case 'n': if ((rc = app_parse_int("-n", optarg, 1, 1 << 24, &go.n_predict))) return rc; break;
        case 't': if ((rc = app_parse_int("-t", optarg, 1, 1024, &eo.n_threads))) return rc; break;
        case 'c': if ((rc = app_parse_int("--ctx", optarg, 16, 1 << 24, &eo.n_ctx))) return rc; break;
        case 's' + 256:
            if (go.n_stops == APP_MAX_STOPS || !*optarg) {
                fprintf(stderr, "quarrel: --stop: %s\n", *optarg ? "at most 16 stop strings" : "empty stop string");
                return 2;
            }
            go.stops[go.n_stops++] = optarg;
            break;
        case 'i' + 256: go.ignore_eos = true; break;
        case 'I' + 256: go.ids_only = true; break;
        case 'q': go.quiet = true; break;
        case 'Z' + 256: arch_stats = true; break;
        case 'v': go.verbose = true; break;
        case 'h': usage_run(stdout); return 0;
        default:
            if ((rc = app_engine_opt(c, optarg, &eo)) >= 0 || (rc = app_sampler_opt(c, optarg, &sp)) >= 0 ||
                (rc = app_spec_opt(c, optarg, &eo)) >= 0) {
                if (rc) return rc;
                break;
            }
            usage_run(stderr);
            return 2;
        }
    }
    const char *positional = NULL;
    if (!eo.model && optind < argc) eo.model = positional = argv[optind++]; /* quarrel run MODEL [PROMPT] */
    if (!prompt && !file && !tokens && optind < argc) prompt = argv[optind++];
    if (optind < argc) {
        fprintf(stderr, "quarrel: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (eo.model && !prompt && !file && !tokens) return run_as_chat(argc, argv, eo.model, positional);
    if (!eo.model || (!prompt + !file + !tokens) != 2) {
        fprintf(stderr, "quarrel run: need -m MODEL and exactly one of -p, -f, --tokens\n");
        usage_run(stderr);
        return 2;
    }
    if ((rc = app_spec_check(&eo))) return rc;
    char err[1024];
    if (qr_sampler_chain_params_validate(&sp, 0, err, sizeof err) != QR_OK) {
        fprintf(stderr, "quarrel: %s\n", err);
        return 2;
    }
    char *text = NULL;
    size_t text_len = 0;
    if (file && (rc = app_read_file(file, &text, &text_len))) return rc;
    if (prompt) text_len = strlen(prompt);
    if (!tokens && text_len == 0) {
        fprintf(stderr, "quarrel: the prompt is empty\n");
        free(text);
        return 2;
    }
    app_engine e;
    if ((rc = app_engine_open(&e, &eo))) {
        free(text);
        return rc;
    }
    int32_t *ids = NULL;
    size_t n_ids = 0;
    char *rendered = NULL;
    qr_sampler_chain *smp = NULL;
    if (tokens) {
        rc = app_read_ids_json(tokens, qr_model_n_vocab(e.model), &ids, &n_ids);
        if (!rc && n_ids == 0) {
            fprintf(stderr, "quarrel: %s: the prompt is empty\n", tokens);
            rc = 2;
        }
    } else if (chat) {
        rc = app_render_chat(&e, system, prompt ? prompt : text, &rendered);
        if (!rc) rc = app_tokenize(&e, rendered, strlen(rendered), true, true, &ids, &n_ids);
    } else {
        rc = app_tokenize(&e, prompt ? prompt : text, text_len, true, false, &ids, &n_ids);
    }
    if (!rc && qr_sampler_chain_create(qr_model_n_vocab(e.model), &sp, &smp, err, sizeof err) != QR_OK) {
        fprintf(stderr, "quarrel: %s\n", err);
        rc = 2;
    }
    if (!rc) rc = app_attach_grammar(&e, grammar_file, schema, smp);
    gen_stats st = {0};
    if (!rc && arch_stats) qr_context_set_arch_stats(e.ctx, true); /* expert counts on the GPU too */
    if (!rc) rc = app_generate(&e, ids, n_ids, smp, &go, stdout, &st, NULL, NULL);
    if (!rc && !go.ids_only) fputc('\n', stdout);
    if (!rc && !go.quiet) app_print_timing(&e, &st);
    if (!rc && go.verbose) app_print_spec_stats(&e, &st);
    if (!rc && arch_stats) print_arch_stats(&e);
    qr_sampler_chain_free(smp);
    free(ids);
    free(rendered);
    free(text);
    app_engine_close(&e);
    return rc;
}
