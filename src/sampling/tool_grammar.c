/* tool_grammar.c — the grammar that forces tool calls in a model family's syntax, and the system
 * prompt that teaches the generic JSON syntax to models whose template knows no tools (chat_parse.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sampling/chat_parse.h"
#include "util/util.h"

#define MAX_PARALLEL 8 /* calls one forced reply may hold */

typedef struct gbuf {
    char *p;
    size_t len, cap;
    bool oom;
} gbuf;

static void gb_printf(gbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    va_list ap;
    va_start(ap, fmt);
    va_list ap2;
    va_copy(ap2, ap);
    const int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || b->len + (size_t)n + 1 > b->cap) {
        const size_t nc = (b->cap ? b->cap * 2 : 1024) + (size_t)(n < 0 ? 0 : n);
        char *np = n < 0 ? NULL : realloc(b->p, nc);
        if (!np) {
            b->oom = true;
            va_end(ap2);
            return;
        }
        b->p = np;
        b->cap = nc;
    }
    vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap2);
    va_end(ap2);
    b->len += (size_t)n;
}

/* s as the inside of a GBNF string literal (quotes and backslashes escaped). */
static void gb_lit(gbuf *b, const char *s) {
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') gb_printf(b, "\\%c", *s);
        else if (*s == '\n') gb_printf(b, "\\n");
        else gb_printf(b, "%c", *s);
    }
}

/* The function object of tool t ({"type": "function", "function": {...}}) or NULL. */
static const json_t *tool_function(const json_t *t) {
    const json_t *fn = json_object_get(t, "function");
    return json_is_object(fn) ? fn : NULL;
}

/* GBNF of fn's arguments under start rule `rule` (appended to b). Unsupported keywords: any object. */
static qr_status args_rules(gbuf *b, const json_t *fn, const char *rule, char *err, size_t err_len) {
    const char *name = json_string_value(json_object_get(fn, "name"));
    const json_t *params = json_object_get(fn, "parameters");
    json_t *any = json_pack("{s:s}", "type", "object");
    if (!any) return qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory");
    if (!params || json_is_null(params)) params = any;
    char *text = NULL, msg[512];
    qr_status st = qr_json_schema_to_gbnf(params, rule, &text, msg, sizeof msg);
    if (st == QR_ERR_UNSUPPORTED) st = qr_json_schema_to_gbnf(any, rule, &text, msg, sizeof msg);
    json_decref(any);
    if (st != QR_OK)
        return qr_errf(err, err_len, st, "tool '%s': parameters: %s", name ? name : "?", msg);
    gb_printf(b, "%s", text);
    free(text);
    return QR_OK;
}

qr_status qr_tool_call_grammar(qr_tool_format f, const json_t *tools, const char *only, bool parallel,
                               qr_grammar **out, char *err, size_t err_len) {
    *out = NULL;
    if (!json_is_array(tools) || json_array_size(tools) == 0)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "tool grammar: no tools");
    gbuf b = {0};
    qr_status st = QR_OK;
    const char *key = f == QR_TOOL_FORMAT_LLAMA3 ? "parameters" : "arguments";
    gbuf alts = {0};
    int32_t n = 0;
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        const json_t *fn = tool_function(t);
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (!name || (only && strcmp(only, name))) continue;
        char rule[32];
        snprintf(rule, sizeof rule, "tc%zu-args", i);
        if ((st = args_rules(&b, fn, rule, err, err_len)) != QR_OK) goto done;
        gb_printf(&b, "tc%zu ::= \"", i);
        if (f == QR_TOOL_FORMAT_HARMONY) {
            gb_printf(&b, "<|channel|>commentary to=functions.");
            gb_lit(&b, name);
            gb_printf(&b, " <|constrain|>json<|message|>\" %s\n", rule);
        } else {
            gb_printf(&b, "{\\\"name\\\": \\\"");
            gb_lit(&b, name);
            gb_printf(&b, "\\\", \\\"%s\\\": \" %s \"}\"\n", key, rule);
        }
        gb_printf(&alts, "%s tc%zu", n ? " |" : "", i);
        n++;
    }
    if (n == 0) {
        st = qr_errf(err, err_len, QR_ERR_INVALID_ARG, "tool grammar: no tool named '%s'", only ? only : "");
        goto done;
    }
    gb_printf(&b, "tc-call ::=%s\n", alts.p);
    char more[64];
    snprintf(more, sizeof more, "{0,%d}", parallel ? MAX_PARALLEL - 1 : 0);
    switch (f) {
    case QR_TOOL_FORMAT_HERMES:
        gb_printf(&b, "root ::= \"<tool_call>\\n\" tc-call \"\\n</tool_call>\" (\"\\n<tool_call>\\n\" tc-call "
                      "\"\\n</tool_call>\")%s\n", more);
        break;
    case QR_TOOL_FORMAT_MISTRAL: gb_printf(&b, "root ::= \"[TOOL_CALLS][\" tc-call (\", \" tc-call)%s \"]\"\n", more); break;
    case QR_TOOL_FORMAT_GRANITE: gb_printf(&b, "root ::= \"<|tool_call|>[\" tc-call (\", \" tc-call)%s \"]\"\n", more); break;
    case QR_TOOL_FORMAT_LLAMA3:
    case QR_TOOL_FORMAT_HARMONY: gb_printf(&b, "root ::= tc-call\n"); break;
    default:
        if (parallel) gb_printf(&b, "root ::= tc-call | \"[\" tc-call (\", \" tc-call)%s \"]\"\n", more);
        else gb_printf(&b, "root ::= tc-call\n");
        break;
    }
    if (b.oom || alts.oom) {
        st = qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory");
        goto done;
    }
    char gerr[512];
    st = qr_grammar_parse(b.p, b.len, "root", out, gerr, sizeof gerr);
    if (st != QR_OK) qr_errf(err, err_len, st, "tool grammar: %s", gerr);
done:
    free(b.p);
    free(alts.p);
    return st;
}

char *qr_tool_system_prompt(const json_t *tools, bool required) {
    gbuf b = {0};
    gb_printf(&b, "You can call these functions:\n");
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        const json_t *fn = tool_function(t);
        if (!fn) continue;
        json_t *shown = json_object(); /* what the model needs: name, description, parameters */
        static const char *const keys[] = {"name", "description", "parameters"};
        for (int k = 0; k < 3; k++) {
            json_t *v = json_object_get(fn, keys[k]);
            if (v && !json_is_null(v)) json_object_set(shown, keys[k], v);
        }
        char *js = json_dumps(shown, JSON_COMPACT);
        json_decref(shown);
        if (!js) {
            free(b.p);
            return NULL;
        }
        gb_printf(&b, "%s\n", js);
        free(js);
    }
    gb_printf(&b, "To call a function, reply with only a JSON object of the form "
                  "{\"name\": \"<function name>\", \"arguments\": {<its parameters>}}");
    if (required) gb_printf(&b, ". You must call a function.");
    else gb_printf(&b, ". Otherwise, answer in plain text.");
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}
