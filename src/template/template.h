/* template.h — chat templates: renders a model's `tokenizer.chat_template` (a Jinja template)
 * byte for byte the way Hugging Face transformers' apply_chat_template does with Python jinja2.
 *
 * The interpreter implements the Jinja subset that real chat templates use, with jinja2's
 * semantics under HF's environment: ImmutableSandboxedEnvironment(trim_blocks=True,
 * lstrip_blocks=True) with the loopcontrols extension ({% break %} / {% continue %}), the
 * {% generation %} tag, HF's tojson filter (json.dumps with ensure_ascii=False) and the
 * raise_exception() / strftime_now() globals. Undefined values follow jinja2's default Undefined.
 *
 * A template that uses something we do not implement, or that raises, fails with a message such as
 *   "template line 12: unknown filter 'foo'"
 *   "template line 5: raise_exception: Conversation roles must alternate user/assistant/..."
 * never with a crash or a silently different prompt. Recursion depth, evaluation steps, memory
 * and output size are bounded, so hostile templates fail cleanly.
 *
 * Render context (as transformers passes it): messages, tools (None when not given), documents
 * (None), add_generation_prompt, bos_token, eos_token, plus any extra variables. */
#ifndef QR_TEMPLATE_H
#define QR_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "quarrel.h"

#define QR_CHAT_DEFAULT_MAX_OUTPUT (8u << 20)   /* bytes of rendered text */
#define QR_CHAT_DEFAULT_MAX_MEMORY (256u << 20) /* bytes of interpreter memory per render */
#define QR_CHAT_DEFAULT_MAX_STEPS 20000000u     /* evaluation steps per render */
#define QR_CHAT_DEFAULT_MAX_DEPTH 128           /* nested macro calls / recursive loops */

/* qr_chat_message (one message for qr_chat_render) is public: declared in quarrel.h. */

/* Render options. Zero-initialize, then set what you need. */
typedef struct qr_chat_options {
    bool add_generation_prompt; /* end with the header of an assistant turn */
    const char *bos_token;      /* NULL leaves `bos_token` undefined */
    const char *eos_token;      /* NULL leaves `eos_token` undefined */
    const json_t *tools;        /* JSON array of tool schemas, or NULL (tools = None) */
    const json_t *documents;    /* JSON array of documents, or NULL (documents = None) */
    const json_t *extra;        /* JSON object of more context variables (e.g. enable_thinking),
                                   or NULL; its keys override bos_token/eos_token */
    const char *now;            /* clock of strftime_now(): "YYYY-MM-DD" or "YYYY-MM-DD HH:MM:SS";
                                   NULL uses the current local time */
    size_t max_output;          /* bytes; 0 = QR_CHAT_DEFAULT_MAX_OUTPUT */
    size_t max_memory;          /* bytes; 0 = QR_CHAT_DEFAULT_MAX_MEMORY */
    uint64_t max_steps;         /* 0 = QR_CHAT_DEFAULT_MAX_STEPS */
    int max_depth;              /* 0 = QR_CHAT_DEFAULT_MAX_DEPTH */
} qr_chat_options;

/* A parsed template; immutable after parsing, so one may be rendered from several threads. */
typedef struct qr_chat_template qr_chat_template;

/* Parses src[0..len) (need not be NUL-terminated). Syntax errors fail here with the line.
 * On success *out owns the template; free it with qr_chat_template_free. */
qr_status qr_chat_template_parse(const char *src, size_t len, qr_chat_template **out, char *err, size_t err_len);
void qr_chat_template_free(qr_chat_template *t);

/* Renders t with `messages` (a JSON array of message objects; every field a template reads is
 * available). On success *out is a malloc'd NUL-terminated string of *out_len bytes (no
 * trailing newline is added); free it with free(). opt may be NULL (all defaults). */
qr_status qr_chat_template_render(const qr_chat_template *t, const json_t *messages, const qr_chat_options *opt,
                                  char **out, size_t *out_len, char *err, size_t err_len);

/* Parse + render in one call. */
qr_status qr_chat_render_json(const char *src, size_t len, const json_t *messages, const qr_chat_options *opt,
                              char **out, size_t *out_len, char *err, size_t err_len);

/* Parse + render with messages given as structs. */
qr_status qr_chat_render(const char *src, size_t len, const qr_chat_message *msgs, size_t n,
                         const qr_chat_options *opt, char **out, size_t *out_len, char *err, size_t err_len);

/* Built-in chat templates for models whose GGUF has none (builtin.c): the source of the one called `name`
 * ("gemma", "chatml"), or NULL. */
const char *qr_chat_template_builtin(const char *name);
/* The built-in template a vocabulary fits (has_token(ctx, marker) true for the family's turn marker), in order
 * gemma, chatml; *name (may be NULL) gets its name. NULL when none fits. */
const char *qr_chat_template_builtin_for(bool (*has_token)(const void *ctx, const char *text), const void *ctx,
                                         const char **name);

#endif /* QR_TEMPLATE_H */
