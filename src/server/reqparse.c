/* reqparse.c — JSON request bodies -> srv_gen_req (see reqparse.h). */
#include "server/reqparse.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

bool srv_utf8_valid(const char *s, size_t len) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        unsigned c = p[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int n;
        unsigned cp;
        if (c >= 0xc2 && c <= 0xdf) n = 1, cp = c & 0x1f;
        else if (c >= 0xe0 && c <= 0xef) n = 2, cp = c & 0x0f;
        else if (c >= 0xf0 && c <= 0xf4) n = 3, cp = c & 0x07;
        else return false;
        for (int k = 1; k <= n; k++) {
            if (i + (size_t)k >= len || (p[i + k] & 0xc0) != 0x80) return false;
            cp = (cp << 6) | (p[i + k] & 0x3f);
        }
        if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += (size_t)n + 1;
    }
    return true;
}

/* Whether d is integral and strictly inside int64, so that (json_int_t)d is exact. -2^63 itself is left out:
 * as a real it is also what an integer literal just below int64 (which jansson could not parse) rounds to. */
static bool real_is_int64(double d) { return d == floor(d) && d > -9223372036854775808.0 && d < 9223372036854775808.0; }

/* Integral reals (1.0, 1e3, and integers past int64 parsed as reals) within int64 become integers. */
static void reals_to_ints(json_t *j) {
    if (json_is_object(j)) {
        const char *k;
        json_t *v;
        json_object_foreach(j, k, v) {
            if (json_is_real(v)) {
                const double d = json_real_value(v);
                if (real_is_int64(d)) json_object_set_new(j, k, json_integer((json_int_t)d));
            } else {
                reals_to_ints(v);
            }
        }
    } else if (json_is_array(j)) {
        for (size_t i = 0; i < json_array_size(j); i++) {
            json_t *v = json_array_get(j, i);
            if (json_is_real(v)) {
                const double d = json_real_value(v);
                if (real_is_int64(d)) json_array_set_new(j, i, json_integer((json_int_t)d));
            } else {
                reals_to_ints(v);
            }
        }
    }
}

int srv_json_parse(const char *body, size_t len, int max_depth, json_t **root, char *err, size_t err_len) {
    *root = NULL;
    /* Nesting depth outside strings, before jansson sees it (its own limit is 2048). A \u0000 escape (in a
     * key or a value) reads as U+FFFD: C strings end at NUL and jansson cannot hold it in a key. */
    int depth = 0;
    bool in_str = false;
    char *copy = NULL; /* body with \u0000 rewritten, made at the first one */
    for (size_t i = 0; i < len; i++) {
        const char c = body[i];
        if (in_str) {
            if (c == '\\') {
                if (i + 5 < len && !memcmp(body + i + 1, "u0000", 5)) {
                    if (!copy) {
                        if (!(copy = malloc(len))) return qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory"), -1;
                        body = memcpy(copy, body, len);
                    }
                    memcpy(copy + i + 1, "ufffd", 5);
                }
                i++;
            } else if (c == '"') {
                in_str = false;
            }
        } else if (c == '"') {
            in_str = true;
        } else if (c == '{' || c == '[') {
            if (++depth > max_depth) {
                free(copy);
                qr_errf(err, err_len, QR_ERR_INVALID_ARG, "JSON nesting deeper than %d levels", max_depth);
                return -1;
            }
        } else if (c == '}' || c == ']') {
            depth--;
        }
    }
    json_error_t je;
    json_t *r = json_loadb(body, len, 0, &je);
    if (!r && json_error_code(&je) == json_error_numeric_overflow) /* an integer beyond int64, maybe in a field */
        r = json_loadb(body, len, JSON_DECODE_INT_AS_REAL, &je);    /* we do not even read: numbers as reals */
    if (r) reals_to_ints(r); /* 5.0 is an integer, as JSON Schema says */
    free(copy);
    if (!r) {
        qr_errf(err, err_len, QR_ERR_INVALID_ARG, "malformed JSON at line %d, column %d: %s", je.line, je.column,
                je.text);
        return -1;
    }
    if (!json_is_object(r)) {
        json_decref(r);
        qr_errf(err, err_len, QR_ERR_INVALID_ARG, "the request body must be a JSON object");
        return -1;
    }
    *root = r;
    return 0;
}

void srv_gen_req_free(srv_gen_req *r) {
    json_decref(r->root);
    json_decref(r->chat_messages);
    json_decref(r->chat_extra);
    free(r->think_end);
    free(r->bias);
    qr_grammar_free(r->grammar);
    memset(r, 0, sizeof *r);
}

#define FAIL(...)                                                      \
    do {                                                               \
        qr_errf(err, err_len, QR_ERR_INVALID_ARG, __VA_ARGS__);        \
        return -1;                                                     \
    } while (0)

/* Number field (int or real). Returns 1 when present, 0 absent, -1 wrong type / range. */
static int get_num(json_t *o, const char *key, double lo, double hi, double *out, char *err, size_t err_len) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) FAIL("'%s' must be a number", key);
    const double d = json_number_value(v);
    if (!isfinite(d) || d < lo || d > hi) FAIL("'%s' must be in [%g, %g]", key, lo, hi);
    *out = d;
    return 1;
}

static int get_int(json_t *o, const char *key, double lo, double hi, int64_t *out, char *err, size_t err_len) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    /* integral reals within int64 were made integers by srv_json_parse: a real left is a fraction or past int64 */
    if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)))
        FAIL("'%s' must be in [%.0f, %.0f]", key, lo, hi);
    if (!json_is_integer(v)) FAIL("'%s' must be an integer", key);
    const json_int_t x = json_integer_value(v);
    if ((double)x < lo || (double)x > hi) FAIL("'%s' must be in [%.0f, %.0f]", key, lo, hi);
    *out = (int64_t)x;
    return 1;
}

static int get_bool(json_t *o, const char *key, bool *out, char *err, size_t err_len) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) FAIL("'%s' must be a boolean", key);
    *out = json_is_true(v);
    return 1;
}

static int get_str(json_t *o, const char *key, const char **out, char *err, size_t err_len) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_string(v)) FAIL("'%s' must be a string", key);
    *out = json_string_value(v);
    return 1;
}

/* stop: a string or an array of strings. */
static int get_stops(json_t *o, const char *key, srv_gen_req *r, char *err, size_t err_len) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (json_is_string(v)) {
        if (json_string_length(v) == 0) return 0;
        r->stops[0] = json_string_value(v);
        r->n_stops = 1;
        return 1;
    }
    if (!json_is_array(v)) FAIL("'%s' must be a string or an array of strings", key);
    if (json_array_size(v) > SRV_MAX_STOPS) FAIL("'%s' has more than %d entries", key, SRV_MAX_STOPS);
    r->n_stops = 0;
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) {
        if (!json_is_string(e)) FAIL("'%s[%zu]' must be a string", key, i);
        if (json_string_length(e) > 0) r->stops[r->n_stops++] = json_string_value(e);
    }
    return 1;
}

/* Sampler knobs shared by every API (o = the body, or Ollama's options object). */
static int sampler_fields(json_t *o, srv_gen_req *r, bool openai, char *err, size_t err_len) {
    double d;
    int64_t i;
    int rc;
    if ((rc = get_num(o, "temperature", 0, openai ? 2 : 100, &d, err, err_len)) < 0) return -1;
    if (rc) r->sp.temperature = (float)d;
    if ((rc = get_num(o, "top_p", 0, 1, &d, err, err_len)) < 0) return -1;
    if (rc) r->sp.top_p = (float)d; /* 0: the top token alone */
    if ((rc = get_int(o, "top_k", 0, 1e9, &i, err, err_len)) < 0) return -1;
    if (rc) r->sp.top_k = (int32_t)i;
    if ((rc = get_num(o, "min_p", 0, 1, &d, err, err_len)) < 0) return -1;
    if (rc) r->sp.min_p = (float)d;
    if ((rc = get_num(o, "repeat_penalty", 1e-3, 100, &d, err, err_len)) < 0) return -1;
    if (rc) r->sp.repeat_penalty = (float)d;
    if ((rc = get_int(o, "repeat_last_n", -1, 1 << 20, &i, err, err_len)) < 0) return -1;
    if (rc) r->sp.penalty_last_n = i < 0 ? 1 << 20 : (int32_t)i;
    if ((rc = get_num(o, "presence_penalty", -2, 2, &d, err, err_len)) < 0) return -1;
    if (rc) r->sp.presence_penalty = (float)d;
    if ((rc = get_num(o, "frequency_penalty", -2, 2, &d, err, err_len)) < 0) return -1;
    if (rc) r->sp.frequency_penalty = (float)d;
    if ((rc = get_int(o, "seed", -9223372036854775808.0, 9223372036854775807.0, &i, err, err_len)) < 0) return -1;
    if (rc) r->sp.seed = (uint64_t)i;
    if (get_stops(o, "stop", r, err, err_len) < 0) return -1;
    return 0;
}

/* One group of a duration: digits, optionally '.' digits, optionally a unit (ms, h, m, s). Advances *p,
 * adds the group's seconds to *total; *unit says whether it had a unit. Returns false on no digits. */
static bool duration_group(const char **p, double *total, bool *unit) {
    const char *s = *p, *start = s;
    while (*s >= '0' && *s <= '9') s++;
    if (s == start) return false;
    if (*s == '.' && s[1] >= '0' && s[1] <= '9')
        for (s++; *s >= '0' && *s <= '9'; s++) {}
    const double x = strtod(start, NULL); /* the digits just checked: a plain decimal */
    double scale = 1;
    *unit = true;
    if (!strncmp(s, "ms", 2)) scale = 1e-3, s += 2;
    else if (*s == 'h') scale = 3600, s++;
    else if (*s == 'm') scale = 60, s++;
    else if (*s == 's') s++;
    else *unit = false;
    *total += x * scale;
    *p = s;
    return true;
}

int srv_parse_duration(const json_t *v, double *seconds) {
    if (json_is_number(v)) {
        *seconds = json_number_value(v);
        return isfinite(*seconds) ? 0 : -1;
    }
    if (!json_is_string(v)) return -1;
    /* -?(N(.N)?UNIT)+ or a lone -?N(.N)? (seconds): the KeepAlive pattern of openapi.yaml */
    const char *s = json_string_value(v);
    const bool neg = *s == '-';
    if (neg) s++;
    double total = 0;
    bool unit = false;
    int groups = 0;
    while (*s) {
        if (!duration_group(&s, &total, &unit) || (!unit && (groups > 0 || *s))) return -1;
        groups++;
    }
    if (groups == 0 || !isfinite(total)) return -1;
    *seconds = neg ? -total : total;
    return 0;
}

static int check_messages(json_t *m, char *err, size_t err_len) {
    if (!json_is_array(m)) FAIL("'messages' must be an array");
    if (json_array_size(m) == 0) FAIL("'messages' must not be empty");
    size_t i;
    json_t *e;
    json_array_foreach(m, i, e) {
        if (!json_is_object(e)) FAIL("'messages[%zu]' must be an object", i);
        json_t *role = json_object_get(e, "role"), *content = json_object_get(e, "content");
        if (!json_is_string(role)) FAIL("'messages[%zu].role' must be a string", i);
        const char *rs = json_string_value(role);
        if (strcmp(rs, "system") && strcmp(rs, "user") && strcmp(rs, "assistant") && strcmp(rs, "tool") &&
            strcmp(rs, "developer"))
            FAIL("'messages[%zu].role' must be one of system, user, assistant, tool, developer (got '%.64s')", i,
                 rs);
        json_t *tc = json_object_get(e, "tool_calls");
        if (tc && !json_is_null(tc)) {
            if (!json_is_array(tc)) FAIL("'messages[%zu].tool_calls' must be an array", i);
            size_t k;
            json_t *call;
            json_array_foreach(tc, k, call) {
                json_t *fn = json_object_get(call, "function");
                json_t *args = json_object_get(fn, "arguments");
                if (!json_is_object(call) || !json_is_object(fn) || !json_is_string(json_object_get(fn, "name")) ||
                    (args && !json_is_null(args) && !json_is_string(args) && !json_is_object(args)))
                    FAIL("'messages[%zu].tool_calls[%zu]' must be {\"function\": {\"name\": string, \"arguments\": "
                         "string or object}}", i, k);
            }
        }
        json_t *tcid = json_object_get(e, "tool_call_id");
        if (tcid && !json_is_null(tcid) && !json_is_string(tcid)) FAIL("'messages[%zu].tool_call_id' must be a string", i);
        if (content && !json_is_null(content) && !json_is_string(content)) {
            /* OpenAI content parts: [{type: text, text: ...}] */
            if (!json_is_array(content)) FAIL("'messages[%zu].content' must be a string or an array of parts", i);
            size_t k;
            json_t *part;
            json_array_foreach(content, k, part) {
                json_t *t = json_object_get(part, "type"), *tx = json_object_get(part, "text");
                if (!json_is_object(part) || !json_is_string(t) || strcmp(json_string_value(t), "text") ||
                    !json_is_string(tx))
                    FAIL("'messages[%zu].content[%zu]' must be a text part {type: \"text\", text: ...}", i, k);
            }
        }
    }
    return 0;
}

int srv_gen_req_from_json(json_t *root, srv_api api, srv_gen_req *r, char *err, size_t err_len) {
    memset(r, 0, sizeof *r);
    r->root = json_incref(root);
    r->model = "";
    r->max_tokens = -1;
    const bool openai = api == SRV_API_OPENAI_CHAT || api == SRV_API_OPENAI_COMPLETION;
    qr_sampler_params_default(&r->sp);
    if (openai) { /* OpenAI semantics: plain softmax sampling at temperature 1 */
        r->sp.temperature = 1.0f;
        r->sp.top_k = 0;
        r->sp.top_p = 1.0f;
        r->sp.min_p = 0.0f;
    }
    r->stream = api == SRV_API_OLLAMA_GENERATE || api == SRV_API_OLLAMA_CHAT || api == SRV_API_NATIVE;
    if (get_str(root, "model", &r->model, err, err_len) < 0) return -1;
    if (get_bool(root, "stream", &r->stream, err, err_len) < 0) return -1;
    if (get_bool(root, "ignore_eos", &r->ignore_eos, err, err_len) < 0) return -1;
    bool spec = false;
    const int spec_rc = get_bool(root, "speculative", &spec, err, err_len);
    if (spec_rc < 0) return -1;
    r->speculative = spec_rc > 0 ? spec : -1;
    const char *prio = NULL;
    if (get_str(root, "priority", &prio, err, err_len) < 0) return -1;
    if (prio && strcmp(prio, "interactive") && strcmp(prio, "batch"))
        FAIL("'priority' must be \"interactive\" or \"batch\"");
    r->priority = prio && !strcmp(prio, "batch");
    json_t *ka = json_object_get(root, "keep_alive");
    if (ka && !json_is_null(ka)) {
        if (srv_parse_duration(ka, &r->keep_alive_s) < 0)
            FAIL("'keep_alive' must be a number of seconds or a duration such as \"5m\"");
        r->has_keep_alive = true;
    }
    int64_t n;
    int rc;
    /* what to generate from */
    json_t *msgs = json_object_get(root, "messages");
    json_t *prompt = json_object_get(root, "prompt");
    switch (api) {
    case SRV_API_OLLAMA_CHAT:
    case SRV_API_OPENAI_CHAT:
        if (!msgs) FAIL("'messages' is required");
        if (check_messages(msgs, err, err_len) < 0) return -1;
        r->messages = msgs;
        break;
    case SRV_API_OLLAMA_GENERATE:
        if (get_str(root, "prompt", &r->prompt, err, err_len) < 0) return -1;
        if (!r->prompt) r->prompt = "";
        if (get_str(root, "system", &r->system, err, err_len) < 0) return -1;
        if (get_bool(root, "raw", &r->raw, err, err_len) < 0) return -1;
        break;
    case SRV_API_OPENAI_COMPLETION:
        if (!prompt) FAIL("'prompt' is required");
        if (json_is_string(prompt)) {
            r->prompt = json_string_value(prompt);
        } else if (json_is_array(prompt) && json_array_size(prompt) == 1 && json_is_string(json_array_get(prompt, 0))) {
            r->prompt = json_string_value(json_array_get(prompt, 0));
        } else if (json_is_array(prompt) && json_array_size(prompt) > 0) {
            size_t i;
            json_t *e;
            json_array_foreach(prompt, i, e) if (!json_is_integer(e) || json_integer_value(e) < 0 ||
                                                json_integer_value(e) > INT32_MAX)
                FAIL("'prompt' must be a string, an array of one string, or an array of token ids");
            r->prompt_ids = prompt;
        } else {
            FAIL("'prompt' must be a string, an array of one string, or an array of token ids");
        }
        break;
    case SRV_API_NATIVE: /* prompt or messages (messages win); a prompt given is a non-empty string either way */
        if (get_str(root, "prompt", &r->prompt, err, err_len) < 0) return -1;
        if (r->prompt && !r->prompt[0]) FAIL("the prompt is empty");
        if (msgs && !json_is_null(msgs)) {
            if (check_messages(msgs, err, err_len) < 0) return -1;
            r->messages = msgs;
            r->prompt = NULL;
        } else if (!r->prompt) {
            FAIL("'prompt' or 'messages' is required");
        }
        if (get_bool(root, "continue_final_message", &r->continue_final, err, err_len) < 0) return -1;
        if (r->continue_final) {
            const char *last = r->messages && json_array_size(r->messages)
                                   ? json_string_value(json_object_get(
                                         json_array_get(r->messages, json_array_size(r->messages) - 1), "role"))
                                   : NULL;
            if (!last || strcmp(last, "assistant"))
                FAIL("'continue_final_message' needs 'messages' ending with an assistant message");
        }
        break;
    }
    /* sampler + lengths */
    if (api == SRV_API_OLLAMA_GENERATE || api == SRV_API_OLLAMA_CHAT) {
        json_t *opt = json_object_get(root, "options");
        if (opt && !json_is_null(opt)) {
            if (!json_is_object(opt)) FAIL("'options' must be an object");
            if (sampler_fields(opt, r, false, err, err_len) < 0) return -1;
            if ((rc = get_int(opt, "num_predict", -2, 1 << 24, &n, err, err_len)) < 0) return -1;
            if (rc) r->max_tokens = n <= 0 ? -1 : (int32_t)n;
        }
    } else {
        if (sampler_fields(root, r, openai, err, err_len) < 0) return -1;
        if ((rc = get_int(root, "max_tokens", 1, 1 << 24, &n, err, err_len)) < 0) return -1;
        if (rc) r->max_tokens = (int32_t)n;
        if ((rc = get_int(root, "max_completion_tokens", 1, 1 << 24, &n, err, err_len)) < 0) return -1;
        if (rc) r->max_tokens = (int32_t)n;
    }
    if (openai) {
        if ((rc = get_int(root, "n", 1, 1, &n, err, err_len)) < 0) FAIL("only 'n' = 1 is supported");
        json_t *so = json_object_get(root, "stream_options");
        if (so && !json_is_null(so)) {
            if (!json_is_object(so)) FAIL("'stream_options' must be an object");
            if (get_bool(so, "include_usage", &r->include_usage, err, err_len) < 0) return -1;
        }
        /* logprobs: chat = boolean + top_logprobs; completions = integer count of alternatives */
        json_t *lp = json_object_get(root, "logprobs");
        if (api == SRV_API_OPENAI_CHAT) {
            bool want = false;
            if (get_bool(root, "logprobs", &want, err, err_len) < 0) return -1;
            r->sp.logprobs = want;
            if ((rc = get_int(root, "top_logprobs", 0, QR_SAMPLER_MAX_LOGPROBS, &n, err, err_len)) < 0) return -1;
            if (rc) {
                if (!want && n > 0) FAIL("'top_logprobs' needs 'logprobs': true");
                r->sp.n_logprobs = (int32_t)n;
            }
        } else if (lp && !json_is_null(lp)) {
            if ((rc = get_int(root, "logprobs", 0, 5, &n, err, err_len)) < 0) return -1;
            r->sp.logprobs = true;
            r->sp.n_logprobs = (int32_t)n;
        }
        json_t *lb = json_object_get(root, "logit_bias");
        if (lb && !json_is_null(lb)) {
            if (!json_is_object(lb)) FAIL("'logit_bias' must be an object of token id -> bias");
            if (json_object_size(lb) > 1024) FAIL("'logit_bias' has more than 1024 entries");
            r->bias = calloc(json_object_size(lb) + 1, sizeof *r->bias);
            if (!r->bias) FAIL("out of memory");
            const char *k;
            json_t *v;
            json_object_foreach(lb, k, v) {
                char *end;
                long id = strtol(k, &end, 10);
                if (!*k || *end || id < 0 || id > INT32_MAX) FAIL("'logit_bias' key '%.32s' is not a token id", k);
                if (!json_is_number(v) || json_number_value(v) < -100 || json_number_value(v) > 100)
                    FAIL("'logit_bias' values must be numbers in [-100, 100]");
                r->bias[r->n_bias].token = (int32_t)id;
                r->bias[r->n_bias].bias = (float)json_number_value(v);
                r->n_bias++;
            }
            r->sp.logit_bias = r->bias;
            r->sp.n_logit_bias = r->n_bias;
        }
    }
    r->think = -1;
    r->think_budget = -1;
    r->parallel_tools = true;
    if (api == SRV_API_OPENAI_CHAT || api == SRV_API_OLLAMA_CHAT) {
        if (srv_parse_tools(root, r, err, err_len) < 0) return -1;
    }
    if (api == SRV_API_OPENAI_CHAT || api == SRV_API_OLLAMA_CHAT || api == SRV_API_OLLAMA_GENERATE) {
        if (srv_parse_reasoning(root, api, r, err, err_len) < 0) return -1;
    }
    if (srv_parse_grammar(root, api, &r->grammar, err, err_len) < 0) return -1;
    if (r->grammar && r->tools && r->tool_choice >= SRV_TOOLS_REQUIRED)
        FAIL("a required tool call and '%s' both constrain the reply: give one of them",
             api == SRV_API_OLLAMA_CHAT ? "format" : json_object_get(root, "grammar") ? "grammar" : "response_format");
    return 0;
}

/* A function name: 1-64 of [A-Za-z0-9_.-]. */
static bool tool_name_ok(const char *s, size_t len) {
    return len >= 1 && len <= 64 &&
           strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") == len;
}

int srv_parse_tools(json_t *root, srv_gen_req *r, char *err, size_t err_len) {
    r->tools = NULL;
    r->tool_choice = SRV_TOOLS_AUTO;
    r->tool_name = NULL;
    r->parallel_tools = true;
    if (get_bool(root, "parallel_tool_calls", &r->parallel_tools, err, err_len) < 0) return -1;
    json_t *tools = json_object_get(root, "tools");
    if (tools && json_is_null(tools)) tools = NULL;
    if (tools) {
        if (!json_is_array(tools)) FAIL("'tools' must be an array of {\"type\": \"function\", \"function\": {...}}");
        if (json_array_size(tools) > 128) FAIL("'tools' has more than 128 entries");
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t) {
            if (!json_is_object(t)) FAIL("'tools[%zu]' must be an object", i);
            json_t *type = json_object_get(t, "type");
            if (type && !(json_is_string(type) && !strcmp(json_string_value(type), "function")))
                FAIL("'tools[%zu].type' must be \"function\"", i);
            json_t *fn = json_object_get(t, "function");
            if (!json_is_object(fn)) FAIL("'tools[%zu].function' must be an object {name, description, parameters}", i);
            json_t *name = json_object_get(fn, "name");
            if (!json_is_string(name) || !tool_name_ok(json_string_value(name), json_string_length(name)))
                FAIL("'tools[%zu].function.name' must be 1-64 letters, digits, '_', '.' or '-'", i);
            json_t *d = json_object_get(fn, "description");
            if (d && !json_is_null(d) && !json_is_string(d)) FAIL("'tools[%zu].function.description' must be a string", i);
            json_t *params = json_object_get(fn, "parameters");
            if (params && !json_is_null(params) && !json_is_object(params))
                FAIL("'tools[%zu].function.parameters' must be a JSON schema object", i);
            json_t *strict = json_object_get(fn, "strict");
            if (strict && !json_is_null(strict) && !json_is_boolean(strict))
                FAIL("'tools[%zu].function.strict' must be a boolean", i);
        }
        if (json_array_size(tools) > 0) r->tools = tools;
    }
    json_t *tc = json_object_get(root, "tool_choice");
    if (tc && !json_is_null(tc)) {
        if (json_is_string(tc)) {
            const char *v = json_string_value(tc);
            if (!strcmp(v, "auto")) r->tool_choice = SRV_TOOLS_AUTO;
            else if (!strcmp(v, "none")) r->tool_choice = SRV_TOOLS_NONE;
            else if (!strcmp(v, "required")) r->tool_choice = SRV_TOOLS_REQUIRED;
            else FAIL("'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\"}}");
        } else if (json_is_object(tc)) {
            json_t *type = json_object_get(tc, "type");
            json_t *name = json_object_get(json_object_get(tc, "function"), "name");
            if ((type && !(json_is_string(type) && !strcmp(json_string_value(type), "function"))) || !json_is_string(name))
                FAIL("'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\"}}");
            r->tool_choice = SRV_TOOLS_NAMED;
            r->tool_name = json_string_value(name);
        } else {
            FAIL("'tool_choice' must be a string or an object");
        }
        if (r->tool_choice >= SRV_TOOLS_REQUIRED && !r->tools)
            FAIL("'tool_choice' asks for a tool call but 'tools' is empty");
        if (r->tool_choice == SRV_TOOLS_NAMED) {
            bool found = false;
            size_t i;
            json_t *t;
            json_array_foreach(r->tools, i, t) {
                const char *n = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
                if (n && !strcmp(n, r->tool_name)) found = true;
            }
            if (!found) FAIL("'tool_choice' names '%.64s', which is not in 'tools'", r->tool_name);
        }
    }
    if (r->tool_choice == SRV_TOOLS_NONE) r->tools = NULL;
    return 0;
}

/* Reasoning tokens of each effort level (-1 = no limit). */
static int32_t effort_budget(const char *e) {
    if (!strcmp(e, "none")) return 0;
    if (!strcmp(e, "minimal")) return 128;
    if (!strcmp(e, "low")) return 512;
    if (!strcmp(e, "medium")) return 2048;
    return -1; /* high */
}

static bool effort_ok(const char *e) {
    return !strcmp(e, "none") || !strcmp(e, "minimal") || !strcmp(e, "low") || !strcmp(e, "medium") ||
           !strcmp(e, "high");
}

int srv_parse_reasoning(json_t *root, srv_api api, srv_gen_req *r, char *err, size_t err_len) {
    r->think = -1;
    r->think_budget = -1;
    r->reasoning_effort = NULL;
    if (api == SRV_API_OPENAI_CHAT) {
        if (get_str(root, "reasoning_effort", &r->reasoning_effort, err, err_len) < 0) return -1;
        if (r->reasoning_effort && !effort_ok(r->reasoning_effort))
            FAIL("'reasoning_effort' must be \"none\", \"minimal\", \"low\", \"medium\" or \"high\"");
    } else {
        json_t *th = json_object_get(root, "think");
        if (th && !json_is_null(th)) {
            if (json_is_boolean(th)) {
                r->think = json_is_true(th);
            } else if (json_is_string(th) && effort_ok(json_string_value(th)) &&
                       strcmp(json_string_value(th), "none") && strcmp(json_string_value(th), "minimal")) {
                r->think = 1;
                r->reasoning_effort = json_string_value(th);
            } else {
                FAIL("'think' must be a boolean or \"low\", \"medium\" or \"high\"");
            }
        }
    }
    if (r->reasoning_effort) {
        r->think_budget = effort_budget(r->reasoning_effort);
        if (r->think < 0) r->think = r->think_budget != 0;
    }
    if (r->think == 0) r->think_budget = 0;
    int64_t n;
    const int rc = get_int(root, "max_thinking_tokens", 0, 1 << 24, &n, err, err_len);
    if (rc < 0) return -1;
    if (rc) r->think_budget = (int32_t)n;
    return 0;
}

/* A schema (object or boolean) for field `field` -> grammar. */
static int schema_grammar(const json_t *schema, const char *field, qr_grammar **out, char *err, size_t err_len) {
    if (!json_is_object(schema) && !json_is_boolean(schema)) FAIL("'%s' must be a JSON schema object", field);
    char msg[512];
    if (qr_json_schema_compile(schema, out, msg, sizeof msg) != QR_OK) FAIL("'%s': %s", field, msg);
    return 0;
}

static int json_object_mode(qr_grammar **out, char *err, size_t err_len) {
    char msg[256];
    if (qr_json_object_grammar(out, msg, sizeof msg) != QR_OK) FAIL("%s", msg);
    return 0;
}

int srv_parse_grammar(json_t *root, srv_api api, qr_grammar **out, char *err, size_t err_len) {
    *out = NULL;
    const bool openai = api == SRV_API_OPENAI_CHAT || api == SRV_API_OPENAI_COMPLETION;
    json_t *gr = json_object_get(root, "grammar");
    if (gr && (json_is_null(gr) || (json_is_string(gr) && json_string_length(gr) == 0))) gr = NULL; /* "" = none */
    if (gr && !openai && api != SRV_API_NATIVE) gr = NULL; /* Ollama has no such field */
    int modes = gr != NULL;
    if (api == SRV_API_NATIVE) {
        json_t *js = json_object_get(root, "json_schema");
        if (js && !json_is_null(js)) {
            if (gr) FAIL("give either 'grammar' or 'json_schema', not both");
            return schema_grammar(js, "json_schema", out, err, err_len);
        }
    } else if (openai) {
        json_t *rf = json_object_get(root, "response_format");
        if (rf && !json_is_null(rf)) {
            if (!json_is_object(rf)) FAIL("'response_format' must be an object");
            json_t *t = json_object_get(rf, "type");
            if (!json_is_string(t)) FAIL("'response_format.type' must be \"text\", \"json_object\" or \"json_schema\"");
            const char *ts = json_string_value(t);
            if (!strcmp(ts, "json_object") || !strcmp(ts, "json_schema")) {
                if (modes) FAIL("give either 'grammar' or a JSON 'response_format', not both");
                if (!strcmp(ts, "json_object")) return json_object_mode(out, err, err_len);
                json_t *js = json_object_get(rf, "json_schema");
                if (!json_is_object(js)) FAIL("'response_format.json_schema' must be an object {name, schema, strict}");
                json_t *strict = json_object_get(js, "strict");
                if (strict && !json_is_null(strict) && !json_is_boolean(strict))
                    FAIL("'response_format.json_schema.strict' must be a boolean");
                json_t *name = json_object_get(js, "name");
                if (name && !json_is_string(name)) FAIL("'response_format.json_schema.name' must be a string");
                json_t *desc = json_object_get(js, "description");
                if (desc && !json_is_null(desc) && !json_is_string(desc))
                    FAIL("'response_format.json_schema.description' must be a string");
                json_t *schema = json_object_get(js, "schema");
                if (!schema || json_is_null(schema)) return json_object_mode(out, err, err_len);
                return schema_grammar(schema, "response_format.json_schema.schema", out, err, err_len);
            }
            if (strcmp(ts, "text"))
                FAIL("'response_format.type' must be \"text\", \"json_object\" or \"json_schema\" (got '%.32s')", ts);
        }
    } else {
        json_t *fmt = json_object_get(root, "format");
        if (fmt && !json_is_null(fmt)) {
            if (json_is_string(fmt)) {
                if (!strcmp(json_string_value(fmt), "json")) return json_object_mode(out, err, err_len);
                if (json_string_length(fmt) == 0) return 0;
                FAIL("'format' must be \"json\" or a JSON schema object (got '%.32s')", json_string_value(fmt));
            }
            return schema_grammar(fmt, "format", out, err, err_len);
        }
    }
    if (gr) {
        if (!json_is_string(gr)) FAIL("'grammar' must be a string of GBNF rules");
        char msg[512];
        if (qr_grammar_parse(json_string_value(gr), json_string_length(gr), "root", out, msg, sizeof msg) != QR_OK)
            FAIL("'grammar': %s", msg);
    }
    return 0;
}

int srv_gen_req_parse(const char *body, size_t len, srv_api api, int max_depth, srv_gen_req *out, char *err,
                      size_t err_len) {
    memset(out, 0, sizeof *out);
    json_t *root;
    if (srv_json_parse(body, len, max_depth, &root, err, err_len) < 0) return -1;
    int rc = srv_gen_req_from_json(root, api, out, err, err_len);
    json_decref(root);
    return rc;
}
