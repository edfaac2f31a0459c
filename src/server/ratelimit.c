/* ratelimit.c — token buckets per key (see ratelimit.h). */
#include "server/ratelimit.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

typedef struct bucket {
    char key[40];
    double req, req_t;  /* requests left, last refill time */
    double tok, tok_t;  /* tokens left (may be negative), last refill time */
    struct bucket *next;
} bucket;

struct srv_ratelimit {
    pthread_mutex_t mu;
    bucket *head;
};

srv_ratelimit *srv_ratelimit_create(void) {
    srv_ratelimit *rl = calloc(1, sizeof *rl);
    if (rl) pthread_mutex_init(&rl->mu, NULL);
    return rl;
}

void srv_ratelimit_free(srv_ratelimit *rl) {
    if (!rl) return;
    for (bucket *b = rl->head; b;) {
        bucket *n = b->next;
        free(b);
        b = n;
    }
    pthread_mutex_destroy(&rl->mu);
    free(rl);
}

static bucket *get(srv_ratelimit *rl, const char *key, double rpm, double tpm) {
    for (bucket *b = rl->head; b; b = b->next)
        if (!strcmp(b->key, key)) return b;
    bucket *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    snprintf(b->key, sizeof b->key, "%s", key);
    b->req = rpm;
    b->tok = tpm;
    b->req_t = b->tok_t = qr_time_s();
    b->next = rl->head;
    rl->head = b;
    return b;
}

static void refill(double *level, double *t, double per_min, double now) {
    *level += (now - *t) * per_min / 60.0;
    if (*level > per_min) *level = per_min;
    *t = now;
}

int srv_ratelimit_request(srv_ratelimit *rl, const char *key, double rpm, double tpm) {
    if (rpm <= 0 && tpm <= 0) return 0;
    pthread_mutex_lock(&rl->mu);
    bucket *b = get(rl, key, rpm, tpm);
    int wait = 0;
    if (b) {
        const double now = qr_time_s();
        if (rpm > 0) refill(&b->req, &b->req_t, rpm, now);
        if (tpm > 0) refill(&b->tok, &b->tok_t, tpm, now);
        if (rpm > 0 && b->req < 1) wait = (int)ceil((1 - b->req) * 60.0 / rpm);
        else if (tpm > 0 && b->tok < 0) wait = (int)ceil(-b->tok * 60.0 / tpm);
        else if (rpm > 0) b->req -= 1;
        if (wait < 0) wait = 0;
        if (wait == 0 && ((rpm > 0 && b->req < 0))) wait = 1;
    }
    pthread_mutex_unlock(&rl->mu);
    return wait > 0 ? (wait < 1 ? 1 : wait) : 0;
}

void srv_ratelimit_tokens(srv_ratelimit *rl, const char *key, double n, double tpm) {
    if (tpm <= 0) return;
    pthread_mutex_lock(&rl->mu);
    bucket *b = get(rl, key, 0, tpm);
    if (b) {
        refill(&b->tok, &b->tok_t, tpm, qr_time_s());
        b->tok -= n;
    }
    pthread_mutex_unlock(&rl->mu);
}
