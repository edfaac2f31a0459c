/* metrics.c — Prometheus registry (see metrics.h). */
#include "server/metrics.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BUCKETS 16

typedef struct family {
    char *name, *help;
    srv_metric_type type;
    double bounds[MAX_BUCKETS];
    int n_bounds;
} family;

typedef struct series {
    int fam;
    char *labels;
    double value;                      /* counter / gauge */
    unsigned long long counts[MAX_BUCKETS + 1]; /* histogram: per bucket (non-cumulative), last = +Inf */
    double sum;
    unsigned long long count;
} series;

struct srv_metrics {
    pthread_mutex_t mu;
    family *fams;
    int n_fams;
    series *ser;
    int n_ser, cap_ser;
};

srv_metrics *srv_metrics_create(void) {
    srv_metrics *m = calloc(1, sizeof *m);
    if (m) pthread_mutex_init(&m->mu, NULL);
    return m;
}

void srv_metrics_free(srv_metrics *m) {
    if (!m) return;
    for (int i = 0; i < m->n_fams; i++) free(m->fams[i].name), free(m->fams[i].help);
    for (int i = 0; i < m->n_ser; i++) free(m->ser[i].labels);
    free(m->fams);
    free(m->ser);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

void srv_metrics_declare(srv_metrics *m, const char *name, srv_metric_type type, const char *help,
                         const double *buckets, int n_buckets) {
    pthread_mutex_lock(&m->mu);
    family *nf = realloc(m->fams, sizeof(family) * (size_t)(m->n_fams + 1));
    if (nf) {
        m->fams = nf;
        family *f = &m->fams[m->n_fams++];
        memset(f, 0, sizeof *f);
        f->name = strdup(name);
        f->help = strdup(help);
        f->type = type;
        if (n_buckets > MAX_BUCKETS) n_buckets = MAX_BUCKETS;
        for (int i = 0; i < n_buckets; i++) f->bounds[i] = buckets[i];
        f->n_bounds = type == SRV_HISTOGRAM ? n_buckets : 0;
    }
    pthread_mutex_unlock(&m->mu);
}

/* The series of (name, labels), created on first use; NULL for an undeclared family (under mu). */
static series *find(srv_metrics *m, const char *name, const char *labels) {
    int fam = -1;
    for (int i = 0; i < m->n_fams; i++)
        if (!strcmp(m->fams[i].name, name)) fam = i;
    if (fam < 0) return NULL;
    for (int i = 0; i < m->n_ser; i++)
        if (m->ser[i].fam == fam && !strcmp(m->ser[i].labels, labels)) return &m->ser[i];
    if (m->n_ser == m->cap_ser) {
        int nc = m->cap_ser ? m->cap_ser * 2 : 64;
        series *ns = realloc(m->ser, sizeof(series) * (size_t)nc);
        if (!ns) return NULL;
        m->ser = ns;
        m->cap_ser = nc;
    }
    series *s = &m->ser[m->n_ser];
    memset(s, 0, sizeof *s);
    s->fam = fam;
    s->labels = strdup(labels);
    if (!s->labels) return NULL;
    m->n_ser++;
    return s;
}

void srv_metrics_add(srv_metrics *m, const char *name, const char *labels, double v) {
    pthread_mutex_lock(&m->mu);
    series *s = find(m, name, labels);
    if (s) s->value += v;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_set(srv_metrics *m, const char *name, const char *labels, double v) {
    pthread_mutex_lock(&m->mu);
    series *s = find(m, name, labels);
    if (s) s->value = v;
    pthread_mutex_unlock(&m->mu);
}

double srv_metrics_get(srv_metrics *m, const char *name, const char *labels) {
    pthread_mutex_lock(&m->mu);
    series *s = find(m, name, labels);
    double v = s ? s->value : 0;
    pthread_mutex_unlock(&m->mu);
    return v;
}

void srv_metrics_observe(srv_metrics *m, const char *name, const char *labels, double v) {
    pthread_mutex_lock(&m->mu);
    series *s = find(m, name, labels);
    if (s) {
        const family *f = &m->fams[s->fam];
        int b = 0;
        while (b < f->n_bounds && v > f->bounds[b]) b++;
        s->counts[b]++;
        s->sum += v;
        s->count++;
    }
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_write_family(FILE *f, const char *name, srv_metric_type type, const char *help) {
    static const char *tn[] = {"counter", "gauge", "histogram", "untyped"};
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, tn[type]);
}

void srv_metrics_write_value(FILE *f, const char *name, const char *labels, double v) {
    if (labels[0]) fprintf(f, "%s{%s} %.17g\n", name, labels, v);
    else fprintf(f, "%s %.17g\n", name, v);
}

void srv_metrics_write_histogram(FILE *f, const char *name, const char *labels, const double *bounds, int n_bounds,
                                 const unsigned long long *counts, double sum, unsigned long long count) {
    const char *sep = labels[0] ? "," : "";
    unsigned long long cum = 0;
    for (int k = 0; k < n_bounds; k++) {
        cum += counts[k];
        fprintf(f, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels, sep, bounds[k], cum);
    }
    fprintf(f, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep, count);
    if (labels[0]) fprintf(f, "%s_sum{%s} %.17g\n%s_count{%s} %llu\n", name, labels, sum, name, labels, count);
    else fprintf(f, "%s_sum %.17g\n%s_count %llu\n", name, sum, name, count);
}

void srv_metrics_write(srv_metrics *m, FILE *f) {
    pthread_mutex_lock(&m->mu);
    for (int fi = 0; fi < m->n_fams; fi++) {
        const family *fa = &m->fams[fi];
        srv_metrics_write_family(f, fa->name, fa->type, fa->help);
        for (int i = 0; i < m->n_ser; i++) {
            const series *s = &m->ser[i];
            if (s->fam != fi) continue;
            if (fa->type == SRV_HISTOGRAM)
                srv_metrics_write_histogram(f, fa->name, s->labels, fa->bounds, fa->n_bounds, s->counts, s->sum,
                                            s->count);
            else
                srv_metrics_write_value(f, fa->name, s->labels, s->value);
        }
    }
    pthread_mutex_unlock(&m->mu);
}

char *srv_metrics_render(srv_metrics *m, size_t *len) {
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f) return NULL;
    srv_metrics_write(m, f);
    const int bad = ferror(f);
    if (fclose(f) != 0 || bad || !buf) {
        free(buf);
        return NULL;
    }
    return buf;
}

void srv_metrics_escape(const char *v, char *out, size_t cap) {
    size_t o = 0;
    for (; *v && o + 3 < cap; v++) {
        if (*v == '\\' || *v == '"') out[o++] = '\\', out[o++] = *v;
        else if (*v == '\n') out[o++] = '\\', out[o++] = 'n';
        else out[o++] = *v;
    }
    out[o] = 0;
}
