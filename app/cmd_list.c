/* cmd_list.c — `quarrel list`: the models of the model directory ($QUARREL_MODELS_DIR, else
 * ~/.cache/quarrel/models; setup's models are there) and of the Ollama store, with size, weight type
 * and architecture; and the list of names the --help texts show. */
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "internal.h"

typedef struct model_row {
    char arch[64], type[32];
    uint64_t size, params;
    bool ok; /* the GGUF header could be read */
} model_row;

/* Reads a model's architecture, weight type, size and parameter count from its GGUF header. */
static void read_row(const char *path, model_row *r) {
    memset(r, 0, sizeof *r);
    qr_gguf *g = NULL;
    char err[512];
    if (qr_gguf_open(path, &g, err, sizeof err) != QR_OK) return;
    qr_gguf_str arch;
    if (qr_gguf_get_str(g, "general.architecture", &arch)) qr_gguf_str_copy(arch, r->arch, sizeof r->arch);
    else snprintf(r->arch, sizeof r->arch, "?");
    const char *type;
    qr_model_weight_stats(g, &r->params, &type);
    snprintf(r->type, sizeof r->type, "%s", type);
    r->size = g->size;
    r->ok = true;
    qr_gguf_close(g);
}

static void human_size(uint64_t n, char *out, size_t cap) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)n;
    int i = 0;
    while (v >= 1024 && i < 4) v /= 1024, i++;
    snprintf(out, cap, i ? "%.1f %s" : "%.0f %s", v, u[i]);
}

static void human_params(uint64_t n, char *out, size_t cap) {
    if (n >= 1000000000ull) snprintf(out, cap, "%.1fB", (double)n / 1e9);
    else snprintf(out, cap, "%.0fM", (double)n / 1e6);
}

void app_print_model_names(FILE *f) {
    qr_model_entry *list;
    size_t n;
    char err[256];
    if (qr_model_list(&list, &n, err, sizeof err) != QR_OK || n == 0) return;
    fputs("\nmodels (`quarrel list`; a name, or any unique start of a file name, works as MODEL):\n ", f);
    for (size_t i = 0, col = 1; i < n; i++) {
        const size_t w = strlen(list[i].name) + 1;
        if (col + w > 100) fputs("\n ", f), col = 1;
        fprintf(f, " %s", list[i].name);
        col += w;
    }
    fputc('\n', f);
    free(list);
}

static void usage_list(FILE *f) {
    char dir[2048];
    qr_models_dir(dir, sizeof dir);
    fprintf(f, "usage: quarrel list [--json]\n"
               "The models that resolve as MODEL: the .gguf files of the model directory (%s;\n"
               "$QUARREL_MODELS_DIR) and the models of the Ollama store ($OLLAMA_MODELS, else ~/.ollama/models),\n"
               "with size, weight type, parameters and architecture.\n"
               "  --json               one JSON array of {name, path, source, size, type, params, arch}\n", dir);
}

int cmd_list(int argc, char **argv) {
    static const struct option longopts[] = {{"json", 0, 0, 'j'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    bool as_json = false;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (c == 'j') as_json = true;
        else if (c == 'h') return usage_list(stdout), 0;
        else return usage_list(stderr), 2;
    }
    if (optind < argc) {
        fprintf(stderr, "quarrel: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    qr_model_entry *list;
    size_t n;
    char err[256], dir[2048];
    if (qr_model_list(&list, &n, err, sizeof err) != QR_OK) {
        fprintf(stderr, "quarrel: %s\n", err);
        return 1;
    }
    qr_models_dir(dir, sizeof dir);
    json_t *arr = as_json ? json_array() : NULL;
    if (!as_json && n == 0)
        fprintf(stderr, "no models in %s or the Ollama store (scripts/setup.sh fetches the test models)\n", dir);
    if (!as_json && n) printf("%-40s %-12s %-8s %-7s %-10s %s\n", "NAME", "ARCH", "TYPE", "PARAMS", "SIZE", "SOURCE");
    for (size_t i = 0; i < n; i++) {
        model_row r;
        read_row(list[i].path, &r);
        if (as_json) {
            json_t *o = json_pack("{s:s, s:s, s:s, s:I, s:s, s:I, s:s}", "name", list[i].name, "path", list[i].path,
                                  "source", list[i].ollama ? "ollama" : "models_dir", "size", (json_int_t)r.size, "type",
                                  r.ok ? r.type : "unreadable", "params", (json_int_t)r.params, "arch", r.ok ? r.arch : "?");
            if (o) json_array_append_new(arr, o);
            continue;
        }
        char size[32], params[32];
        human_size(r.size, size, sizeof size);
        human_params(r.params, params, sizeof params);
        printf("%-40s %-12s %-8s %-7s %-10s %s\n", list[i].name, r.ok ? r.arch : "?", r.ok ? r.type : "unreadable",
               r.ok ? params : "?", r.ok ? size : "?", list[i].ollama ? "ollama" : dir);
    }
    if (as_json) {
        char *s = json_dumps(arr, JSON_INDENT(2));
        if (s) puts(s);
        free(s);
        json_decref(arr);
    }
    free(list);
    return 0;
}
