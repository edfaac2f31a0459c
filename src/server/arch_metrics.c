/* arch_metrics.c — the MoE / SSM metrics of a model (see arch_metrics.h).
 *
 * quarrel_moe_expert_selection is exported untyped: it only grows (rate() applies, as the Grafana
 * dashboard does), but `promtool check metrics` rejects a counter whose name lacks "_total", and
 * the name is the one the dashboard and issue 9 use. */
#include "server/arch_metrics.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "server/metrics.h"
#include "util/util.h"

/* Bucket bounds (seconds) of the four histograms: one MoE layer or Mamba2 mixer of one pass takes
 * from tens of microseconds (a decode row on a GPU) to about a second (a long prefill chunk on a CPU). */
static const double bounds[] = {1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3,
                                5e-3, 0.01,   0.025, 0.05, 0.1,    0.25, 0.5,  1};
#define N_BOUNDS ((int)(sizeof bounds / sizeof bounds[0]))

typedef enum hist_id { H_MOE_LAYER, H_MOE_ROUTING, H_SSM_SCAN, H_SSM_CONV, N_HIST } hist_id;

static const struct {
    const char *name, *help;
    bool moe; /* a MoE family (else SSM) */
} hist_fams[N_HIST] = {
    {"quarrel_moe_layer_latency_seconds", "Time of one MoE FFN block (one layer of one forward pass).", true},
    {"quarrel_moe_routing_latency_seconds", "Time of the router and top-k of one MoE block.", true},
    {"quarrel_ssm_scan_latency_seconds", "Time of the selective scan of one Mamba2 mixer (one layer of one pass).",
     false},
    {"quarrel_ssm_conv_latency_seconds", "Time of the causal conv1d of one Mamba2 mixer (one layer of one pass).",
     false},
};

typedef struct hist {
    unsigned long long counts[N_BOUNDS + 1]; /* per bucket (not cumulative), last = +Inf */
    double sum;                              /* seconds */
    unsigned long long count;                /* observations */
} hist;

/* What /metrics shows of one model. */
typedef struct arch_data {
    bool moe, ssm;            /* the model has experts / Mamba2 layers */
    int32_t n_layer, n_expert;
    hist h[N_HIST];
    uint64_t *selection;      /* [n_layer][n_expert] tokens routed to each expert (NULL without experts) */
    uint64_t ssm_state_bytes; /* recurrent state held by the contexts */
    uint64_t ssm_divergence;  /* passes failed on a NaN/Inf state */
} arch_data;

/* The contexts' counters added up at one sync. */
typedef struct totals {
    uint64_t moe_calls, ssm_calls, divergence, state_bytes;
    double seconds[N_HIST];
} totals;

struct srv_arch_metrics {
    pthread_mutex_t mu;
    arch_data pub; /* under mu */
    totals seen;   /* the scheduler thread's: the totals at the previous sync */
};

struct srv_arch_snapshot {
    char *label; /* model="..." */
    arch_data d;
};

qr_status srv_arch_metrics_create(qr_context *ctx, srv_arch_metrics **out, char *err, size_t err_len) {
    *out = NULL;
    const qr_arch_stats *a = qr_context_arch_stats(ctx);
    const bool moe = a->n_expert > 0 && a->expert_selection, ssm = a->ssm_state_bytes > 0;
    if (!moe && !ssm) return QR_OK;
    srv_arch_metrics *am = calloc(1, sizeof *am);
    if (!am) return qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory");
    am->pub.moe = moe;
    am->pub.ssm = ssm;
    if (moe) {
        am->pub.n_layer = a->n_layer;
        am->pub.n_expert = a->n_expert;
        am->pub.selection = calloc((size_t)a->n_layer * (size_t)a->n_expert, sizeof(uint64_t));
        if (!am->pub.selection) {
            free(am);
            return qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory");
        }
    }
    am->pub.ssm_state_bytes = a->ssm_state_bytes;
    am->seen.state_bytes = a->ssm_state_bytes;
    pthread_mutex_init(&am->mu, NULL);
    qr_context_set_arch_stats(ctx, true);
    *out = am;
    return QR_OK;
}

void srv_arch_metrics_free(srv_arch_metrics *am) {
    if (!am) return;
    pthread_mutex_destroy(&am->mu);
    free(am->pub.selection);
    free(am);
}

/* Records n observations that took `seconds` in all, in the bucket of their mean. */
static void observe(hist *h, double seconds, uint64_t n) {
    const double mean = seconds / (double)n;
    int b = 0;
    while (b < N_BOUNDS && mean > bounds[b]) b++;
    h->counts[b] += n;
    h->sum += seconds;
    h->count += n;
}

void srv_arch_metrics_sync(srv_arch_metrics *am, const qr_context *const *ctx, int n_ctx) {
    totals t = {0};
    for (int i = 0; i < n_ctx; i++) {
        if (!ctx[i]) continue;
        const qr_arch_stats *a = qr_context_arch_stats(ctx[i]);
        t.moe_calls += a->moe_layer_calls;
        t.ssm_calls += a->ssm_calls;
        t.divergence += a->ssm_divergence_total;
        t.state_bytes += a->ssm_state_bytes;
        t.seconds[H_MOE_LAYER] += a->moe_layer_seconds;
        t.seconds[H_MOE_ROUTING] += a->moe_routing_seconds;
        t.seconds[H_SSM_SCAN] += a->ssm_scan_seconds;
        t.seconds[H_SSM_CONV] += a->ssm_conv_seconds;
    }
    const totals *s = &am->seen;
    if (t.moe_calls == s->moe_calls && t.ssm_calls == s->ssm_calls && t.divergence == s->divergence &&
        t.state_bytes == s->state_bytes)
        return;
    pthread_mutex_lock(&am->mu);
    arch_data *d = &am->pub;
    for (int h = 0; h < N_HIST; h++) {
        const uint64_t now = hist_fams[h].moe ? t.moe_calls : t.ssm_calls;
        const uint64_t before = hist_fams[h].moe ? s->moe_calls : s->ssm_calls;
        if (now > before) observe(&d->h[h], t.seconds[h] - s->seconds[h], now - before);
    }
    if (d->selection && t.moe_calls != s->moe_calls) {
        const size_t n_sel = (size_t)d->n_layer * (size_t)d->n_expert;
        memset(d->selection, 0, n_sel * sizeof *d->selection);
        for (int i = 0; i < n_ctx; i++) {
            const qr_arch_stats *a = ctx[i] ? qr_context_arch_stats(ctx[i]) : NULL;
            if (!a || !a->expert_selection || a->n_layer != d->n_layer || a->n_expert != d->n_expert) continue;
            for (size_t k = 0; k < n_sel; k++) d->selection[k] += a->expert_selection[k];
        }
    }
    if (t.divergence > s->divergence) d->ssm_divergence += t.divergence - s->divergence;
    d->ssm_state_bytes = t.state_bytes;
    pthread_mutex_unlock(&am->mu);
    am->seen = t;
}

srv_arch_snapshot *srv_arch_metrics_snapshot(srv_arch_metrics *am, const char *model_label) {
    srv_arch_snapshot *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    const size_t n_sel = (size_t)am->pub.n_layer * (size_t)am->pub.n_expert;
    s->label = malloc(strlen(model_label) + 10);
    uint64_t *sel = am->pub.selection ? malloc(n_sel * sizeof *sel) : NULL;
    if (!s->label || (am->pub.selection && !sel)) {
        free(sel);
        srv_arch_snapshot_free(s);
        return NULL;
    }
    sprintf(s->label, "model=\"%s\"", model_label);
    pthread_mutex_lock(&am->mu);
    s->d = am->pub;
    if (sel) memcpy(sel, am->pub.selection, n_sel * sizeof *sel);
    pthread_mutex_unlock(&am->mu);
    s->d.selection = sel;
    return s;
}

void srv_arch_snapshot_free(srv_arch_snapshot *s) {
    if (!s) return;
    free(s->label);
    free(s->d.selection);
    free(s);
}

/* Tokens routed through layer l (0: not a MoE layer, or no pass yet). */
static uint64_t layer_total(const arch_data *d, int32_t l) {
    uint64_t t = 0;
    for (int32_t x = 0; x < d->n_expert; x++) t += d->selection[(int64_t)l * d->n_expert + x];
    return t;
}

static void render_selection(FILE *f, srv_arch_snapshot *const *snaps, int n) {
    srv_metrics_write_family(f, "quarrel_moe_expert_selection", SRV_UNTYPED,
                             "Tokens routed to each expert of each MoE layer (only grows).");
    for (int i = 0; i < n; i++) {
        const arch_data *d = &snaps[i]->d;
        for (int32_t l = 0; d->selection && l < d->n_layer; l++) {
            if (!layer_total(d, l)) continue;
            for (int32_t x = 0; x < d->n_expert; x++) {
                char lab[1200];
                snprintf(lab, sizeof lab, "%s,layer=\"%d\",expert=\"%d\"", snaps[i]->label, l, x);
                srv_metrics_write_value(f, "quarrel_moe_expert_selection", lab,
                                        (double)d->selection[(int64_t)l * d->n_expert + x]);
            }
        }
    }
    srv_metrics_write_family(f, "quarrel_moe_expert_utilization", SRV_GAUGE,
                             "Share of the (MoE layer, expert) pairs selected at least once.");
    for (int i = 0; i < n; i++) {
        const arch_data *d = &snaps[i]->d;
        if (!d->moe) continue;
        uint64_t pairs = 0, used = 0;
        for (int32_t l = 0; d->selection && l < d->n_layer; l++) {
            if (!layer_total(d, l)) continue;
            for (int32_t x = 0; x < d->n_expert; x++) used += d->selection[(int64_t)l * d->n_expert + x] > 0;
            pairs += (uint64_t)d->n_expert;
        }
        srv_metrics_write_value(f, "quarrel_moe_expert_utilization", snaps[i]->label,
                                pairs ? (double)used / (double)pairs : 0.0);
    }
}

static void render_hist(FILE *f, hist_id h, srv_arch_snapshot *const *snaps, int n) {
    srv_metrics_write_family(f, hist_fams[h].name, SRV_HISTOGRAM, hist_fams[h].help);
    for (int i = 0; i < n; i++) {
        const arch_data *d = &snaps[i]->d;
        if (hist_fams[h].moe ? !d->moe : !d->ssm) continue;
        srv_metrics_write_histogram(f, hist_fams[h].name, snaps[i]->label, bounds, N_BOUNDS, d->h[h].counts,
                                    d->h[h].sum, d->h[h].count);
    }
}

void srv_arch_metrics_render(FILE *f, srv_arch_snapshot *const *snaps, int n) {
    bool moe = false, ssm = false;
    for (int i = 0; i < n; i++) moe |= snaps[i]->d.moe, ssm |= snaps[i]->d.ssm;
    if (moe) {
        render_hist(f, H_MOE_LAYER, snaps, n);
        render_hist(f, H_MOE_ROUTING, snaps, n);
        render_selection(f, snaps, n);
    }
    if (!ssm) return;
    render_hist(f, H_SSM_SCAN, snaps, n);
    render_hist(f, H_SSM_CONV, snaps, n);
    srv_metrics_write_family(f, "quarrel_ssm_state_bytes", SRV_GAUGE, "Mamba2 recurrent state held (conv + scan).");
    for (int i = 0; i < n; i++)
        if (snaps[i]->d.ssm)
            srv_metrics_write_value(f, "quarrel_ssm_state_bytes", snaps[i]->label, (double)snaps[i]->d.ssm_state_bytes);
    srv_metrics_write_family(f, "quarrel_ssm_divergence_total", SRV_COUNTER,
                             "Passes failed on a NaN/Inf SSM state (their requests got an error).");
    for (int i = 0; i < n; i++)
        if (snaps[i]->d.ssm)
            srv_metrics_write_value(f, "quarrel_ssm_divergence_total", snaps[i]->label,
                                    (double)snaps[i]->d.ssm_divergence);
}
