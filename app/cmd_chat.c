/* cmd_chat.c — `quarrel chat`: an interactive conversation with the model's chat template. Ctrl-C
 * stops the reply being written (what it said so far stays in the conversation) or, at the prompt,
 * drops the line being typed; slash commands clear, save, load and tune the conversation; a line
 * ending in a backslash, or a block between two """ lines, is one multi-line message; each reply
 * ends with a status line (tokens, tokens/s). */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "engine.h"
#include "generate.h"

static volatile sig_atomic_t g_interrupt; /* set by SIGINT; cleared before each reply and prompt */

static void on_sigint(int sig) {
    (void)sig;
    g_interrupt = 1;
}

/* SIGINT sets g_interrupt and interrupts a blocking read (no SA_RESTART). */
static void catch_sigint(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
}

typedef struct chat {
    json_t *history;            /* [{role, content}], the system message first when there is one */
    char *system;               /* malloc'd or NULL */
    qr_sampler_chain_params sp;
    qr_sampler_chain *smp;
    gen_opts go;
    app_engine *e;
} chat;

static void reset_history(chat *c) {
    json_array_clear(c->history);
    if (c->system && *c->system)
        json_array_append_new(c->history, json_pack("{s:s, s:s}", "role", "system", "content", c->system));
}

/* Reads one message from stdin: a line; lines ending in '\' continue it; a line `"""` starts a block
 * that runs to the next `"""` line. Returns a malloc'd string ("" after a Ctrl-C, which drops the
 * partial input), or NULL at end of input. */
static char *read_message(void) {
    size_t len = 0, cap = 256;
    char *msg = malloc(cap), line[16384];
    if (!msg) return NULL;
    msg[0] = 0;
    bool block = false, more = false, first = true;
    for (;;) {
        fputs(first ? ">>> " : "... ", stderr);
        first = false;
        errno = 0;
        if (!fgets(line, sizeof line, stdin)) {
            if (g_interrupt || errno == EINTR) {
                clearerr(stdin);
                g_interrupt = 0;
                fputs("\n(Ctrl-D or /exit quits)\n", stderr);
                msg[0] = 0;
                return msg;
            }
            if (len) return msg; /* end of input inside a message: send what there is */
            free(msg);
            return NULL;
        }
        line[strcspn(line, "\r\n")] = 0;
        size_t n = strlen(line);
        if (!block && len == 0 && !strcmp(line, "\"\"\"")) {
            block = true;
            continue;
        }
        if (block && !strcmp(line, "\"\"\"")) return msg;
        more = !block && n && line[n - 1] == '\\';
        if (more) line[--n] = 0;
        if (len + n + 2 > cap) {
            cap = (len + n + 2) * 2;
            char *nm = realloc(msg, cap);
            if (!nm) {
                free(msg);
                return NULL;
            }
            msg = nm;
        }
        if (len) msg[len++] = '\n';
        memcpy(msg + len, line, n + 1);
        len += n;
        if (!block && !more) return msg;
    }
}

/* The sampler options /set knows, by name (the --options of APP_SAMPLER_LONGOPTS). */
static const struct option sampler_opts[] = {APP_SAMPLER_LONGOPTS, {0, 0, 0, 0}};

static void show_settings(const chat *c) {
    fprintf(stderr, "temp %g, top-k %d, top-p %g, min-p %g, repeat-penalty %g, repeat-last-n %d, presence-penalty %g, "
                    "frequency-penalty %g, seed %s, n-predict %d, system %s\n",
            c->sp.temperature, c->sp.top_k, c->sp.top_p, c->sp.min_p, c->sp.repeat_penalty, c->sp.penalty_last_n,
            c->sp.presence_penalty, c->sp.frequency_penalty, c->sp.seed == QR_SEED_RANDOM ? "random" : "fixed",
            c->go.n_predict, c->system && *c->system ? "set" : "none");
}

/* /set KEY VALUE: a sampler option (temp, top-k, ... seed), n-predict, or system (the rest of the line;
 * it replaces the conversation's system message). Prints what went wrong and keeps the old settings. */
static void cmd_set(chat *c, char *args) {
    char *key = strtok(args, " \t");
    char *val = key ? strtok(NULL, "") : NULL;
    while (val && (*val == ' ' || *val == '\t')) val++;
    if (!key) return show_settings(c);
    if (!val || !*val) {
        fprintf(stderr, "usage: /set KEY VALUE (keys: temp top-k top-p min-p repeat-penalty repeat-last-n "
                        "presence-penalty frequency-penalty seed n-predict system)\n");
        return;
    }
    if (!strcmp(key, "system")) {
        free(c->system);
        c->system = strdup(val);
        if (json_array_size(c->history) && !strcmp(json_string_value(json_object_get(json_array_get(c->history, 0), "role")),
                                                   "system"))
            json_array_remove(c->history, 0);
        json_array_insert_new(c->history, 0, json_pack("{s:s, s:s}", "role", "system", "content", val));
        fprintf(stderr, "system message set\n");
        return;
    }
    if (!strcmp(key, "n-predict") || !strcmp(key, "num-predict")) {
        if (!app_parse_int("n-predict", val, 1, 1 << 24, &c->go.n_predict)) fprintf(stderr, "n-predict = %d\n", c->go.n_predict);
        return;
    }
    for (const struct option *o = sampler_opts; o->name; o++) {
        if (strcmp(o->name, key) && !(!strcmp(key, "temperature") && !strcmp(o->name, "temp"))) continue;
        qr_sampler_chain_params sp = c->sp;
        char err[1024];
        qr_sampler_chain *ns = NULL;
        if (app_sampler_opt(o->val, val, &sp)) return; /* printed */
        if (qr_sampler_chain_params_validate(&sp, 0, err, sizeof err) != QR_OK ||
            qr_sampler_chain_create(qr_model_n_vocab(c->e->model), &sp, &ns, err, sizeof err) != QR_OK) {
            fprintf(stderr, "quarrel: %s\n", err);
            return;
        }
        qr_sampler_chain_free(c->smp);
        c->smp = ns;
        c->sp = sp;
        fprintf(stderr, "%s = %s\n", o->name, val);
        return;
    }
    fprintf(stderr, "/set: unknown key '%s'\n", key);
}

/* /save FILE: {"system", "messages": [...]} as JSON. */
static void cmd_save(const chat *c, const char *path) {
    json_t *j = json_pack("{s:s?, s:O}", "system", c->system, "messages", c->history);
    if (!j || json_dump_file(j, path, JSON_INDENT(2)) != 0) fprintf(stderr, "quarrel: cannot write %s\n", path);
    else fprintf(stderr, "saved %zu messages to %s\n", json_array_size(c->history), path);
    json_decref(j);
}

/* /load FILE: a file of /save (or a bare message array); replaces the conversation. */
static void cmd_load(chat *c, const char *path) {
    json_error_t jerr;
    json_t *j = json_load_file(path, 0, &jerr);
    json_t *msgs = json_is_array(j) ? j : json_object_get(j, "messages");
    bool ok = json_is_array(msgs);
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        ok = ok && role && json_is_string(json_object_get(m, "content")) &&
             (!strcmp(role, "system") || !strcmp(role, "user") || !strcmp(role, "assistant"));
    }
    if (!j || !ok) {
        fprintf(stderr, "quarrel: %s: %s\n", path, j ? "not a saved conversation ({\"messages\": [{role, content}...]})" : jerr.text);
        json_decref(j);
        return;
    }
    json_array_clear(c->history);
    json_array_extend(c->history, msgs);
    const char *sys = json_string_value(json_object_get(j, "system"));
    free(c->system);
    c->system = sys ? strdup(sys) : NULL;
    if (!c->system && json_array_size(msgs) &&
        !strcmp(json_string_value(json_object_get(json_array_get(msgs, 0), "role")), "system"))
        c->system = strdup(json_string_value(json_object_get(json_array_get(msgs, 0), "content")));
    fprintf(stderr, "loaded %zu messages from %s\n", json_array_size(c->history), path);
    json_decref(j);
}

static void chat_help(void) {
    fputs("/clear             forget the conversation (the system message stays)\n"
          "/save FILE         write the conversation as JSON\n"
          "/load FILE         read a conversation written by /save\n"
          "/set [KEY VALUE]   show or change a setting: temp top-k top-p min-p repeat-penalty repeat-last-n\n"
          "                   presence-penalty frequency-penalty seed n-predict system\n"
          "/exit, /bye        quit (as Ctrl-D does)\n"
          "A line ending in \\ continues on the next; \"\"\" on its own line starts and ends a block.\n"
          "Ctrl-C stops a reply (it stays in the conversation) or drops the line being typed.\n",
          stderr);
}

/* One slash command; returns 1 to quit, 0 otherwise. */
static int slash(chat *c, char *line) {
    char *arg = line + strcspn(line, " \t");
    if (*arg) *arg++ = 0;
    while (*arg == ' ' || *arg == '\t') arg++;
    if (!strcmp(line, "/exit") || !strcmp(line, "/bye") || !strcmp(line, "/quit")) return 1;
    if (!strcmp(line, "/clear") || !strcmp(line, "/reset")) {
        reset_history(c);
        fputs("conversation cleared\n", stderr);
    } else if (!strcmp(line, "/save") && *arg) {
        cmd_save(c, arg);
    } else if (!strcmp(line, "/load") && *arg) {
        cmd_load(c, arg);
    } else if (!strcmp(line, "/set")) {
        cmd_set(c, arg);
    } else if (!strcmp(line, "/help") || !strcmp(line, "/?")) {
        chat_help();
    } else {
        fprintf(stderr, "unknown command %s (/help lists them)\n", line);
    }
    return 0;
}

/* One turn: the conversation rendered and prefilled from an empty cache, the reply streamed; the reply
 * (also a partial one, after Ctrl-C) joins the history; then the status line. Returns an exit code. */
static int turn(chat *c, gen_stats *total) {
    char *rendered = NULL;
    int rc = app_render_messages(c->e, c->history, &rendered);
    if (rc) return rc;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    rc = app_tokenize(c->e, rendered, strlen(rendered), true, true, &ids, &n_ids);
    free(rendered);
    if (rc) return rc;
    char *reply = calloc(1, 1);
    size_t reply_len = 0;
    gen_stats st = {0};
    qr_kv_clear(c->e->ctx);
    g_interrupt = 0;
    rc = app_generate(c->e, ids, n_ids, c->smp, &c->go, stdout, &st, &reply, &reply_len);
    free(ids);
    fputc('\n', stdout);
    fflush(stdout);
    if (!rc && (reply_len || !st.interrupted))
        json_array_append_new(c->history, json_pack("{s:s, s:s}", "role", "assistant", "content", reply ? reply : ""));
    if (!rc && st.interrupted && !reply_len) json_array_remove(c->history, json_array_size(c->history) - 1);
    free(reply);
    if (!rc)
        fprintf(stderr, "\033[2m[%s%d tokens, %.1f tok/s | prompt %d tokens, %.1f tok/s]\033[0m\n",
                st.interrupted ? "stopped, " : "", st.n_gen, st.decode_s > 0 ? st.n_gen / st.decode_s : 0.0, st.n_prompt,
                st.prefill_s > 0 ? st.n_prompt / st.prefill_s : 0.0);
    total->n_gen += st.n_gen, total->n_prompt += st.n_prompt;
    total->decode_s += st.decode_s, total->prefill_s += st.prefill_s;
    g_interrupt = 0;
    return rc;
}

static void usage_chat(FILE *f) {
    fprintf(f, "usage: quarrel chat -m MODEL [--system TEXT] [-n N] [-t N] [-c N] [sampler options]\n"
               "Type a message and press Enter; /help lists the commands (/clear, /save, /load, /set, /exit).\n"
               "  -m, --model MODEL    GGUF path, a name in the model directory (smollm2) or an Ollama name\n"
               "  -v, --verbose        print the speculative decoding counters at the end\n"
               APP_ENGINE_HELP APP_SPEC_HELP APP_SAMPLER_HELP);
    app_print_model_names(f);
}

int cmd_chat(int argc, char **argv) {
    static const struct option longopts[] = {{"model", 1, 0, 'm'}, {"system", 1, 0, 'S'}, {"n-predict", 1, 0, 'n'},
                                             {"threads", 1, 0, 't'}, {"ctx", 1, 0, 'c'}, {"help", 0, 0, 'h'},
                                             {"verbose", 0, 0, 'v'}, APP_SAMPLER_LONGOPTS, APP_ENGINE_LONGOPTS,
                                             APP_SPEC_LONGOPTS, {0, 0, 0, 0}};
    app_engine_opts eo = {.spec = qr_spec_default_params()};
    chat c = {.go = {.n_predict = 512, .quiet = true, .interrupt = &g_interrupt},
              .sp = qr_sampler_chain_default_params()};
    const char *system = NULL;
    bool verbose = false;
    int ch, rc;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "m:n:t:c:vh", longopts, NULL)) != -1) {
        switch (ch) {
        case 'm': eo.model = optarg; break;
        case 'S': system = optarg; break;
        case 'n': if ((rc = app_parse_int("-n", optarg, 1, 1 << 24, &c.go.n_predict))) return rc; break;
        case 't': if ((rc = app_parse_int("-t", optarg, 1, 1024, &eo.n_threads))) return rc; break;
        case 'c': if ((rc = app_parse_int("--ctx", optarg, 16, 1 << 24, &eo.n_ctx))) return rc; break;
        case 'v': verbose = true; break;
        case 'h': usage_chat(stdout); return 0;
        default:
            if ((rc = app_engine_opt(ch, optarg, &eo)) >= 0 || (rc = app_sampler_opt(ch, optarg, &c.sp)) >= 0 ||
                (rc = app_spec_opt(ch, optarg, &eo)) >= 0) {
                if (rc) return rc;
                break;
            }
            usage_chat(stderr);
            return 2;
        }
    }
    if (!eo.model || optind < argc) {
        if (optind < argc) fprintf(stderr, "quarrel: unexpected argument '%s'\n", argv[optind]);
        usage_chat(stderr);
        return 2;
    }
    if ((rc = app_spec_check(&eo))) return rc;
    char err[1024];
    if (qr_sampler_chain_params_validate(&c.sp, 0, err, sizeof err) != QR_OK) {
        fprintf(stderr, "quarrel: %s\n", err);
        return 2;
    }
    app_engine e;
    if ((rc = app_engine_open(&e, &eo))) return rc;
    c.e = &e;
    if (qr_sampler_chain_create(qr_model_n_vocab(e.model), &c.sp, &c.smp, err, sizeof err) != QR_OK) {
        fprintf(stderr, "quarrel: %s\n", err);
        app_engine_close(&e);
        return 2;
    }
    c.system = system ? strdup(system) : NULL;
    c.history = json_array();
    reset_history(&c);
    catch_sigint();
    if (isatty(STDIN_FILENO)) fputs("quarrel chat: /help for the commands, Ctrl-D to quit\n", stderr);
    gen_stats total = {0};
    for (char *msg; (msg = read_message());) {
        if (!*msg) { /* Ctrl-C at the prompt, or an empty line */
            free(msg);
            continue;
        }
        if (msg[0] == '/' && !strchr(msg, '\n')) {
            const int quit = slash(&c, msg);
            free(msg);
            if (quit) break;
            continue;
        }
        json_array_append_new(c.history, json_pack("{s:s, s:s}", "role", "user", "content", msg));
        free(msg);
        if ((rc = turn(&c, &total))) break;
    }
    fprintf(stderr, "\n");
    if (total.n_gen) app_print_timing(&e, &total);
    if (verbose) app_print_spec_stats(&e, &total);
    signal(SIGINT, SIG_DFL);
    json_decref(c.history);
    free(c.system);
    qr_sampler_chain_free(c.smp);
    app_engine_close(&e);
    return rc;
}
