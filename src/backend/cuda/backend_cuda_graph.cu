/* backend_cuda_graph.cu — the CUDA backend's decode graphs (run_graph / graph_release): a pass of a given
 * shape is run once plainly (it sizes every scratch buffer), then captured into a CUDA graph and replayed
 * while the scratch buffers stay put; a capture that fails turns graphs off with a note. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "util/util.h"
}

#include "backend/cuda/cuda_backend.h"

#define MAX_GRAPHS 32

static void graph_drop(cuda_graph_rec *g) {
    if (g->exec) cudaGraphExecDestroy(g->exec);
    memset(g, 0, sizeof *g);
}

void cuda_graph_release(qr_backend *be, const void *owner) {
    cuda_backend *cb = CB(be);
    int j = 0;
    for (int i = 0; i < cb->n_graphs; i++) {
        if (cb->graphs[i].owner == owner) graph_drop(&cb->graphs[i]);
        else cb->graphs[j++] = cb->graphs[i];
    }
    cb->n_graphs = j;
}

/* Abandons a failed capture: graphs stay off from now on (graph_note says why); the errors the
 * capture raised are cleared, since the caller reruns the pass without a graph. */
static void capture_failed(cuda_backend *cb, const char *stage, cudaError_t e) {
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(cb->stream, &cs) == cudaSuccess && cs != cudaStreamCaptureStatusNone) {
        cudaGraph_t g = NULL;
        cudaStreamEndCapture(cb->stream, &g);
        if (g) cudaGraphDestroy(g);
    }
    (void)cudaGetLastError();
    cb->capturing = false;
    cb->pend_y = NULL; /* its parts were the abandoned graph's: the pass reruns eagerly */
    char note[sizeof cb->graph_note + sizeof cb->error_msg + 96];
    snprintf(note, sizeof note, "CUDA graph %s failed (%s%s%s); running ops one by one", stage,
             e != cudaSuccess ? cudaGetErrorString(e) : "", e != cudaSuccess && cb->error != QR_OK ? "; " : "",
             cb->error != QR_OK ? cb->error_msg : "");
    memcpy(cb->graph_note, note, sizeof cb->graph_note - 1);
    cb->graph_note[sizeof cb->graph_note - 1] = 0;
    cb->error = QR_OK;
    cb->error_msg[0] = 0;
    cb->graphs_off = true;
}

qr_status cuda_run_graph(qr_backend *be, const void *owner, uint64_t key, void (*fn)(void *), void *arg,
                                char *err, size_t err_len) {
    cuda_backend *cb = CB(be);
    if (cb->graphs_off || cb->error != QR_OK) {
        fn(arg);
        return QR_OK;
    }
    cuda_graph_rec *g = NULL;
    for (int i = 0; i < cb->n_graphs && !g; i++)
        if (cb->graphs[i].owner == owner && cb->graphs[i].key == key) g = &cb->graphs[i];
    if (!g) {
        if (!cb->graphs) cb->graphs = (cuda_graph_rec *)calloc(MAX_GRAPHS, sizeof(cuda_graph_rec));
        if (!cb->graphs) {
            fn(arg);
            return QR_OK;
        }
        if (cb->n_graphs == MAX_GRAPHS) { /* evict the oldest */
            graph_drop(&cb->graphs[0]);
            memmove(cb->graphs, cb->graphs + 1, (MAX_GRAPHS - 1) * sizeof(cuda_graph_rec));
            cb->n_graphs--;
        }
        g = &cb->graphs[cb->n_graphs++];
        memset(g, 0, sizeof *g);
        g->owner = owner;
        g->key = key;
    }
    cudaSetDevice(cb->device);
    cb->graph_mode = true;
    if (g->exec && g->gen != cb->scratch_gen) { /* a buffer it uses moved: warm up and capture again */
        cudaGraphExecDestroy(g->exec);
        g->exec = NULL;
        g->runs = 0;
    }
    cudaError_t e = cudaSuccess;
    if (!g->exec && g->runs == 0) { /* warm-up: sizes every scratch buffer for this shape */
        fn(arg);
        g->runs = 1;
        cb->graph_mode = false;
        return QR_OK;
    }
    if (!g->exec) { /* capture */
        const uint64_t gen = cb->scratch_gen;
        cudaGraph_t graph = NULL;
        e = cudaStreamBeginCapture(cb->stream, cudaStreamCaptureModeThreadLocal);
        if (e == cudaSuccess) {
            cb->capturing = true;
            fn(arg);
            if (cb->pend_y) cuda_pend_flush(cb); /* a split-K sum the pass left pending: inside the graph */
            cb->capturing = false;
            e = cudaStreamEndCapture(cb->stream, &graph);
        }
        if (e != cudaSuccess || cb->error != QR_OK || gen != cb->scratch_gen || !graph) {
            if (graph) cudaGraphDestroy(graph);
            capture_failed(cb, "capture", e);
            fn(arg);
            cb->graph_mode = false;
            return QR_OK;
        }
        e = cudaGraphInstantiate(&g->exec, graph, 0);
        cudaGraphDestroy(graph);
        if (e != cudaSuccess) {
            g->exec = NULL;
            capture_failed(cb, "instantiation", e);
            fn(arg);
            cb->graph_mode = false;
            return QR_OK;
        }
        g->gen = gen;
        cb->n_captured++;
    } else {
        cb->n_replayed++;
    }
    cb->graph_mode = false;
    const double t0 = cb->host_prof ? qr_time_s() : 0.0;
    e = cudaGraphLaunch(g->exec, cb->stream);
    if (cb->host_prof) {
        cb->t_launch += qr_time_s() - t0;
        if (++cb->n_launch_prof % 256 == 0)
            fprintf(stderr, "quarrel: cuda graph launches: %lld, %.1f us a launch on the host\n",
                    (long long)cb->n_launch_prof, cb->t_launch * 1e6 / (double)cb->n_launch_prof);
    }
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return qr_errf(err, err_len, QR_ERR_INTERNAL, "cuda backend: graph launch: %s", cudaGetErrorString(e));
    }
    return QR_OK;
}
