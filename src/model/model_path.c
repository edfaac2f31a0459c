/* model_path.c — model name resolution: file paths and Ollama manifest names. */
#include "model/model_path.h"

#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/knobs.h"
#include "util/util.h"

static int is_regular_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The Ollama store folder: $OLLAMA_MODELS or $HOME/.ollama/models. */
static void ollama_store(char *out, size_t cap) {
    const char *env = qr_knob_str(QR_KNOB_OLLAMA_MODELS);
    if (*env) {
        snprintf(out, cap, "%s", env);
        return;
    }
    const char *home = qr_knob_str(QR_KNOB_HOME);
    snprintf(out, cap, "%s/.ollama/models", *home ? home : ".");
}

/* A name part may hold letters, digits and ._- only (no path tricks such as ".." or "/"). */
static int valid_part(const char *s, size_t n) {
    if (n == 0 || n > 128) return 0;
    if ((n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.')) return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '.' && s[i] != '_' && s[i] != '-') return 0;
    return 1;
}

qr_status qr_model_resolve_path(const char *name, char *out, size_t cap, char *err, size_t err_len) {
    if (!name || !*name) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "no model given");
    if (is_regular_file(name)) {
        if (strlen(name) >= cap) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "model path too long");
        snprintf(out, cap, "%s", name);
        return QR_OK;
    }
    /* Split "[host/][ns/]model[:tag]". */
    char buf[512];
    if (strlen(name) >= sizeof buf) return qr_errf(err, err_len, QR_ERR_NOT_FOUND, "model not found: %s", name);
    snprintf(buf, sizeof buf, "%s", name);
    const char *tag = "latest";
    char *colon = strrchr(buf, ':');
    char *last_slash = strrchr(buf, '/');
    if (colon && (!last_slash || colon > last_slash)) {
        *colon = 0;
        tag = colon + 1;
    }
    const char *parts[3];
    int n_parts = 0;
    for (char *p = buf, *tok; n_parts < 4 && (tok = strsep(&p, "/")) != NULL;) {
        if (n_parts == 3) return qr_errf(err, err_len, QR_ERR_NOT_FOUND, "model not found: %s (no such file, and not an Ollama name)", name);
        parts[n_parts++] = tok;
    }
    const char *host = "registry.ollama.ai", *ns = "library", *model = parts[n_parts - 1];
    if (n_parts == 2) ns = parts[0];
    if (n_parts == 3) host = parts[0], ns = parts[1];
    if (!valid_part(host, strlen(host)) || !valid_part(ns, strlen(ns)) || !valid_part(model, strlen(model)) ||
        !valid_part(tag, strlen(tag)))
        return qr_errf(err, err_len, QR_ERR_NOT_FOUND, "model not found: %s (no such file, and not an Ollama name)", name);

    char store[1024], manifest[2048];
    ollama_store(store, sizeof store);
    snprintf(manifest, sizeof manifest, "%s/manifests/%s/%s/%s/%s", store, host, ns, model, tag);
    if (!is_regular_file(manifest))
        return qr_errf(err, err_len, QR_ERR_NOT_FOUND, "model not found: %s (no such file, and no Ollama manifest %s)",
                       name, manifest);
    json_error_t jerr;
    json_t *root = json_load_file(manifest, 0, &jerr);
    if (!root) return qr_errf(err, err_len, QR_ERR_FORMAT, "%s: line %d: %s", manifest, jerr.line, jerr.text);
    qr_status st = QR_ERR_FORMAT;
    qr_errf(err, err_len, QR_ERR_FORMAT, "%s: no layer with mediaType application/vnd.ollama.image.model", manifest);
    json_t *layers = json_object_get(root, "layers");
    size_t i;
    json_t *layer;
    json_array_foreach(layers, i, layer) {
        const char *media = json_string_value(json_object_get(layer, "mediaType"));
        const char *digest = json_string_value(json_object_get(layer, "digest"));
        if (!media || strcmp(media, "application/vnd.ollama.image.model") != 0) continue;
        if (!digest || strncmp(digest, "sha256:", 7) != 0 || !valid_part(digest + 7, strlen(digest + 7))) {
            qr_errf(err, err_len, QR_ERR_FORMAT, "%s: model layer has a malformed digest", manifest);
            break;
        }
        char blob[2048];
        snprintf(blob, sizeof blob, "%s/blobs/sha256-%s", store, digest + 7);
        if (!is_regular_file(blob)) {
            st = qr_errf(err, err_len, QR_ERR_NOT_FOUND, "%s: model blob %s is missing", name, blob);
        } else if (strlen(blob) >= cap) {
            st = qr_errf(err, err_len, QR_ERR_INVALID_ARG, "model path too long");
        } else {
            snprintf(out, cap, "%s", blob);
            st = QR_OK;
        }
        break;
    }
    json_decref(root);
    return st;
}
