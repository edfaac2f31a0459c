/* cmd_tokenize.c — `quarrel tokenize` and `quarrel detokenize`: text <-> token ids with a model's
 * tokenizer, one string at a time or in batches (JSON lines) for the reference tests. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "engine.h"
#include "internal.h" /* --info: the tokenizer's type, merges, flags and end-of-generation ids */

/* Loads the tokenizer of the GGUF at path (a vocabulary-only read); prints errors. */
static qr_tokenizer *load_tokenizer(const char *cmd, const char *path) {
    char err[512] = "";
    qr_tokenizer *tok = NULL;
    if (qr_tokenizer_load(path, &tok, err, sizeof err) != QR_OK) {
        fprintf(stderr, "%s: %s\n", cmd, err);
        return NULL;
    }
    return tok;
}

/* Reads a whole file (or stdin for "-") into a malloc'ed buffer. */
static char *read_file(const char *path, size_t *len) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (n < cap) break;
        char *nb = realloc(buf, cap * 2 + 1);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    if (f != stdin) fclose(f);
    if (buf) buf[n] = 0;
    *len = n;
    return buf;
}

/* Writes bytes as the inside of a JSON string; a byte that is not part of valid UTF-8 is shown as
 * the text \xNN (an escaped backslash, then xNN), so the output stays valid JSON. */
static void print_escaped(FILE *f, const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            fprintf(f, "\\%c", c);
            i++;
        } else if (c == '\n') {
            fputs("\\n", f);
            i++;
        } else if (c == '\t') {
            fputs("\\t", f);
            i++;
        } else if (c == '\r') {
            fputs("\\r", f);
            i++;
        } else if (c < 0x20 || c == 0x7F) {
            fprintf(f, "\\u%04x", c);
            i++;
        } else if (c < 0x80) {
            fputc(c, f);
            i++;
        } else {
            size_t k = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
            bool ok = k > 0 && i + k <= n && c < 0xF5;
            for (size_t j = 1; ok && j < k; j++) ok = ((unsigned char)s[i + j] & 0xC0) == 0x80;
            if (ok) {
                fwrite(s + i, 1, k, f);
                i += k;
            } else {
                fprintf(f, "\\\\x%02x", c);
                i++;
            }
        }
    }
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Decodes a hex string into a malloc'ed buffer; NULL on bad input. */
static char *from_hex(const char *hex, size_t *len) {
    size_t n = strlen(hex);
    if (n % 2) return NULL;
    char *out = malloc(n / 2 + 1);
    if (!out) return NULL;
    for (size_t i = 0; i < n / 2; i++) {
        int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            free(out);
            return NULL;
        }
        out[i] = (char)(hi * 16 + lo);
    }
    *len = n / 2;
    return out;
}

/* Tokenizes into a malloc'ed array (*ids, *n). */
static qr_status tokenize_alloc(const qr_tokenizer *tok, const char *text, size_t len, bool add_special,
                                bool parse_special, int32_t **ids, size_t *n) {
    size_t cap = len + 16;
    *ids = malloc(cap * sizeof **ids);
    if (!*ids) return QR_ERR_NOMEM;
    qr_status st = qr_tokenize(tok, text, len, add_special, parse_special, *ids, cap, n);
    if (st == QR_OK && *n > cap) {
        int32_t *bigger = realloc(*ids, *n * sizeof **ids);
        if (!bigger) return QR_ERR_NOMEM;
        *ids = bigger;
        st = qr_tokenize(tok, text, len, add_special, parse_special, *ids, *n, n);
    }
    return st;
}

static void print_ids_json(const int32_t *ids, size_t n) {
    putchar('[');
    for (size_t i = 0; i < n; i++) printf(i ? ", %d" : "%d", ids[i]);
    puts("]");
}

/* --jsonl: each line {"hex": "...", "add_special": bool, "parse_special": bool} (or "text"
 * instead of "hex"); prints one JSON array of ids per line ({"error": ...} on failure). */
static int tokenize_jsonl(const qr_tokenizer *tok, const char *path) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        fprintf(stderr, "tokenize: cannot open %s\n", path);
        return 1;
    }
    char *line = NULL;
    size_t lcap = 0;
    ssize_t r;
    int rc = 0;
    while ((r = getline(&line, &lcap, f)) >= 0) {
        if (r == 0 || line[0] == '\n') continue;
        json_error_t jerr;
        json_t *o = json_loads(line, 0, &jerr);
        const char *hex = o ? json_string_value(json_object_get(o, "hex")) : NULL;
        const char *plain = o ? json_string_value(json_object_get(o, "text")) : NULL;
        size_t len = 0;
        char *text = NULL;
        if (hex) text = from_hex(hex, &len);
        else if (plain) {
            len = json_string_length(json_object_get(o, "text"));
            text = malloc(len + 1);
            if (text) memcpy(text, plain, len);
        }
        if (!text) {
            printf("{\"error\": \"bad input line\"}\n");
            rc = 1;
            json_decref(o);
            continue;
        }
        json_t *as = json_object_get(o, "add_special"), *ps = json_object_get(o, "parse_special");
        bool add_special = as ? json_is_true(as) : true;
        bool parse_special = ps ? json_is_true(ps) : true;
        int32_t *ids = NULL;
        size_t n = 0;
        qr_status st = tokenize_alloc(tok, text, len, add_special, parse_special, &ids, &n);
        if (st == QR_OK) print_ids_json(ids, n);
        else printf("{\"error\": \"%s\"}\n", qr_status_str(st));
        free(ids);
        free(text);
        json_decref(o);
    }
    free(line);
    if (f != stdin) fclose(f);
    return rc;
}

/* --info: the tokenizer's facts as one JSON object. */
static void print_info(const qr_tokenizer *tok) {
    const qr_tokenizer_info *in = qr_tokenizer_get_info(tok);
    const qr_special_tokens *sp = &in->special;
    static const char *types[] = {"?", "spm", "bpe", "wpm"};
    printf("{\"type\": \"%s\", \"model\": \"%s\", \"pre\": \"%s\", \"n_vocab\": %u, \"n_merges\": %u, ",
           types[in->type <= 3 ? in->type : 0], in->model, in->pre, in->n_vocab, in->n_merges);
    printf("\"bos\": %d, \"eos\": %d, \"eot\": %d, \"eom\": %d, \"unk\": %d, \"sep\": %d, \"pad\": %d, "
           "\"mask\": %d, \"cls\": %d, \"nl\": %d, ",
           sp->bos, sp->eos, sp->eot, sp->eom, sp->unk, sp->sep, sp->pad, sp->mask, sp->cls, sp->linefeed);
    printf("\"add_bos\": %s, \"add_eos\": %s, \"add_sep\": %s, \"add_space_prefix\": %s, \"clean_spaces\": %s, ",
           in->add_bos ? "true" : "false", in->add_eos ? "true" : "false", in->add_sep ? "true" : "false",
           in->add_space_prefix ? "true" : "false", in->clean_spaces ? "true" : "false");
    size_t n_eog = 0;
    const int32_t *eog = qr_tokenizer_eog_ids(tok, &n_eog);
    fputs("\"eog\": [", stdout);
    for (size_t i = 0; i < n_eog; i++) printf(i ? ", %d" : "%d", eog[i]);
    puts("]}");
}

static void tokenize_usage(FILE *f) {
    fputs("usage: quarrel tokenize -m MODEL (-p TEXT | -f FILE | --jsonl FILE | --info) [options]\n"
          "  -m, --model PATH        GGUF model whose tokenizer to use\n"
          "  -p, --prompt TEXT       text to tokenize\n"
          "  -f, --file PATH         read the text from a file ('-' for stdin)\n"
          "      --jsonl PATH        batch: one JSON object per line {\"hex\"|\"text\", \"add_special\",\n"
          "                          \"parse_special\"}; prints one JSON array of ids per line\n"
          "      --ids-only          print only a JSON array of ids\n"
          "      --no-special        do not add BOS/EOS/SEP (the model's add_* flags decide otherwise)\n"
          "      --no-parse-special  treat control-token text (e.g. <|im_start|>) as plain text\n"
          "      --timing            report the tokenization time on stderr\n"
          "      --info              print the tokenizer's type, special ids and flags as JSON\n",
          f);
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *prompt = NULL, *file = NULL, *jsonl = NULL;
    bool ids_only = false, add_special = true, parse_special = true, timing = false, info = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && has_val) model = argv[++i];
        else if ((!strcmp(a, "-p") || !strcmp(a, "--prompt")) && has_val) prompt = argv[++i];
        else if ((!strcmp(a, "-f") || !strcmp(a, "--file")) && has_val) file = argv[++i];
        else if (!strcmp(a, "--jsonl") && has_val) jsonl = argv[++i];
        else if (!strcmp(a, "--ids-only")) ids_only = true;
        else if (!strcmp(a, "--no-special")) add_special = false;
        else if (!strcmp(a, "--no-parse-special")) parse_special = false;
        else if (!strcmp(a, "--timing")) timing = true;
        else if (!strcmp(a, "--info")) info = true;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            tokenize_usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "tokenize: unknown or incomplete option '%s'\n", a);
            tokenize_usage(stderr);
            return 2;
        }
    }
    if (!model || ((prompt != NULL) + (file != NULL) + (jsonl != NULL)) != (info ? 0 : 1)) {
        tokenize_usage(stderr);
        return 2;
    }
    qr_tokenizer *tok = load_tokenizer("tokenize", model);
    if (!tok) return 1;
    int rc = 0;
    if (info) {
        print_info(tok);
        qr_tokenizer_free(tok);
        return 0;
    }
    if (jsonl) {
        rc = tokenize_jsonl(tok, jsonl);
        qr_tokenizer_free(tok);
        return rc;
    }
    size_t len = 0;
    char *owned = NULL;
    const char *text = prompt;
    if (file) {
        owned = read_file(file, &len);
        if (!owned) {
            fprintf(stderr, "tokenize: cannot read %s\n", file);
            qr_tokenizer_free(tok);
            return 1;
        }
        text = owned;
    } else {
        len = strlen(prompt);
    }
    int32_t *ids = NULL;
    size_t n = 0;
    double t0 = app_time_s();
    qr_status st = tokenize_alloc(tok, text, len, add_special, parse_special, &ids, &n);
    double t1 = app_time_s();
    if (st != QR_OK) {
        fprintf(stderr, "tokenize: %s\n", qr_status_str(st));
        rc = 1;
    } else if (ids_only) {
        print_ids_json(ids, n);
    } else {
        for (size_t i = 0; i < n; i++) {
            size_t plen = 0;
            const char *p = qr_token_piece(tok, ids[i], &plen);
            printf("%6d -> \"", ids[i]);
            print_escaped(stdout, p, plen);
            puts("\"");
        }
    }
    if (timing) fprintf(stderr, "tokenize: %zu bytes -> %zu tokens in %.6f s\n", len, n, t1 - t0);
    free(ids);
    free(owned);
    qr_tokenizer_free(tok);
    return rc;
}

/* ---- detokenize ---------------------------------------------------------------------------- */

/* Parses a JSON array of ids into a malloc'ed array; NULL (with a message) on bad input. */
static int32_t *parse_ids(const char *json, size_t *n) {
    json_error_t jerr;
    json_t *a = json_loads(json, JSON_DECODE_ANY, &jerr);
    if (!a || !json_is_array(a)) {
        fprintf(stderr, "detokenize: expected a JSON array of ids\n");
        json_decref(a);
        return NULL;
    }
    *n = json_array_size(a);
    int32_t *ids = malloc((*n ? *n : 1) * sizeof *ids);
    for (size_t i = 0; ids && i < *n; i++) {
        json_t *v = json_array_get(a, i);
        if (!json_is_integer(v)) {
            fprintf(stderr, "detokenize: element %zu is not an integer\n", i);
            free(ids);
            ids = NULL;
            break;
        }
        json_int_t x = json_integer_value(v);
        ids[i] = (x < INT32_MIN || x > INT32_MAX) ? -1 : (int32_t)x;
    }
    json_decref(a);
    return ids;
}

/* Detokenizes into a malloc'ed buffer. */
static qr_status detok_alloc(const qr_tokenizer *tok, const int32_t *ids, size_t n, bool remove_special, bool special,
                             char **out, size_t *len) {
    size_t cap = n * 8 + 16;
    *out = malloc(cap);
    if (!*out) return QR_ERR_NOMEM;
    qr_status st = qr_detokenize(tok, ids, n, remove_special, special, *out, cap, len);
    if (st == QR_OK && *len > cap) {
        char *bigger = realloc(*out, *len);
        if (!bigger) return QR_ERR_NOMEM;
        *out = bigger;
        st = qr_detokenize(tok, ids, n, remove_special, special, *out, *len, len);
    }
    return st;
}

/* --jsonl: each line {"ids": [...], "special": bool, "remove_special": bool}; prints
 * {"hex": "..."} per line. */
static int detokenize_jsonl(const qr_tokenizer *tok, const char *path) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        fprintf(stderr, "detokenize: cannot open %s\n", path);
        return 1;
    }
    char *line = NULL;
    size_t lcap = 0;
    int rc = 0;
    while (getline(&line, &lcap, f) >= 0) {
        if (line[0] == '\n' || !line[0]) continue;
        json_error_t jerr;
        json_t *o = json_loads(line, 0, &jerr);
        json_t *arr = o ? json_object_get(o, "ids") : NULL;
        if (!arr || !json_is_array(arr)) {
            printf("{\"error\": \"bad input line\"}\n");
            rc = 1;
            json_decref(o);
            continue;
        }
        size_t n = json_array_size(arr);
        int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
        for (size_t i = 0; ids && i < n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(arr, i));
        json_t *sp = json_object_get(o, "special"), *rs = json_object_get(o, "remove_special");
        char *text = NULL;
        size_t len = 0;
        qr_status st = ids ? detok_alloc(tok, ids, n, rs && json_is_true(rs), sp ? json_is_true(sp) : true, &text, &len)
                           : QR_ERR_NOMEM;
        if (st == QR_OK) {
            fputs("{\"hex\": \"", stdout);
            for (size_t i = 0; i < len; i++) printf("%02x", (unsigned char)text[i]);
            puts("\"}");
        } else {
            printf("{\"error\": \"%s\"}\n", qr_status_str(st));
        }
        free(text);
        free(ids);
        json_decref(o);
    }
    free(line);
    if (f != stdin) fclose(f);
    return rc;
}

static void detokenize_usage(FILE *f) {
    fputs("usage: quarrel detokenize -m MODEL (--ids JSON | -f FILE | --jsonl FILE) [options]\n"
          "  -m, --model PATH     GGUF model whose tokenizer to use\n"
          "      --ids JSON       a JSON array of token ids, e.g. '[1, 22557]'\n"
          "  -f, --file PATH      read the JSON array from a file ('-' for stdin)\n"
          "      --jsonl PATH     batch: one {\"ids\": [...], \"special\": bool} per line; prints {\"hex\": ...}\n"
          "      --no-special     render control tokens as nothing (default: as their text)\n"
          "      --remove-special drop the BOS/EOS the model adds\n",
          f);
}

int cmd_detokenize(int argc, char **argv) {
    const char *model = NULL, *ids_json = NULL, *file = NULL, *jsonl = NULL;
    bool special = true, remove_special = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && has_val) model = argv[++i];
        else if (!strcmp(a, "--ids") && has_val) ids_json = argv[++i];
        else if ((!strcmp(a, "-f") || !strcmp(a, "--file")) && has_val) file = argv[++i];
        else if (!strcmp(a, "--jsonl") && has_val) jsonl = argv[++i];
        else if (!strcmp(a, "--no-special")) special = false;
        else if (!strcmp(a, "--remove-special")) remove_special = true;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            detokenize_usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "detokenize: unknown or incomplete option '%s'\n", a);
            detokenize_usage(stderr);
            return 2;
        }
    }
    if (!model || ((ids_json != NULL) + (file != NULL) + (jsonl != NULL)) != 1) {
        detokenize_usage(stderr);
        return 2;
    }
    qr_tokenizer *tok = load_tokenizer("detokenize", model);
    if (!tok) return 1;
    int rc = 0;
    if (jsonl) {
        rc = detokenize_jsonl(tok, jsonl);
        qr_tokenizer_free(tok);
        return rc;
    }
    char *owned = NULL;
    if (file) {
        size_t len;
        owned = read_file(file, &len);
        if (!owned) {
            fprintf(stderr, "detokenize: cannot read %s\n", file);
            qr_tokenizer_free(tok);
            return 1;
        }
        ids_json = owned;
    }
    size_t n = 0;
    int32_t *ids = parse_ids(ids_json, &n);
    if (!ids) {
        free(owned);
        qr_tokenizer_free(tok);
        return 2;
    }
    char *text = NULL;
    size_t len = 0;
    qr_status st = detok_alloc(tok, ids, n, remove_special, special, &text, &len);
    if (st != QR_OK) {
        fprintf(stderr, "detokenize: %s (ids must be in 0..%u)\n", qr_status_str(st),
                qr_tokenizer_get_info(tok)->n_vocab - 1);
        rc = 1;
    } else {
        fwrite(text, 1, len, stdout);
        fputc('\n', stdout);
    }
    free(text);
    free(ids);
    free(owned);
    qr_tokenizer_free(tok);
    return rc;
}
