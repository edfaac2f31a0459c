/* metrics.h — a small Prometheus registry: counters, gauges and histograms keyed by (name, labels),
 * rendered in the text exposition format (version 0.0.4). Thread-safe (one mutex). */
#ifndef QR_SERVER_METRICS_H
#define QR_SERVER_METRICS_H

#include <stddef.h>
#include <stdio.h>

typedef struct srv_metrics srv_metrics;

typedef enum srv_metric_type { SRV_COUNTER = 0, SRV_GAUGE = 1, SRV_HISTOGRAM = 2, SRV_UNTYPED = 3 } srv_metric_type;

/* NULL on OOM. */
srv_metrics *srv_metrics_create(void);
void srv_metrics_free(srv_metrics *m);

/* Declares a metric family (HELP text, type; histograms use the given ascending bucket bounds,
 * copied, at most 16). Families must be declared before use; undeclared names are ignored. */
void srv_metrics_declare(srv_metrics *m, const char *name, srv_metric_type type, const char *help,
                         const double *buckets, int n_buckets);

/* Adds v to a counter or gauge. labels: "" or the inside of {...}, e.g. `model="a",code="200"`
 * (values already escaped with srv_metrics_escape). */
void srv_metrics_add(srv_metrics *m, const char *name, const char *labels, double v);
/* Sets a gauge. */
void srv_metrics_set(srv_metrics *m, const char *name, const char *labels, double v);
/* Records one histogram observation. */
void srv_metrics_observe(srv_metrics *m, const char *name, const char *labels, double v);
/* Current value of a counter/gauge (0 when absent). */
double srv_metrics_get(srv_metrics *m, const char *name, const char *labels);

/* Writes the exposition text of every declared family to f. */
void srv_metrics_write(srv_metrics *m, FILE *f);
/* The exposition text; malloc'd, NUL-terminated, *len bytes. NULL on OOM. */
char *srv_metrics_render(srv_metrics *m, size_t *len);

/* Writers of the text format, for families kept outside a registry (arch_metrics.c). labels: as
 * for srv_metrics_add. A family's HELP and TYPE lines: */
void srv_metrics_write_family(FILE *f, const char *name, srv_metric_type type, const char *help);
/* One counter / gauge / untyped sample: */
void srv_metrics_write_value(FILE *f, const char *name, const char *labels, double v);
/* One histogram series: counts[n_bounds + 1] per bucket (not cumulative, last = +Inf), sum, count. */
void srv_metrics_write_histogram(FILE *f, const char *name, const char *labels, const double *bounds, int n_bounds,
                                 const unsigned long long *counts, double sum, unsigned long long count);

/* Escapes a label value (backslash, quote, newline) into out (cap bytes, always NUL-terminated). */
void srv_metrics_escape(const char *v, char *out, size_t cap);

#endif
