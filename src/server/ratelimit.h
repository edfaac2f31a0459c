/* ratelimit.h — per-key token buckets: requests per minute and tokens (prompt + generated) per
 * minute. A bucket holds one minute's worth and refills continuously. */
#ifndef QR_SERVER_RATELIMIT_H
#define QR_SERVER_RATELIMIT_H

typedef struct srv_ratelimit srv_ratelimit;

srv_ratelimit *srv_ratelimit_create(void);
void srv_ratelimit_free(srv_ratelimit *rl);

/* Takes one request from key's bucket (rpm > 0) and checks its token bucket is not in debt
 * (tpm > 0). Returns 0, or the seconds (>= 1) to wait before retrying. */
int srv_ratelimit_request(srv_ratelimit *rl, const char *key, double rpm, double tpm);
/* Charges n tokens to key's token bucket (it may go into debt). */
void srv_ratelimit_tokens(srv_ratelimit *rl, const char *key, double n, double tpm);

#endif
