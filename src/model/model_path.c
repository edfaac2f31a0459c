/* model_path.c — model name resolution (file paths, short names in the model directory, Ollama
 * manifest names) and the list of the models both places hold. */
#include "model/model_path.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "quant/types.h"
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

static int is_directory(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

void qr_models_dir(char *out, size_t cap) {
    const char *env = qr_knob_str(QR_KNOB_MODELS_DIR);
    if (*env) {
        snprintf(out, cap, "%s", env);
        return;
    }
    const char *home = qr_knob_str(QR_KNOB_HOME);
    snprintf(out, cap, "%s/.cache/quarrel/models", *home ? home : ".");
}

/* The *.gguf file names of directory dir, sorted; *names malloc'd (each entry too), *n of them. A
 * directory that cannot be read has none. -1 on OOM. */
static int gguf_files(const char *dir, char ***names, size_t *n) {
    *names = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    size_t cap = 0;
    int rc = 0;
    for (struct dirent *e; (e = readdir(d));) {
        const size_t len = strlen(e->d_name);
        if (len <= 5 || strcmp(e->d_name + len - 5, ".gguf") || e->d_name[0] == '.') continue;
        char full[4096];
        if (snprintf(full, sizeof full, "%s/%s", dir, e->d_name) >= (int)sizeof full || !is_regular_file(full)) continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            char **nn = realloc(*names, sizeof *nn * cap);
            if (!nn) { rc = -1; break; }
            *names = nn;
        }
        if (!((*names)[*n] = strdup(e->d_name))) { rc = -1; break; }
        (*n)++;
    }
    closedir(d);
    for (size_t i = 1; i < *n; i++) /* insertion sort: directories of a few dozen models */
        for (size_t j = i; j > 0 && strcmp((*names)[j - 1], (*names)[j]) > 0; j--) {
            char *t = (*names)[j];
            (*names)[j] = (*names)[j - 1];
            (*names)[j - 1] = t;
        }
    return rc;
}

static void free_names(char **names, size_t n) {
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
}

/* A short name in the model directory: DIR/name, DIR/name.gguf, else the one *.gguf file whose name
 * starts with name (case-insensitive; a file named exactly so, but for the case, wins). QR_OK with the
 * path; QR_ERR_NOT_FOUND (err untouched) when nothing matches; QR_ERR_INVALID_ARG naming the
 * candidates of an ambiguous prefix. */
static qr_status models_dir_lookup(const char *name, char *out, size_t cap, char *err, size_t err_len) {
    char dir[2048], path[4096];
    qr_models_dir(dir, sizeof dir);
    if (!*name || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, "..")) return QR_ERR_NOT_FOUND;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    const size_t nl = strlen(name);
    if (!is_regular_file(path) || nl <= 5 || strcmp(name + nl - 5, ".gguf")) snprintf(path, sizeof path, "%s/%s.gguf", dir, name);
    if (is_regular_file(path)) {
        if (strlen(path) >= cap) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "model path too long");
        snprintf(out, cap, "%s", path);
        return QR_OK;
    }
    char **names;
    size_t n;
    if (gguf_files(dir, &names, &n) < 0) return qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory");
    size_t hits = 0, pick = 0;
    bool exact = false;
    for (size_t i = 0; i < n && !exact; i++) {
        const size_t fl = strlen(names[i]) - 5; /* without .gguf */
        if (fl < nl || strncasecmp(names[i], name, nl)) continue;
        exact = fl == nl;
        if (exact || hits++ == 0) pick = i;
    }
    qr_status st = QR_ERR_NOT_FOUND;
    if (exact || hits == 1) {
        snprintf(path, sizeof path, "%s/%s", dir, names[pick]);
        st = strlen(path) < cap ? QR_OK : qr_errf(err, err_len, QR_ERR_INVALID_ARG, "model path too long");
        if (st == QR_OK) snprintf(out, cap, "%s", path);
    } else if (hits > 1) {
        size_t o = (size_t)snprintf(err, err_len, "model name '%s' is ambiguous in %s:", name, dir);
        for (size_t i = 0; i < n && o < err_len; i++)
            if (!strncasecmp(names[i], name, nl))
                o += (size_t)snprintf(err + o, err_len - o, " %.*s", (int)(strlen(names[i]) - 5), names[i]);
        st = QR_ERR_INVALID_ARG;
    }
    free_names(names, n);
    return st;
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
    if (is_directory(name))
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG,
                       "%s is a directory, not a model: give a .gguf file in it, or a name `quarrel list` shows", name);
    if (!strchr(name, ':')) { /* a short name in the model directory, before the Ollama store */
        const qr_status st = models_dir_lookup(name, out, cap, err, err_len);
        if (st != QR_ERR_NOT_FOUND) return st;
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
    if (!is_regular_file(manifest)) {
        char dir[2048];
        qr_models_dir(dir, sizeof dir);
        return qr_errf(err, err_len, QR_ERR_NOT_FOUND,
                       "model not found: %s (no such file, no model of that name in %s, and no Ollama manifest %s; "
                       "`quarrel list` shows the names that resolve)", name, dir, manifest);
    }
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

/* Appends an entry; -1 on OOM. */
static int add_entry(qr_model_entry **list, size_t *n, size_t *cap, const char *name, const char *path, bool ollama) {
    if (*n == *cap) {
        const size_t nc = *cap ? *cap * 2 : 16;
        qr_model_entry *nl = realloc(*list, sizeof *nl * nc);
        if (!nl) return -1;
        *list = nl;
        *cap = nc;
    }
    qr_model_entry *e = &(*list)[(*n)++];
    snprintf(e->name, sizeof e->name, "%.*s", (int)sizeof e->name - 1, name);
    snprintf(e->path, sizeof e->path, "%.*s", (int)sizeof e->path - 1, path);
    e->ollama = ollama;
    return 0;
}

/* The Ollama models under store/manifests/HOST/NS/MODEL/TAG whose model blob is present, as names that
 * qr_model_resolve_path takes back. -1 on OOM. */
static int list_ollama(const char *store, qr_model_entry **list, size_t *n, size_t *cap) {
    char base[2048];
    snprintf(base, sizeof base, "%s/manifests", store);
    const size_t first = *n;
    DIR *hosts = opendir(base);
    if (!hosts) return 0;
    int rc = 0;
    for (struct dirent *h; rc == 0 && (h = readdir(hosts));) {
        if (!valid_part(h->d_name, strlen(h->d_name))) continue;
        char p1[2304];
        snprintf(p1, sizeof p1, "%s/%s", base, h->d_name);
        DIR *nss = opendir(p1);
        for (struct dirent *ns; rc == 0 && nss && (ns = readdir(nss));) {
            if (!valid_part(ns->d_name, strlen(ns->d_name))) continue;
            char p2[2560];
            snprintf(p2, sizeof p2, "%s/%s", p1, ns->d_name);
            DIR *models = opendir(p2);
            for (struct dirent *m; rc == 0 && models && (m = readdir(models));) {
                if (!valid_part(m->d_name, strlen(m->d_name))) continue;
                char p3[2816];
                snprintf(p3, sizeof p3, "%s/%s", p2, m->d_name);
                DIR *tags = opendir(p3);
                for (struct dirent *t; rc == 0 && tags && (t = readdir(tags));) {
                    if (!valid_part(t->d_name, strlen(t->d_name))) continue;
                    char name[1024], path[4096], err[256]; /* each part <= 128 bytes (valid_part) */
                    const bool lib = !strcmp(ns->d_name, "library"), host = !strcmp(h->d_name, "registry.ollama.ai");
                    if (host && lib) snprintf(name, sizeof name, "%s:%s", m->d_name, t->d_name);
                    else if (host) snprintf(name, sizeof name, "%s/%s:%s", ns->d_name, m->d_name, t->d_name);
                    else snprintf(name, sizeof name, "%s/%s/%s:%s", h->d_name, ns->d_name, m->d_name, t->d_name);
                    char manifest[4096];
                    snprintf(manifest, sizeof manifest, "%s/%s", p3, t->d_name);
                    if (!is_regular_file(manifest) || qr_model_resolve_path(name, path, sizeof path, err, sizeof err) != QR_OK)
                        continue;
                    if (add_entry(list, n, cap, name, path, true) < 0) rc = -1;
                }
                if (tags) closedir(tags);
            }
            if (models) closedir(models);
        }
        if (nss) closedir(nss);
    }
    closedir(hosts);
    for (size_t i = first + 1; i < *n; i++) /* sorted by name */
        for (size_t j = i; j > first && strcmp((*list)[j - 1].name, (*list)[j].name) > 0; j--) {
            qr_model_entry t = (*list)[j];
            (*list)[j] = (*list)[j - 1];
            (*list)[j - 1] = t;
        }
    return rc;
}

qr_status qr_model_list(qr_model_entry **out, size_t *n, char *err, size_t err_len) {
    *out = NULL;
    *n = 0;
    size_t cap = 0, nf = 0;
    char dir[2048], store[1024], **names = NULL;
    qr_models_dir(dir, sizeof dir);
    int rc = gguf_files(dir, &names, &nf);
    for (size_t i = 0; rc == 0 && i < nf; i++) {
        char path[4096], stem[256];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        snprintf(stem, sizeof stem, "%.*s", (int)(strlen(names[i]) - 5), names[i]);
        rc = add_entry(out, n, &cap, stem, path, false);
    }
    free_names(names, nf);
    ollama_store(store, sizeof store);
    if (rc == 0) rc = list_ollama(store, out, n, &cap);
    if (rc < 0) {
        free(*out);
        *out = NULL;
        *n = 0;
        return qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory");
    }
    return QR_OK;
}

void qr_model_weight_stats(const qr_gguf *g, uint64_t *n_params, const char **type_name) {
    uint64_t bytes[64] = {0}, params = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const qr_gguf_tensor *t = &g->tensors[i];
        params += (uint64_t)qr_gguf_tensor_nelements(t);
        if (t->n_dims >= 2 && (uint32_t)t->type < 64) bytes[t->type] += t->nbytes;
    }
    int best = 0;
    for (int k = 1; k < 64; k++)
        if (bytes[k] > bytes[best]) best = k;
    const char *tn = qr_type_name((uint32_t)best);
    *n_params = params;
    *type_name = tn ? tn : "unknown";
}
