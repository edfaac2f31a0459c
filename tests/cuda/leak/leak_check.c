/* leak_check.c — quarrel_cuda_leak: GPU memory before and after many generate calls in one process
 * (issue 5, acceptance 4). Free device memory (cudaMemGetInfo through qr_cuda_mem_info) is read
 *   - around L model load/free cycles (weights, scratch, cuBLAS must all be returned),
 *   - around C context create/free cycles (KV cache, activations, recorded decode graphs),
 *   - after a warm-up and after N generate calls on one context (each: clear the cache, an 8-token
 *     prompt, 16 greedy one-token passes: the decode graph is replayed).
 * A drop of free memory beyond 2 MiB in any phase is a leak.
 *
 *   quarrel_cuda_leak [MODEL.gguf] [--calls N (1000)] [--loads L (5)] [--contexts C (50)]
 * Without a model it writes the synth llama "tiny" preset to /tmp. Exit 0 ok, 1 leak, 2 error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "quarrel.h"
#include "convert/synth.h"

#define SLACK_BYTES ((long long)2 << 20)

static long long free_mem(void) {
    size_t f = 0, t = 0;
    if (!qr_cuda_mem_info(0, &f, &t)) return -1;
    return (long long)f;
}

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* One generate call: clear, prompt, 16 greedy tokens. 0 ok. */
static int generate(qr_context *c, int n_vocab, int seed) {
    char err[512];
    qr_token prompt[8];
    for (int i = 0; i < 8; i++) prompt[i] = (qr_token)((seed * 31 + i * 97 + 1) % n_vocab);
    qr_kv_clear(c);
    qr_batch b = {.n_tokens = 8, .token = prompt};
    if (qr_decode(c, &b, err, sizeof err) != QR_OK) {
        fprintf(stderr, "decode: %s\n", err);
        return 1;
    }
    for (int i = 0; i < 16; i++) {
        qr_token t = (qr_token)argmax(qr_get_logits(c, -1), n_vocab);
        qr_batch one = {.n_tokens = 1, .token = &t};
        if (qr_decode(c, &one, err, sizeof err) != QR_OK) {
            fprintf(stderr, "decode: %s\n", err);
            return 1;
        }
    }
    return 0;
}

static int check(const char *phase, long long before, long long after) {
    const long long drop = before - after;
    printf("%-34s free before %10.1f MiB, after %10.1f MiB, lost %+8.2f MiB  %s\n", phase, before / 1048576.0,
           after / 1048576.0, drop / 1048576.0, drop > SLACK_BYTES ? "LEAK" : "ok");
    fflush(stdout);
    return drop > SLACK_BYTES;
}

int main(int argc, char **argv) {
    const char *model = NULL;
    int calls = 1000, loads = 5, contexts = 50;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--calls") && i + 1 < argc) calls = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--loads") && i + 1 < argc) loads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--contexts") && i + 1 < argc) contexts = atoi(argv[++i]);
        else if (argv[i][0] != '-') model = argv[i];
        else {
            fprintf(stderr, "usage: %s [MODEL.gguf] [--calls N] [--loads L] [--contexts C]\n", argv[0]);
            return 2;
        }
    }
    char err[512], tmp[256] = "";
    if (!model) {
        snprintf(tmp, sizeof tmp, "/tmp/qr_leak_tiny_%d.gguf", (int)getpid());
        qr_synth_options o = {.arch = "llama", .preset = "tiny", .type = "Q4_0", .n_threads = 4};
        if (qr_synth_write(&o, tmp, NULL, err, sizeof err) != QR_OK) {
            fprintf(stderr, "synth: %s\n", err);
            return 2;
        }
        model = tmp;
    }
    if (qr_cuda_device_count() == 0) {
        fprintf(stderr, "no CUDA device: nothing to check\n");
        return 2;
    }
    qr_model_params mp = qr_model_default_params();
    mp.backend = QR_BACKEND_CUDA;
    qr_context_params cp = qr_context_default_params();
    cp.n_ctx = 512;
    int leaks = 0, rc = 2;
    qr_model *m = NULL;
    qr_context *c = NULL;
    printf("model %s: %d load cycles, %d context cycles, %d generate calls\n", model, loads, contexts, calls);

    /* the first load creates the CUDA context and cuBLAS' lazy state: not counted */
    if (qr_model_load(model, &mp, &m, err, sizeof err) != QR_OK) goto fail;
    if (qr_context_create(m, &cp, &c, err, sizeof err) != QR_OK) goto fail;
    if (generate(c, qr_model_n_vocab(m), 0)) goto done;
    qr_context_free(c), c = NULL;
    qr_model_free(m), m = NULL;

    long long before = free_mem();
    for (int i = 0; i < loads; i++) {
        if (qr_model_load(model, &mp, &m, err, sizeof err) != QR_OK) goto fail;
        if (qr_context_create(m, &cp, &c, err, sizeof err) != QR_OK) goto fail;
        if (generate(c, qr_model_n_vocab(m), i)) goto done;
        qr_context_free(c), c = NULL;
        qr_model_free(m), m = NULL;
    }
    leaks += check("model load/free cycles", before, free_mem());

    if (qr_model_load(model, &mp, &m, err, sizeof err) != QR_OK) goto fail;
    if (qr_context_create(m, &cp, &c, err, sizeof err) != QR_OK) goto fail;
    if (generate(c, qr_model_n_vocab(m), 0)) goto done;
    qr_context_free(c), c = NULL;
    before = free_mem();
    for (int i = 0; i < contexts; i++) {
        if (qr_context_create(m, &cp, &c, err, sizeof err) != QR_OK) goto fail;
        if (generate(c, qr_model_n_vocab(m), i)) goto done;
        qr_context_free(c), c = NULL;
    }
    leaks += check("context create/free cycles", before, free_mem());

    if (qr_context_create(m, &cp, &c, err, sizeof err) != QR_OK) goto fail;
    for (int i = 0; i < 10; i++)
        if (generate(c, qr_model_n_vocab(m), i)) goto done;
    before = free_mem();
    for (int i = 0; i < calls; i++)
        if (generate(c, qr_model_n_vocab(m), i)) goto done;
    char label[64];
    snprintf(label, sizeof label, "%d generate calls", calls);
    leaks += check(label, before, free_mem());
    rc = leaks ? 1 : 0;
    printf("%s\n", leaks ? "FAIL: GPU memory leaked" : "PASS: no GPU memory leaked");
    goto done;
fail:
    fprintf(stderr, "error: %s\n", err);
done:
    qr_context_free(c);
    qr_model_free(m);
    if (tmp[0]) unlink(tmp);
    return rc;
}
