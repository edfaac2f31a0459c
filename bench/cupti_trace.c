/* bench/cupti_trace.c — kernel timeline of any CUDA program, CUDA graph nodes included, without
 * Nsight (which cannot make reports on the lent machines): a CUDA injection library.
 *
 *   build (here):   bench/cupti_trace.sh            -> build-gpu/trace/libqrtrace.so + libcupti.so.13
 *   use (device):   CUDA_INJECTION64_PATH=$PWD/build-gpu/trace/libqrtrace.so QR_TRACE_OUT=t.csv prog ...
 *   read:           python3 bench/cupti_trace.py t.csv
 *
 * The CUDA driver loads the library named by CUDA_INJECTION64_PATH at initialisation and calls its
 * InitializeInjection(); it enables CUPTI's concurrent-kernel activity records (start/end timestamps
 * of every kernel, each node of a replayed graph separately) and, at exit, writes one CSV line per
 * kernel: start_ns,end_ns,graph_id,grid,block,regs,name. QR_TRACE_MAX (default 2,000,000) caps the
 * kept records. QR_TRACE_API=1 adds the runtime API calls ("api:NAME", grid = the thread id) and the
 * copies ("memcpy:KIND", grid = the bytes) on the same clock. Tracing adds ~no time to the kernels (timestamps are taken by the hardware/driver)
 * but the records are real only for ordering and durations, not for absolute host times.
 */
#include <cupti.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct rec {
    uint64_t start, end;
    uint32_t graph, grid, block, regs;
    const char *name;
} rec;

static rec *g_recs;
static size_t g_n, g_cap;

#define BUF_SIZE (8u << 20)

static void CUPTIAPI buf_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *buffer = (uint8_t *)aligned_alloc(8, BUF_SIZE);
    *size = *buffer ? BUF_SIZE : 0;
    *max_records = 0;
}

static void CUPTIAPI buf_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    (void)ctx; (void)stream; (void)size;
    CUpti_Activity *a = NULL;
    while (cuptiActivityGetNextRecord(buffer, valid, &a) == CUPTI_SUCCESS) {
        if (g_n >= g_cap) continue;
        if (a->kind == CUPTI_ACTIVITY_KIND_RUNTIME) { /* QR_TRACE_API=1: "api:NAME", grid = the thread id */
            const CUpti_ActivityAPI *api = (const CUpti_ActivityAPI *)a;
            const char *nm = NULL;
            char buf[96];
            cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, api->cbid, &nm);
            snprintf(buf, sizeof buf, "api:%s", nm ? nm : "?");
            rec *r = &g_recs[g_n++];
            r->start = api->start;
            r->end = api->end;
            r->grid = api->threadId;
            r->name = strdup(buf);
            continue;
        }
        if (a->kind == CUPTI_ACTIVITY_KIND_MEMCPY) { /* "memcpy:KIND", grid = the bytes */
            const CUpti_ActivityMemcpy6 *mc = (const CUpti_ActivityMemcpy6 *)a;
            char buf[48];
            snprintf(buf, sizeof buf, "memcpy:%u", (unsigned)mc->copyKind);
            rec *r = &g_recs[g_n++];
            r->start = mc->start;
            r->end = mc->end;
            r->graph = mc->graphId;
            r->grid = (uint32_t)mc->bytes;
            r->name = strdup(buf);
            continue;
        }
        if (a->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && a->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)a;
        rec *r = &g_recs[g_n++];
        r->start = k->start;
        r->end = k->end;
        r->graph = k->graphId;
        r->grid = (uint32_t)(k->gridX * k->gridY * k->gridZ);
        r->block = (uint32_t)(k->blockX * k->blockY * k->blockZ);
        r->regs = k->registersPerThread;
        r->name = k->name ? strdup(k->name) : "?";
    }
    free(buffer);
}

static void dump(void) {
    cuptiActivityFlushAll(1);
    const char *path = getenv("QR_TRACE_OUT");
    FILE *f = fopen(path && *path ? path : "qr_trace.csv", "w");
    if (!f) return;
    fprintf(f, "start_ns,end_ns,graph,grid,block,regs,name\n");
    for (size_t i = 0; i < g_n; i++) {
        const rec *r = &g_recs[i];
        /* names are mangled C++: keep them unquoted but without commas */
        char nm[160];
        snprintf(nm, sizeof nm, "%s", r->name);
        for (char *p = nm; *p; p++)
            if (*p == ',') *p = ';';
        fprintf(f, "%llu,%llu,%u,%u,%u,%u,%s\n", (unsigned long long)r->start, (unsigned long long)r->end, r->graph,
                r->grid, r->block, r->regs, nm);
    }
    fclose(f);
    fprintf(stderr, "qrtrace: %zu kernel records -> %s\n", g_n, path && *path ? path : "qr_trace.csv");
}

int InitializeInjection(void) {
    const char *m = getenv("QR_TRACE_MAX");
    g_cap = m ? (size_t)strtoull(m, NULL, 10) : 2000000;
    g_recs = (rec *)calloc(g_cap, sizeof *g_recs);
    if (!g_recs) return 0;
    if (cuptiActivityRegisterCallbacks(buf_requested, buf_completed) != CUPTI_SUCCESS) {
        fprintf(stderr, "qrtrace: cuptiActivityRegisterCallbacks failed\n");
        return 0;
    }
    if (cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
        fprintf(stderr, "qrtrace: cannot enable kernel activity records\n");
        return 0;
    }
    const char *api = getenv("QR_TRACE_API");
    if (api && *api == '1' && (cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME) != CUPTI_SUCCESS ||
                               cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) != CUPTI_SUCCESS))
        fprintf(stderr, "qrtrace: cannot enable runtime API / memcpy records\n");
    atexit(dump);
    return 1;
}
