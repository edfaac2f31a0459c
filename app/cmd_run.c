/* cmd_run.c — `quarrel run` (one generation, streamed to stdout) and `quarrel chat` (interactive). */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "engine.h"
#include "grammar_opt.h"

#define MAX_STOPS 16

typedef struct gen_opts {
    int32_t n_predict;  /* tokens to generate, >= 1 */
    bool ignore_eos;    /* keep going through end-of-generation tokens */
    bool ids_only;      /* print a JSON array of generated ids instead of text */
    bool quiet;         /* no timing line */
    bool verbose;       /* speculative decoding counters after the timing line */
    const char *stops[MAX_STOPS];
    int32_t n_stops;
} gen_opts;

typedef struct gen_stats {
    int32_t n_prompt, n_gen;
    double prefill_s, decode_s;
    int64_t n_drafted, n_accepted; /* speculative decoding */
} gen_stats;

/* Where generate()'s callback puts what qr_generate hands it. */
typedef struct gen_sink {
    FILE *out;        /* the text goes here (unless ids_only) */
    bool ids_only;
    int32_t *ids;     /* [cap] the generated ids */
    int32_t n_ids, cap;
    char **reply;     /* the text is appended to *reply (for chat history) when not NULL */
    size_t *reply_len;
} gen_sink;

/* qr_token_callback: streams the text, collects the id; never stops generation. */
static bool on_token(qr_token token, const char *text, size_t len, void *user_data) {
    gen_sink *k = user_data;
    if (token != QR_TOKEN_NULL && k->n_ids < k->cap) k->ids[k->n_ids++] = token;
    if (!k->ids_only && len) {
        fwrite(text, 1, len, k->out);
        fflush(k->out);
    }
    if (k->reply && len) {
        char *nr = realloc(*k->reply, *k->reply_len + len + 1);
        if (nr) {
            memcpy(nr + *k->reply_len, text, len);
            *k->reply_len += len;
            nr[*k->reply_len] = 0;
            *k->reply = nr;
        }
    }
    return true;
}

/* Appends the sequence `ids` (continuing sequence 0 from its current length) and generates up to
 * o->n_predict tokens with qr_generate, streaming text to `out` (or collecting ids). Text generated is
 * appended to *reply when reply != NULL (for chat history). Returns an exit code. */
static int generate(app_engine *e, const int32_t *ids, size_t n_ids, qr_sampler_chain *smp, const gen_opts *o,
                    FILE *out, gen_stats *stats, char **reply, size_t *reply_len) {
    char err[1024];
    int32_t n_ctx = qr_context_n_ctx(e->ctx), past = qr_kv_seq_len(e->ctx, 0);
    if ((int64_t)past + (int64_t)n_ids >= n_ctx) {
        fprintf(stderr, "quarrel: the prompt is %zu tokens but the context holds %d (%d already used); "
                        "shorten the prompt or raise --ctx\n", n_ids, n_ctx, past);
        return 1;
    }
    gen_sink k = {.out = out, .ids_only = o->ids_only, .cap = o->n_predict, .reply = reply, .reply_len = reply_len};
    if (!(k.ids = malloc(sizeof(int32_t) * (size_t)o->n_predict))) {
        fprintf(stderr, "quarrel: out of memory\n");
        return 1;
    }
    qr_generate_params gp = qr_generate_default_params();
    gp.n_predict = o->n_predict;
    gp.ignore_eos = o->ignore_eos;
    gp.stops = o->stops;
    gp.n_stops = o->n_stops;
    gp.spec = e->spec;
    qr_generate_result r;
    qr_status st = qr_generate(e->ctx, e->tok, smp, ids, n_ids, &gp, on_token, &k, &r, err, sizeof err);
    if (st != QR_OK) fprintf(stderr, "quarrel: %s\n", err);
    else if (r.end == QR_GENERATE_CONTEXT_FULL) fprintf(stderr, "\nquarrel: context full (%d tokens)\n", n_ctx);
    stats->prefill_s += r.prefill_seconds;
    stats->n_prompt += r.n_prompt;
    stats->decode_s += r.decode_seconds;
    stats->n_gen += r.n_generated;
    stats->n_drafted += r.n_drafted;
    stats->n_accepted += r.n_accepted;
    if (o->ids_only && r.n_prompt > 0) { /* the ids so far, also after an error in the loop */
        fputc('[', out);
        for (int32_t i = 0; i < k.n_ids; i++) fprintf(out, i ? ",%d" : "%d", k.ids[i]);
        fputs("]\n", out);
    }
    free(k.ids);
    return st == QR_OK ? 0 : 1;
}

static void print_timing(const app_engine *e, const gen_stats *s) {
    fprintf(stderr, "\nquarrel: load %.0f ms | prefill %d tok, %.1f t/s | decode %d tok, %.1f t/s\n", e->load_ms,
            s->n_prompt, s->prefill_s > 0 ? s->n_prompt / s->prefill_s : 0.0, s->n_gen,
            s->decode_s > 0 ? s->n_gen / s->decode_s : 0.0);
}

/* The speculative decoding counters (quarrel run --verbose), on stderr. */
static void print_spec_stats(const app_engine *e, const gen_stats *s) {
    if (!e->spec) {
        fprintf(stderr, "quarrel: speculative decoding off\n");
        return;
    }
    qr_spec_stats ss;
    qr_spec_get_stats(e->spec, &ss);
    fprintf(stderr, "quarrel: speculative: %lld drafted, %lld accepted (acceptance %.1f%%), %lld verify passes, "
                    "%.2f tokens per target pass\n", (long long)s->n_drafted, (long long)s->n_accepted,
            s->n_drafted ? 100.0 * (double)s->n_accepted / (double)s->n_drafted : 0.0, (long long)ss.n_steps,
            s->n_gen > 1 ? (double)(s->n_gen - 1) / (double)(s->n_gen - 1 - s->n_accepted) : 1.0);
}

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

static void usage_run(FILE *f) {
    fprintf(f, "usage: quarrel run -m MODEL (-p PROMPT | -f FILE | --tokens IDS.json) [options]\n"
               "  -m, --model MODEL    GGUF path or Ollama name (smollm2:135m)\n"
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
               APP_SPEC_HELP APP_SAMPLER_HELP);
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
            if (go.n_stops == MAX_STOPS || !*optarg) {
                fprintf(stderr, "quarrel: --stop: %s\n", *optarg ? "at most 16 stop strings" : "empty stop string");
                return 2;
            }
            go.stops[go.n_stops++] = optarg;
            break;
        case 'i' + 256: go.ignore_eos = true; break;
        case 'I' + 256: go.ids_only = true; break;
        case 'q': go.quiet = true; break;
        case 'v': go.verbose = true; break;
        case 'Z' + 256: arch_stats = true; break;
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
    if (optind < argc) {
        fprintf(stderr, "quarrel: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
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
    if (!rc) rc = generate(&e, ids, n_ids, smp, &go, stdout, &st, NULL, NULL);
    if (!rc && !go.ids_only) fputc('\n', stdout);
    if (!rc && !go.quiet) print_timing(&e, &st);
    if (!rc && go.verbose) print_spec_stats(&e, &st);
    if (!rc && arch_stats) print_arch_stats(&e);
    qr_sampler_chain_free(smp);
    free(ids);
    free(rendered);
    free(text);
    app_engine_close(&e);
    return rc;
}

static void usage_chat(FILE *f) {
    fprintf(f, "usage: quarrel chat -m MODEL [--system TEXT] [-n N] [-t N] [-c N] [sampler options]\n"
               "Type a message and press Enter; /exit or end of input quits, /reset clears the history.\n"
               "  -v, --verbose        print the speculative decoding counters at the end\n"
               APP_ENGINE_HELP APP_SPEC_HELP APP_SAMPLER_HELP);
}

int cmd_chat(int argc, char **argv) {
    static const struct option longopts[] = {{"model", 1, 0, 'm'}, {"system", 1, 0, 'S'}, {"n-predict", 1, 0, 'n'},
                                             {"threads", 1, 0, 't'}, {"ctx", 1, 0, 'c'}, {"help", 0, 0, 'h'},
                                             {"verbose", 0, 0, 'v'}, APP_SAMPLER_LONGOPTS, APP_ENGINE_LONGOPTS,
                                             APP_SPEC_LONGOPTS, {0, 0, 0, 0}};
    app_engine_opts eo = {.spec = qr_spec_default_params()};
    gen_opts go = {.n_predict = 512, .quiet = true};
    qr_sampler_chain_params sp = qr_sampler_chain_default_params();
    const char *system = NULL;
    int c, rc;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:n:t:c:vh", longopts, NULL)) != -1) {
        switch (c) {
        case 'v': go.verbose = true; break;
        case 'm': eo.model = optarg; break;
        case 'S': system = optarg; break;
        case 'n': if ((rc = app_parse_int("-n", optarg, 1, 1 << 24, &go.n_predict))) return rc; break;
        case 't': if ((rc = app_parse_int("-t", optarg, 1, 1024, &eo.n_threads))) return rc; break;
        case 'c': if ((rc = app_parse_int("--ctx", optarg, 16, 1 << 24, &eo.n_ctx))) return rc; break;
        case 'h': usage_chat(stdout); return 0;
        default:
            if ((rc = app_engine_opt(c, optarg, &eo)) >= 0 || (rc = app_sampler_opt(c, optarg, &sp)) >= 0 ||
                (rc = app_spec_opt(c, optarg, &eo)) >= 0) {
                if (rc) return rc;
                break;
            }
            usage_chat(stderr);
            return 2;
        }
    }
    if (!eo.model) {
        usage_chat(stderr);
        return 2;
    }
    if ((rc = app_spec_check(&eo))) return rc;
    char err[1024];
    if (qr_sampler_chain_params_validate(&sp, 0, err, sizeof err) != QR_OK) {
        fprintf(stderr, "quarrel: %s\n", err);
        return 2;
    }
    app_engine e;
    if ((rc = app_engine_open(&e, &eo))) return rc;
    qr_sampler_chain *smp = NULL;
    if (qr_sampler_chain_create(qr_model_n_vocab(e.model), &sp, &smp, err, sizeof err) != QR_OK) {
        fprintf(stderr, "quarrel: %s\n", err);
        app_engine_close(&e);
        return 2;
    }
    json_t *history = json_array();
    if (system) json_array_append_new(history, json_pack("{s:s, s:s}", "role", "system", "content", system));
    char line[16384];
    gen_stats st = {0};
    for (;;) {
        fputs("> ", stderr);
        if (!fgets(line, sizeof line, stdin)) break;
        line[strcspn(line, "\r\n")] = 0;
        if (!strcmp(line, "/exit")) break;
        if (!strcmp(line, "/reset")) {
            json_array_clear(history);
            if (system) json_array_append_new(history, json_pack("{s:s, s:s}", "role", "system", "content", system));
            continue;
        }
        if (!*line) continue;
        json_array_append_new(history, json_pack("{s:s, s:s}", "role", "user", "content", line));
        /* Each turn renders the whole conversation and prefills it from an empty cache (the server's
         * prefix cache is where shared prefixes are reused). */
        char *rendered = NULL;
        if ((rc = app_render_messages(&e, history, &rendered))) break;
        int32_t *ids = NULL;
        size_t n_ids = 0;
        rc = app_tokenize(&e, rendered, strlen(rendered), true, true, &ids, &n_ids);
        free(rendered);
        char *reply = calloc(1, 1);
        size_t reply_len = 0;
        qr_kv_clear(e.ctx);
        if (!rc) rc = generate(&e, ids, n_ids, smp, &go, stdout, &st, &reply, &reply_len);
        fputc('\n', stdout);
        free(ids);
        json_array_append_new(history, json_pack("{s:s, s:s}", "role", "assistant", "content", reply ? reply : ""));
        free(reply);
        if (rc) break;
    }
    fprintf(stderr, "\n");
    if (st.n_gen) print_timing(&e, &st);
    if (go.verbose) print_spec_stats(&e, &st);
    json_decref(history);
    qr_sampler_chain_free(smp);
    app_engine_close(&e);
    return rc;
}
