/* test_template.c — unit tests of the chat-template interpreter (src/template). Expected outputs
 * follow jinja2's semantics under Hugging Face's environment (trim_blocks, lstrip_blocks). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "template/template.h"

/* Renders tmpl with the context variables in ctx_json (a JSON object; "messages" goes to the
 * messages argument, everything else to extra). Returns the output or NULL; err gets the message. */
static char *render_opt(const char *tmpl, const char *ctx_json, qr_chat_options *opt, char *err, size_t err_len) {
    json_error_t je;
    json_t *ctx = json_loads(ctx_json ? ctx_json : "{}", 0, &je);
    assert_non_null(ctx);
    json_t *messages = json_incref(json_object_get(ctx, "messages"));
    json_object_del(ctx, "messages");
    qr_chat_options o = opt ? *opt : (qr_chat_options){0};
    o.extra = ctx;
    if (!o.now) o.now = "2024-07-26";
    char *out = NULL;
    size_t len = 0;
    qr_status st = qr_chat_render_json(tmpl, strlen(tmpl), messages, &o, &out, &len, err, err_len);
    json_decref(messages);
    json_decref(ctx);
    if (st != QR_OK) return NULL;
    assert_int_equal(strlen(out), len);
    return out;
}

static void expect_ctx(const char *tmpl, const char *ctx, const char *want) {
    char err[512] = "";
    char *out = render_opt(tmpl, ctx, NULL, err, sizeof err);
    if (!out) fail_msg("template %s failed: %s", tmpl, err);
    if (strcmp(out, want) != 0) fail_msg("template %s\n  got  [%s]\n  want [%s]", tmpl, out, want);
    free(out);
}

static void expect(const char *tmpl, const char *want) { expect_ctx(tmpl, NULL, want); }

/* Expects the render to fail with an error containing `needle`. */
static void expect_err_ctx(const char *tmpl, const char *ctx, const char *needle) {
    char err[512] = "";
    char *out = render_opt(tmpl, ctx, NULL, err, sizeof err);
    if (out) fail_msg("template %s rendered [%s], expected an error with '%s'", tmpl, out, needle);
    if (!strstr(err, needle)) fail_msg("template %s: error [%s] lacks '%s'", tmpl, err, needle);
}

static void expect_err(const char *tmpl, const char *needle) { expect_err_ctx(tmpl, NULL, needle); }

static void test_text_and_output(void **state) {
    (void)state;
    expect("", "");
    expect("hello", "hello");
    expect("hello\n", "hello");     /* keep_trailing_newline=False drops one newline */
    expect("hello\n\n", "hello\n"); /* ... only one */
    expect("a\r\nb", "a\nb");       /* newlines are normalized */
    expect("{{ 'x' }}{{ 1 }}{{ 1.5 }}{{ none }}{{ true }}", "x11.5NoneTrue");
    expect("{{ undefined_name }}|{{ [1, 'a', none] }}|{{ {'k': 'v'} }}", "|[1, 'a', None]|{'k': 'v'}");
    expect("{{ (1,) }} {{ (1, 2) }} {{ () }}", "(1,) (1, 2) ()");
    expect("{{ \"it's\" }} {{ ['it\\'s'] }}", "it's [\"it's\"]");
}

static void test_whitespace_control(void **state) {
    (void)state;
    /* trim_blocks removes the newline after a block tag; lstrip_blocks the indentation before it */
    expect("{% if true %}\nyes\n{% endif %}\nend", "yes\nend");
    expect("  {% if true %}\n  x\n  {% endif %}\n  y", "  x\n  y");
    expect("a  {%- if true %} b {% endif -%}  c", "a b c");
    expect("a {{- 'b' -}} c", "abc");
    expect("a {%+ if true %}b{% endif %}", "a b");
    expect("{% if true +%}\nx{% endif %}", "\nx");
    expect("x {# comment #} y", "x  y");
    expect("x\n  {# comment #}\ny", "x\ny");
    expect("{% raw %}{{ not evaluated }}{% endraw %}", "{{ not evaluated }}");
    expect("{{ 'a' }}\n{{ 'b' }}", "a\nb"); /* no trimming after }} */
}

static void test_expressions(void **state) {
    (void)state;
    expect("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 4 / 2 }}",
           "7 9 3 -4 2 3.5 2.0");
    expect("{{ 2 ** 3 ** 2 }} {{ 2 ** -1 }} {{ 10 % 3.5 }}", "64 0.5 3.0");
    expect("{{ 'a' ~ 1 ~ none ~ undefined_x }}", "a1None");
    expect("{{ 'ab' * 3 }} {{ [1] * 2 }} {{ [1] + [2] }} {{ 'x' + 'y' }}", "ababab [1, 1] [1, 2] xy");
    expect("{{ 1 < 2 < 3 }} {{ 1 < 2 > 3 }} {{ 'a' in 'cat' }} {{ 2 not in [1, 3] }} {{ 'k' in {'k': 1} }}",
           "True False True True True");
    expect("{{ 1 == 1.0 }} {{ true == 1 }} {{ [1, 2] == [1, 2] }} {{ (1, 2) == [1, 2] }}", "True True True False");
    expect("{{ not 1 == 2 }} {{ 0 or 'x' }} {{ 1 and 'y' }} {{ '' and 'z' }}", "True x y ");
    expect("{{ 'yes' if 1 else 'no' }} {{ 'yes' if 0 else 'no' }}|{{ 'only' if false }}|", "yes no||");
    expect("{{ -3|abs }} {{ -(3) }} {{ +4 }}", "3 -3 4");
    expect("{{ 'a' 'b' }}", "ab");
    expect("{{ 0x1F }} {{ 1_000 }} {{ 1e3 }} {{ 1.5e-3 }} {{ 0o17 }} {{ 0b101 }}", "31 1000 1000.0 0.0015 15 5");
    expect("{{ 1e16 }} {{ 0.1 + 0.2 }} {{ 1/3 }} {{ 0.00001 }} {{ 123456789.0 }}",
           "1e+16 0.30000000000000004 0.3333333333333333 1e-05 123456789.0");
    expect("{{ '\\n'|length }} {{ '\\x41\\u00e9\\t' }}", "1 A\xc3\xa9\t");
}

static void test_access_and_slicing(void **state) {
    (void)state;
    const char *ctx = "{\"m\": {\"role\": \"user\", \"items\": 5, \"list\": [10, 20, 30]}, \"s\": \"h\\u00e9llo\"}";
    expect_ctx("{{ m.role }} {{ m['role'] }} {{ m.list[1] }} {{ m.list[-1] }} {{ m.list.0 }}", ctx, "user user 20 30 10");
    expect_ctx("{{ m['items'] }} {{ m.missing }}|{{ m.list[7] }}|", ctx, "5 ||");
    expect_ctx("{{ m.list[1:] }} {{ m.list[:-1] }} {{ m.list[::-1] }} {{ m.list[::2] }}", ctx,
               "[20, 30] [10, 20] [30, 20, 10] [10, 30]");
    expect_ctx("{{ s[1] }} {{ s[1:3] }} {{ s[::-1] }} {{ s|length }}", ctx, "\xc3\xa9 \xc3\xa9l oll\xc3\xa9h 5");
    expect("{{ none.x }}|{{ none['x'] }}|", "||");
    /* extreme steps and bounds must not overflow (found by the fuzzer) */
    expect("{{ [1, 2, 3][::9223372036854775807] }} {{ 'abc'[::-9223372036854775807] }} {{ [1, 2][-9223372036854775807:] }}",
           "[1] c [1, 2]");
    expect("{{ 'abcdefghijkl'|truncate(9223372036854775807) }}", "abcdefghijkl");
    expect_err("{{ '{a[99999999999999999999999]}'.format(a=[1]) }}", "too many decimal digits");
    expect_err("{{ '%*d' % (-9223372036854775807, 5) }}", "width too big");
    expect_err("{{ missing.x }}", "'missing' is undefined");
    expect_err("{{ missing['x'] }}", "'missing' is undefined");
    expect_err("{{ missing + 1 }}", "'missing' is undefined");
    expect_err("{{ [1].append(2) }}", "unsafe");
}

static void test_loops(void **state) {
    (void)state;
    expect("{% for x in [1, 2, 3] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
           "{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
           "1032TrueFalse3;2121FalseFalse3;3210FalseTrue3;");
    expect("{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }},{% endfor %}", "-2,1-3,2-,");
    expect("{% for x in [] %}x{% else %}empty{% endfor %}", "empty");
    expect("{% for x in [1, 2, 3, 4] if x is even %}{{ x }}{{ loop.length }}{% endfor %}", "2242");
    expect("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }} {% endfor %}", "a=1 b=2 ");
    expect("{% for c in 'ab' %}[{{ c }}]{% endfor %}", "[a][b]");
    expect("{% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %}", "xy");
    expect("{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 4 %}{% break %}{% endif %}"
           "{{ x }}{% endfor %}",
           "0134");
    expect("{% for x in undefined_seq %}x{% endfor %}done", "done");
    expect("{% for r in [[1, 2], [3]] %}{% for c in r %}{{ loop.index }}{% endfor %}|{{ loop.index }} {% endfor %}",
           "12|1 1|2 ");
    expect("{% for x in [1, 2, 3] %}{{ loop.cycle('a', 'b') }}{% endfor %}", "aba");
    /* variables set in a loop body do not leak out */
    expect("{% set y = 'out' %}{% for x in [1] %}{% set y = 'in' %}{{ y }}{% endfor %}{{ y }}", "inout");
    expect_err("{% for a, b in [[1, 2, 3]] %}{% endfor %}", "too many values to unpack");
    expect_err("{% for x in 5 %}{% endfor %}", "'int' object is not iterable");
}

static void test_set_namespace_macro(void **state) {
    (void)state;
    expect("{% set a, b = 1, 2 %}{{ a }}{{ b }}", "12");
    expect("{% set x %}inner {{ 1 + 1 }}{% endset %}[{{ x }}]", "[inner 2]");
    expect("{% set x | upper %}abc{% endset %}{{ x }}", "ABC");
    expect("{% set ns = namespace(n=0, found=false) %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i %}"
           "{% endfor %}{{ ns.n }} {{ ns.found }} {{ ns }}",
           "6 False <Namespace {'n': 6, 'found': False}>");
    expect("{% if true %}{% set leak = 1 %}{% endif %}{{ leak }}", "1");
    expect("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('a') }} {{ greet('b', '?') }}"
           " {{ greet(punct='.', name='c') }}",
           "Hi a! Hi b? Hi c.");
    expect("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}", "321");
    expect("{% macro v() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ v(1, 2, k=3) }}", "(1, 2){'k': 3}");
    expect("{% set g = 1 %}{% macro m() %}{{ g }}{% endmacro %}{% set g = 2 %}{{ m() }}", "2");
    expect("{% macro m() %}[{{ caller() }}]{% endmacro %}{% call m() %}body{% endcall %}", "[body]");
    expect("{% filter upper %}shout{% endfilter %}", "SHOUT");
    expect("{% with a = 5 %}{{ a }}{% endwith %}|{{ a }}|", "5||");
    expect_err("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", "takes not more than 1 argument");
    expect_err("{% set x = 1 %}{% set x.y = 2 %}", "non-namespace");
}

static void test_filters(void **state) {
    (void)state;
    expect("{{ '  hi  '|trim }}|{{ 'xxhixx'|trim('x') }}|{{ 'Hello World'|upper }}|{{ 'Hello'|lower }}",
           "hi|hi|HELLO WORLD|hello");
    expect("{{ 'hello wORLD-foo(bar'|title }}|{{ 'hELLO'|capitalize }}", "Hello World-Foo(Bar|Hello");
    expect("{{ [1, 2, 3]|length }} {{ 'abc'|count }} {{ {'a': 1}|length }} {{ undefined_x|length }}", "3 3 1 0");
    expect("{{ [1, 2, 3]|join(', ') }}|{{ [{'n': 'a'}, {'n': 'b'}]|join('-', attribute='n') }}", "1, 2, 3|a-b");
    expect("{{ [3, 1, 2]|first }}{{ [3, 1, 2]|last }}{{ 'xyz'|first }}", "32x");
    expect("{{ x|default('d') }} {{ none|default('d') }} {{ ''|default('d', true) }}", "d None d");
    expect("{{ 'a-b-c'|replace('-', '+') }} {{ 'aaa'|replace('a', 'b', 2) }}", "a+b+c bba");
    expect("{{ '42'|int }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ '0x1f'|int(base=16) }}",
           "42 4 0 7 3 31");
    expect("{{ '1.5'|float }} {{ 'nope'|float }} {{ 2|float }}", "1.5 0.0 2.0");
    expect("{{ 'inf'|float }} {{ '-inf'|float }} {{ ' +Infinity '|float }} {{ 'nan'|float }}", "inf -inf inf nan");
    expect("{{ 42|string }}{{ [1]|string }}", "42[1]");
    expect("{{ [3, 1, 2]|sort }} {{ [3, 1, 2]|sort(reverse=true) }} {{ ['b', 'A', 'c']|sort }}",
           "[1, 2, 3] [3, 2, 1] ['A', 'b', 'c']");
    expect("{{ [{'a': 2}, {'a': 1}]|sort(attribute='a')|map(attribute='a')|list }}", "[1, 2]");
    expect("{{ {'b': 1, 'a': 2}|dictsort }} {{ {'b': 1, 'a': 2}|items|list }}",
           "[('a', 2), ('b', 1)] [('b', 1), ('a', 2)]");
    expect("{{ [1, 2, 2, 'A', 'a']|unique|list }} {{ [1, 5, 3]|max }} {{ [4, 2, 8]|min }} {{ [1, 2, 3]|sum }}",
           "[1, 2, 'A'] 5 2 6");
    expect("{{ ['a', 'b']|map('upper')|join }} {{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3]|reject('odd')|list }}",
           "AB [1, 3] [2]");
    const char *msgs = "{\"ms\": [{\"role\": \"user\", \"c\": 1}, {\"role\": \"assistant\", \"c\": 2}, {\"role\": \"user\", \"c\": 3}]}";
    expect_ctx("{{ ms|selectattr('role', 'equalto', 'user')|map(attribute='c')|list }} "
               "{{ ms|rejectattr('role', 'eq', 'user')|map(attribute='c')|list }}",
               msgs, "[1, 3] [2]");
    expect("{{ [1, 2, 3]|reverse|list }} {{ 'abc'|reverse }}", "[3, 2, 1] cba");
    expect("{{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 2.1|round(0, 'ceil') }} {{ 7|round }}",
           "2.0 4.0 2.67 3.0 7");
    expect("{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}", "a\n  b\n\n  c|  a\n  b");
    expect("{{ 'one two  three'|wordcount }} {{ 'x'|center(5) }}|", "3   x  |");
    expect("{{ '%s-%d'|format('a', 3) }} {{ '%05.1f' % 3.14159 }} {{ '%(k)s' % {'k': 'v'} }}", "a-3 003.1 v");
    expect("{{ '<b>'|e }} {{ ('<i>'|safe) + '<u>' }}", "&lt;b&gt; <i>&lt;u&gt;");
    expect("{{ [1, 2, 3, 4, 5]|batch(2)|list }}", "[[1, 2], [3, 4], [5]]");
    expect("{{ 'abcdefghijklmnop'|truncate(9) }} {{ 'abcdefghijklmn'|truncate(9) }}", "abcdef... abcdefghijklmn");
    expect("{{ 'hello world, long text here'|truncate(15) }}", "hello...");
    expect_err("{{ 'x'|nosuchfilter }}", "unknown filter 'nosuchfilter'");
    expect_err("{{ 'x'|urlize }}", "'urlize' filter is not supported");
    expect("{% if false %}{{ x|nosuchfilter }}{% endif %}ok", "ok"); /* jinja2 fails only when executed */
}

static void test_tojson(void **state) {
    (void)state;
    expect("{{ {'a': [1, 2.5, none, true], 'b': 'x\"y\\n\u00e9'}|tojson }}",
           "{\"a\": [1, 2.5, null, true], \"b\": \"x\\\"y\\n\xc3\xa9\"}");
    expect("{{ {'a': [1, {}], 'b': []}|tojson(indent=2) }}", "{\n  \"a\": [\n    1,\n    {}\n  ],\n  \"b\": []\n}");
    expect("{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }} {{ 'caf\u00e9'|tojson(ensure_ascii=true) }}",
           "{\"a\": 2, \"b\": 1} \"caf\\u00e9\"");
    expect("{{ [1, 2]|tojson(separators=(',', ':')) }}", "[1,2]");
    expect_err("{{ undefined_x|tojson }}", "not JSON serializable");
}

static void test_tests(void **state) {
    (void)state;
    expect("{{ x is defined }} {{ x is undefined }} {{ none is none }} {{ 'a' is string }} {{ 1 is number }}"
           " {{ true is number }} {{ 1 is integer }} {{ 1.0 is float }} {{ true is boolean }}",
           "False True True True True True True True True");
    expect("{{ {} is mapping }} {{ [] is iterable }} {{ 'a' is iterable }} {{ 1 is iterable }} {{ x is iterable }}"
           " {{ {} is sequence }}",
           "True True True False True True");
    expect("{{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 1 is equalto 1 }} {{ 'a' is in 'abc' }}"
           " {{ 2 is gt 1 }} {{ 'abc' is lower }} {{ 'ABC' is upper }} {{ none is sameas none }}",
           "True True True True True True True True True");
    expect("{{ 1 is not none }} {{ x is not defined }}", "True True");
    expect_err("{{ 1 is nosuchtest }}", "unknown test 'nosuchtest'");
}

static void test_string_methods(void **state) {
    (void)state;
    expect("{{ '  a b  '.strip() }}|{{ 'xxaxx'.lstrip('x') }}|{{ 'xxaxx'.rstrip('x') }}", "a b|axx|xxa");
    expect("{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a b c'.rsplit(' ', 1) }}",
           "['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b c'] ['a b', 'c']");
    expect("{{ 'abc'.startswith('ab') }} {{ 'abc'.endswith(('x', 'c')) }} {{ 'abc'.upper() }} {{ 'ABC'.lower() }}",
           "True True ABC abc");
    expect("{{ 'hello world'.title() }} {{ 'they\\'re 1st'.title() }} {{ 'a-b'.replace('-', '') }}",
           "Hello World They'Re 1St ab");
    expect("{{ 'abcabc'.find('c') }} {{ 'abcabc'.rfind('c') }} {{ 'abc'.find('z') }} {{ 'aaa'.count('a') }}", "2 5 -1 3");
    expect("{{ '-'.join(['a', 'b']) }} {{ '{} and {}'.format('x', 'y') }} {{ '{name}!'.format(name='n') }}",
           "a-b x and y n!");
    expect("{{ 'a</think>b'.split('</think>')[-1] }} {{ 'key: val'.partition(': ') }}", "b ('key', ': ', 'val')");
    expect("{{ {'a': 1}.get('a') }} {{ {'a': 1}.get('b') }} {{ {'a': 1}.get('b', 2) }} {{ {'a': 1}.keys()|list }}"
           " {{ {'a': 1}.values()|list }}",
           "1 None 2 ['a'] [1]");
}

static void test_globals(void **state) {
    (void)state;
    expect("{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(3, 0, -1)|list }}", "[0, 1, 2] [1, 3, 5] [3, 2, 1]");
    expect("{{ dict(a=1, b='x') }}", "{'a': 1, 'b': 'x'}");
    expect("{{ strftime_now('%Y-%m-%d %B %d, %Y') }}", "2024-07-26 July 26, 2024");
    expect_err("{{ raise_exception('bad roles') }}", "raise_exception: bad roles");
    expect_err("{{ range(1000000)|length }}", "Range too big");
}

static void test_errors_and_limits(void **state) {
    (void)state;
    expect_err("{% for x in y %}no end", "'for' block opened on line 1 is not closed");
    expect_err("{% if x %}\n{% endfor %}", "template line 2");
    expect_err("{% frobnicate %}", "unknown tag 'frobnicate'");
    expect_err("{{ 1 + }}", "template line 1");
    expect_err("{{ 'unterminated }}", "unterminated string");
    expect_err("{# no end", "missing end of comment");
    expect_err("{% break %}", "outside of a for loop");
    expect_err("{{ 1 / 0 }}", "division by zero");
    expect_err("{{ 'a' + 1 }}", "can only concatenate str");
    expect_err("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "maximum recursion depth");

    /* deep nesting is refused at parse time instead of overflowing the stack */
    char deep[4000];
    size_t k = 0;
    k += (size_t)sprintf(deep + k, "{{ ");
    for (int i = 0; i < 1000; i++) deep[k++] = '(';
    deep[k++] = '1';
    for (int i = 0; i < 1000; i++) deep[k++] = ')';
    strcpy(deep + k, " }}");
    expect_err(deep, "nested too deeply");

    /* output size is capped */
    char err[256] = "";
    qr_chat_options opt = {.max_output = 1000};
    char *out = render_opt("{% for i in range(100) %}{{ 'x' * 50 }}{% endfor %}", NULL, &opt, err, sizeof err);
    assert_null(out);
    assert_non_null(strstr(err, "output exceeds the limit of 1000 bytes"));
    /* the step budget stops runaway loops */
    qr_chat_options opt2 = {.max_steps = 10000};
    out = render_opt("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", NULL, &opt2,
                     err, sizeof err);
    assert_null(out);
    assert_non_null(strstr(err, "step limit"));
    /* memory is capped */
    qr_chat_options opt3 = {.max_memory = 4u << 20};
    out = render_opt("{{ 'x' * 100000000 }}", NULL, &opt3, err, sizeof err);
    assert_null(out);
    assert_non_null(strstr(err, "memory limit"));
}

static void test_chat_messages(void **state) {
    (void)state;
    const char *chatml = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
                         "'<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
    qr_chat_message msgs[] = {
        {.role = "system", .content = "Be brief."},
        {.role = "user", .content = "Hi \xc3\xa9"},
        {.role = "assistant", .content = NULL, .extra_json = "{\"tool_calls\": [{\"name\": \"f\"}]}"},
    };
    qr_chat_options opt = {.add_generation_prompt = true};
    char *out = NULL, err[256];
    size_t len = 0;
    assert_int_equal(qr_chat_render(chatml, strlen(chatml), msgs, 2, &opt, &out, &len, err, sizeof err), QR_OK);
    assert_string_equal(out, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi \xc3\xa9<|im_end|>\n"
                             "<|im_start|>assistant\n");
    free(out);
    const char *tc = "{% for m in messages %}{{ m.role }}:{{ m.content }}:{{ m.tool_calls[0].name if m.tool_calls }};{% endfor %}";
    assert_int_equal(qr_chat_render(tc, strlen(tc), msgs, 3, NULL, &out, &len, err, sizeof err), QR_OK);
    assert_string_equal(out, "system:Be brief.:;user:Hi \xc3\xa9:;assistant:None:f;");
    free(out);
    /* one parsed template renders many times */
    qr_chat_template *t = NULL;
    assert_int_equal(qr_chat_template_parse(chatml, strlen(chatml), &t, err, sizeof err), QR_OK);
    json_t *arr = json_loads("[{\"role\": \"user\", \"content\": \"x\"}]", 0, NULL);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(qr_chat_template_render(t, arr, NULL, &out, &len, err, sizeof err), QR_OK);
        assert_string_equal(out, "<|im_start|>user\nx<|im_end|>\n");
        free(out);
    }
    json_decref(arr);
    qr_chat_template_free(t);
    /* bos/eos and tools are visible to the template */
    const char *tt = "{{ bos_token }}{{ tools|length if tools is not none else 'none' }}{{ eos_token }}";
    json_t *tools = json_loads("[{\"type\": \"function\"}]", 0, NULL);
    qr_chat_options o2 = {.bos_token = "<s>", .eos_token = "</s>", .tools = tools};
    assert_int_equal(qr_chat_render(tt, strlen(tt), NULL, 0, &o2, &out, &len, err, sizeof err), QR_OK);
    assert_string_equal(out, "<s>1</s>");
    free(out);
    o2.tools = NULL;
    assert_int_equal(qr_chat_render(tt, strlen(tt), NULL, 0, &o2, &out, &len, err, sizeof err), QR_OK);
    assert_string_equal(out, "<s>none</s>");
    free(out);
    json_decref(tools);
}

/* Renders the real template files of tests/data/templates that take no tools. */
static void test_template_files(void **state) {
    (void)state;
    const char *dir = getenv("QR_TEST_DATA_DIR") ? getenv("QR_TEST_DATA_DIR") : QR_TEST_DATA_DIR;
    char path[1024];
    snprintf(path, sizeof path, "%s/templates/gemma3.jinja", dir);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char src[1 << 16];
    size_t n = fread(src, 1, sizeof src - 1, f);
    fclose(f);
    src[n] = 0;
    json_t *msgs = json_loads("[{\"role\": \"system\", \"content\": \"Sys\"}, {\"role\": \"user\", \"content\": \" Hi \"}]",
                              0, NULL);
    qr_chat_options opt = {.add_generation_prompt = true, .bos_token = "<bos>"};
    char *out = NULL, err[256];
    size_t len;
    assert_int_equal(qr_chat_render_json(src, n, msgs, &opt, &out, &len, err, sizeof err), QR_OK);
    assert_string_equal(out, "<bos><start_of_turn>user\nSys\n\nHi<end_of_turn>\n<start_of_turn>model\n");
    free(out);
    json_decref(msgs);
    msgs = json_loads("[{\"role\": \"assistant\", \"content\": \"x\"}]", 0, NULL);
    assert_int_not_equal(qr_chat_render_json(src, n, msgs, &opt, &out, &len, err, sizeof err), QR_OK);
    assert_non_null(strstr(err, "Conversation roles must alternate"));
    json_decref(msgs);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_and_output),   cmocka_unit_test(test_whitespace_control),
        cmocka_unit_test(test_expressions),       cmocka_unit_test(test_access_and_slicing),
        cmocka_unit_test(test_loops),             cmocka_unit_test(test_set_namespace_macro),
        cmocka_unit_test(test_filters),           cmocka_unit_test(test_tojson),
        cmocka_unit_test(test_tests),             cmocka_unit_test(test_string_methods),
        cmocka_unit_test(test_globals),           cmocka_unit_test(test_errors_and_limits),
        cmocka_unit_test(test_chat_messages),     cmocka_unit_test(test_template_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
