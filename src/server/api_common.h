/* api_common.h — the steps every generation route shares (parse, model, prompt, submit) and the
 * small JSON helpers of the API files. */
#ifndef QR_SERVER_API_COMMON_H
#define QR_SERVER_API_COMMON_H

#include "server/server_internal.h"

/* A generation in progress for one HTTP request. */
typedef struct srv_job {
    srv_gen_req req;
    srv_model *m;
    srv_gen g;
    bool started;
    double t_arrival;       /* qr_time_s when the request arrived */
} srv_job;

/* Parses rc->body for api, acquires the model, builds the prompt and submits it. Returns 0, or -1
 * after sending the error response (the job is cleaned up). */
int srv_job_begin(srv_conn *rc, srv_api api, srv_job *j);
/* Same from an already parsed request (takes ownership of *req; for /ws). http_status/code/err
 * describe a failure instead of sending it when rc == NULL. */
int srv_job_begin_req(srv_conn *rc, srv_api api, srv_gen_req *req, srv_job *j, qr_server *s, int *http_status,
                      const char **code, char *err, size_t err_len);
/* Waits for the end if needed, releases the model (applying keep_alive) and frees the job. */
void srv_job_end(srv_conn *rc, srv_job *j, qr_server *s);

/* Finish reason string for OpenAI / Ollama ("stop", "length"). */
const char *srv_finish_str(const srv_ev *done);
/* Error code for a DONE event that did not finish normally (NULL when it did): TIMEOUT 504 (the
 * request's timeout), SHUTTING_DOWN 503 (ended by the server's shutdown, or cancelled while it
 * drains), OVERLOADED 503 (cancelled otherwise: a client too slow to read), INFERENCE_ERROR 500. */
const char *srv_done_error_code(const qr_server *s, const srv_ev *done, int *http_status);
/* The message of that error: the scheduler's own, else one that names the cause. */
const char *srv_done_error_message(const srv_ev *done, const char *code);

/* Token piece text (for logprobs), NUL-terminated into buf. */
void srv_token_piece(const srv_model *m, int32_t id, char *buf, size_t cap);

#endif
