/* flight_push.c — DoPut throughput of the Flight client over loopback.
 *
 *   flight-push-bench --data HOST:PORT [--rows N] [--dim D] [--batch-rows B] [--repeat R] [--text]
 *
 * Pre-computes N vectors of dimension D (and ids, optionally short texts) into embedding batches of B
 * rows, then times R DoPut calls of all of them (schema + batches + half-close + end of stream) and
 * prints one JSON line with the payload and wire rates in MB/s (1 MB = 1e6 bytes). Payload bytes are
 * the Arrow column bytes (ids + vectors + text); wire bytes are the serialized FlightData messages.
 * Run it through bench/flight_push.py, which starts a discarding test server on free ports.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flight/embed_batch.h"
#include "flight/flight_client.h"
#include "util/util.h"

typedef struct bench_src {
    qr_embed_batch **batches; /* [n_batches] pre-built */
    int64_t n_batches;
    int64_t next;
} bench_src;

static qr_status bench_next(void *user, const qr_arrow_batch **batch, char *err, size_t err_len) {
    bench_src *s = user;
    *batch = s->next < s->n_batches ? qr_embed_batch_view(s->batches[s->next++]) : NULL;
    return QR_OK;
}

int main(int argc, char **argv) {
    const char *data = NULL;
    int64_t rows = 200000, batch_rows = 4096;
    int dim = 384, repeat = 5;
    bool text = false;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : "";
        if (strcmp(argv[i], "--data") == 0) data = argv[++i];
        else if (strcmp(argv[i], "--rows") == 0) rows = strtoll(v, NULL, 10), i++;
        else if (strcmp(argv[i], "--dim") == 0) dim = atoi(v), i++;
        else if (strcmp(argv[i], "--batch-rows") == 0) batch_rows = strtoll(v, NULL, 10), i++;
        else if (strcmp(argv[i], "--repeat") == 0) repeat = atoi(v), i++;
        else if (strcmp(argv[i], "--text") == 0) text = true;
        else {
            fprintf(stderr, "usage: flight-push-bench --data HOST:PORT [--rows N] [--dim D] [--batch-rows B] "
                            "[--repeat R] [--text]\n");
            return 2;
        }
    }
    if (!data || rows < 1 || dim < 1 || batch_rows < 1 || repeat < 1) {
        fprintf(stderr, "flight-push-bench: --data is required and sizes must be positive\n");
        return 2;
    }

    /* pre-compute the vectors */
    bench_src src = {.n_batches = (rows + batch_rows - 1) / batch_rows};
    src.batches = calloc((size_t)src.n_batches, sizeof(*src.batches));
    float *vec = malloc((size_t)dim * sizeof(float));
    uint64_t x = 88172645463325252ull;
    int64_t payload = 0;
    char doc[48];
    for (int64_t b = 0; b < src.n_batches; b++) {
        if (qr_embed_batch_create(dim, batch_rows, text, false, &src.batches[b]) != QR_OK) return 1;
        for (int64_t r = b * batch_rows; r < rows && r < (b + 1) * batch_rows; r++) {
            for (int j = 0; j < dim; j++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                vec[j] = (float)((double)(x >> 11) / (double)(1ull << 53)) * 2.0f - 1.0f;
            }
            int n = snprintf(doc, sizeof(doc), "document %lld", (long long)r);
            qr_embed_batch_append(src.batches[b], r, vec, doc, NULL);
            payload += 8 + (int64_t)dim * 4 + (text ? n + 4 : 0);
        }
    }
    free(vec);

    qr_flight_options o;
    qr_flight_options_init(&o);
    o.data_target = data;
    o.timeout_ms = 600000;
    qr_flight_client *c = NULL;
    char err[1024] = "";
    if (qr_flight_client_create(&o, &c, err, sizeof(err)) != QR_OK) {
        fprintf(stderr, "flight-push-bench: %s\n", err);
        return 1;
    }
    qr_arrow_schema schema;
    qr_embed_batch_schema(src.batches[0], "euclidean", &schema);
    double best = 1e30, total = 0;
    int64_t wire = 0;
    int rc = 0;
    for (int r = 0; r < repeat; r++) {
        src.next = 0;
        qr_flight_put_stats st;
        double t0 = qr_time_s();
        if (qr_flight_put(c, "bench", &schema, bench_next, NULL, &src, &st, err, sizeof(err)) != QR_OK) {
            fprintf(stderr, "flight-push-bench: %s\n", err);
            rc = 1;
            break;
        }
        double t = qr_time_s() - t0;
        total += t;
        if (t < best) best = t;
        wire = st.bytes;
    }
    if (rc == 0)
        printf("{\"rows\":%lld,\"dim\":%d,\"batch_rows\":%lld,\"repeat\":%d,\"payload_bytes\":%lld,"
               "\"wire_bytes\":%lld,\"best_s\":%.4f,\"mean_s\":%.4f,\"payload_mb_per_s\":%.1f,"
               "\"wire_mb_per_s\":%.1f,\"mean_payload_mb_per_s\":%.1f}\n",
               (long long)rows, dim, (long long)batch_rows, repeat, (long long)payload, (long long)wire, best,
               total / repeat, (double)payload / best / 1e6, (double)wire / best / 1e6,
               (double)payload / (total / repeat) / 1e6);
    qr_arrow_schema_free(&schema);
    for (int64_t b = 0; b < src.n_batches; b++) qr_embed_batch_free(src.batches[b]);
    free(src.batches);
    qr_flight_client_free(c);
    return rc;
}
