/* arch_metrics.h — issue 9's MoE and Mamba2 (SSM) metrics of a loaded model on /metrics.
 *
 * The counters live in the model's contexts (qr_context_arch_stats), which only the model's
 * scheduler thread may read. That thread folds what they gained into the model's srv_arch_metrics
 * after each step that emits a token or ends a request (srv_arch_metrics_sync, from the generation
 * callback; also after each embedding job); an HTTP thread copies them out
 * (srv_arch_metrics_snapshot) and renders them (srv_arch_metrics_render). One mutex per model,
 * held for a copy.
 *
 * Families (label model = the model's name): quarrel_moe_layer_latency_seconds and
 * quarrel_moe_routing_latency_seconds (histograms; one observation = one MoE FFN block of one
 * forward pass; the layers of the passes between two syncs are binned at their mean time, _sum and
 * _count are exact), quarrel_moe_expert_selection{layer,expert} (untyped: a count of routed rows,
 * rate() applies; see the .c for why not "counter"), quarrel_moe_expert_utilization (gauge),
 * quarrel_ssm_scan_latency_seconds and quarrel_ssm_conv_latency_seconds (histograms; one
 * observation = one Mamba2 mixer of one pass), quarrel_ssm_state_bytes (gauge),
 * quarrel_ssm_divergence_total (counter). Models without experts export no MoE family, models
 * without SSM layers no SSM family. */
#ifndef QR_SERVER_ARCH_METRICS_H
#define QR_SERVER_ARCH_METRICS_H

#include <stdio.h>

#include "quarrel.h"

typedef struct srv_arch_metrics srv_arch_metrics;
typedef struct srv_arch_snapshot srv_arch_snapshot;

/* Makes the metrics of a model whose generation context is ctx and turns on ctx's expert-selection
 * counts (qr_context_set_arch_stats). *out = NULL (and QR_OK) when the model has neither experts
 * nor SSM layers. Errors: QR_ERR_NOMEM. Free with srv_arch_metrics_free once no thread syncs. */
qr_status srv_arch_metrics_create(qr_context *ctx, srv_arch_metrics **out, char *err, size_t err_len);
void srv_arch_metrics_free(srv_arch_metrics *am);

/* The model's scheduler thread only: folds in what the counters of ctx[0..n_ctx) (NULL entries are
 * skipped; the same contexts in the same order on every call) gained since the previous call. Takes
 * no lock when nothing changed. */
void srv_arch_metrics_sync(srv_arch_metrics *am, const qr_context *const *ctx, int n_ctx);

/* A consistent copy of the model's metrics, labelled model="model_label" (already escaped with
 * srv_metrics_escape); NULL on OOM. Any thread. */
srv_arch_snapshot *srv_arch_metrics_snapshot(srv_arch_metrics *am, const char *model_label);
void srv_arch_snapshot_free(srv_arch_snapshot *s);

/* Writes the families of snaps[0..n) in the Prometheus text format (0.0.4), each family once. */
void srv_arch_metrics_render(FILE *f, srv_arch_snapshot *const *snaps, int n);

#endif
