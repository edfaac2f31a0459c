/* cmd_template.c — `quarrel template`: render a chat template the way transformers'
 * apply_chat_template(tokenize=False) does, and print the prompt to stdout (no newline added). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "commands.h"
#include "internal.h" /* GGUF metadata; the template interpreter's tools, documents and extra variables */

/* Prints the command's help. */
static void usage(FILE *f) {
    fprintf(f,
            "usage: quarrel template (--template FILE | --model GGUF) --messages FILE.json [options]\n"
            "\n"
            "Renders a chat template exactly like Hugging Face apply_chat_template(tokenize=False).\n"
            "\n"
            "  --template FILE          Jinja chat template file\n"
            "  --model GGUF             read tokenizer.chat_template (and bos/eos tokens) from a GGUF model\n"
            "  --messages FILE.json     JSON array of messages, or an object with \"messages\" and optionally\n"
            "                           \"tools\", \"documents\" and \"extra\"\n"
            "  --no-generation-prompt   do not end with the assistant header (add_generation_prompt=False)\n"
            "  --bos S / --eos S        bos_token / eos_token strings (default: the model's, with --model)\n"
            "  --tools FILE.json        JSON array of tool schemas (tools=...)\n"
            "  --extra JSON|@FILE       extra template variables as a JSON object\n"
            "  --date YYYY-MM-DD        fixed date for strftime_now() (default: today)\n");
}

/* Reads a whole file into a malloc'd NUL-terminated buffer. */
static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t k = fread(buf + n, 1, cap - n - 1, f);
        n += k;
        if (k == 0) break;
        if (n + 1 == cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    bool bad = ferror(f);
    fclose(f);
    if (!buf || bad) {
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

/* Loads a JSON file, reporting errors on stderr. */
static json_t *load_json(const char *path, const char *what) {
    json_error_t je;
    json_t *j = json_load_file(path, JSON_ALLOW_NUL, &je);
    if (!j && je.line < 0) fprintf(stderr, "quarrel template: %s: %s\n", what, je.text);
    else if (!j) fprintf(stderr, "quarrel template: %s %s: line %d: %s\n", what, path, je.line, je.text);
    return j;
}

/* Token string of the id stored under key, copied into a malloc'd string (NULL when absent). */
static char *token_string(const qr_gguf *g, const char *key) {
    uint32_t id;
    if (!qr_gguf_get_u32(g, key, &id)) return NULL;
    const qr_gguf_value *toks = qr_gguf_get_arr(g, "tokenizer.ggml.tokens", QR_GGUF_STRING);
    if (!toks || id >= toks->arr.count) return NULL;
    qr_gguf_str s = qr_gguf_arr_str(toks, id);
    char *out = malloc(s.len + 1);
    if (out) qr_gguf_str_copy(s, out, s.len + 1);
    return out;
}

/* `quarrel template ...`: exit 0 on success, 1 on a render error, 2 on bad usage. */
int cmd_template(int argc, char **argv) {
    const char *tmpl_path = NULL, *model_path = NULL, *msgs_path = NULL, *tools_path = NULL, *extra_arg = NULL;
    const char *bos = NULL, *eos = NULL, *date = NULL;
    bool gen_prompt = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--no-generation-prompt")) {
            gen_prompt = false;
        } else if (!strcmp(a, "--generation-prompt")) {
            gen_prompt = true;
        } else if (has_val && !strcmp(a, "--template")) {
            tmpl_path = argv[++i];
        } else if (has_val && !strcmp(a, "--model")) {
            model_path = argv[++i];
        } else if (has_val && !strcmp(a, "--messages")) {
            msgs_path = argv[++i];
        } else if (has_val && !strcmp(a, "--tools")) {
            tools_path = argv[++i];
        } else if (has_val && !strcmp(a, "--extra")) {
            extra_arg = argv[++i];
        } else if (has_val && !strcmp(a, "--bos")) {
            bos = argv[++i];
        } else if (has_val && !strcmp(a, "--eos")) {
            eos = argv[++i];
        } else if (has_val && !strcmp(a, "--date")) {
            date = argv[++i];
        } else {
            fprintf(stderr, "quarrel template: unknown or incomplete option '%s'\n\n", a);
            usage(stderr);
            return 2;
        }
    }
    if ((!tmpl_path) == (!model_path) || !msgs_path) {
        fprintf(stderr, "quarrel template: give exactly one of --template and --model, and --messages\n\n");
        usage(stderr);
        return 2;
    }

    int rc = 1;
    char *src = NULL, *out = NULL, *model_bos = NULL, *model_eos = NULL;
    size_t src_len = 0, out_len = 0;
    json_t *doc = NULL, *tools = NULL, *extra = NULL;
    qr_gguf *g = NULL;
    char err[512];

    if (tmpl_path) {
        src = read_all(tmpl_path, &src_len);
        if (!src) {
            fprintf(stderr, "quarrel template: cannot read %s\n", tmpl_path);
            goto done;
        }
    } else {
        if (qr_gguf_open(model_path, &g, err, sizeof err) != QR_OK) {
            fprintf(stderr, "quarrel template: %s\n", err);
            goto done;
        }
        qr_gguf_str s;
        if (!qr_gguf_get_str(g, "tokenizer.chat_template", &s)) {
            fprintf(stderr, "quarrel template: %s has no tokenizer.chat_template\n", model_path);
            goto done;
        }
        src = malloc(s.len + 1);
        if (!src) goto done;
        memcpy(src, s.data, s.len);
        src[s.len] = 0;
        src_len = s.len;
        model_bos = token_string(g, "tokenizer.ggml.bos_token_id");
        model_eos = token_string(g, "tokenizer.ggml.eos_token_id");
    }

    if (!(doc = load_json(msgs_path, "messages"))) goto done;
    json_t *messages = doc;
    if (json_is_object(doc)) {
        messages = json_object_get(doc, "messages");
        tools = json_incref(json_object_get(doc, "tools"));
        extra = json_incref(json_object_get(doc, "extra"));
    }
    if (!json_is_array(messages)) {
        fprintf(stderr, "quarrel template: %s: expected a JSON array of messages\n", msgs_path);
        goto done;
    }
    if (tools_path) {
        json_decref(tools);
        if (!(tools = load_json(tools_path, "tools"))) goto done;
    }
    if (extra_arg) {
        json_decref(extra);
        json_error_t je;
        extra = extra_arg[0] == '@' ? json_load_file(extra_arg + 1, JSON_ALLOW_NUL, &je)
                                    : json_loads(extra_arg, JSON_ALLOW_NUL, &je);
        if (!extra) {
            fprintf(stderr, "quarrel template: --extra: line %d: %s\n", je.line, je.text);
            goto done;
        }
    }
    if (extra && !json_is_object(extra)) {
        fprintf(stderr, "quarrel template: extra variables must be a JSON object\n");
        goto done;
    }

    qr_chat_options opt = {0};
    opt.add_generation_prompt = gen_prompt;
    opt.bos_token = bos ? bos : model_bos;
    opt.eos_token = eos ? eos : model_eos;
    opt.tools = json_is_null(tools) ? NULL : tools;
    opt.documents = json_is_object(doc) ? json_object_get(doc, "documents") : NULL;
    if (json_is_null(opt.documents)) opt.documents = NULL;
    opt.extra = extra;
    opt.now = date;
    if (qr_chat_render_json(src, src_len, messages, &opt, &out, &out_len, err, sizeof err) != QR_OK) {
        fprintf(stderr, "quarrel template: %s\n", err);
        goto done;
    }
    if (fwrite(out, 1, out_len, stdout) != out_len || fflush(stdout) != 0) {
        fprintf(stderr, "quarrel template: write error\n");
        goto done;
    }
    rc = 0;
done:
    free(out);
    free(src);
    free(model_bos);
    free(model_eos);
    json_decref(doc);
    json_decref(tools);
    json_decref(extra);
    if (g) qr_gguf_close(g);
    return rc;
}
