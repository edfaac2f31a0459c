/* tok_pretok.c — BPE pre-tokenizers: `tokenizer.ggml.pre` -> split regexes, run with PCRE2 (JIT).
 *
 * The regexes are the ones of each model's tokenizer.json, as llama.cpp lists them. To get the ids
 * llama.cpp gets, we split exactly the way its unicode_regex_split() does:
 *  - Invalid UTF-8 decodes to U+FFFD, one byte at a time.
 *  - A regex that uses a Unicode category (\p{L}, \p{N}, \p{P}, \p{M}, \p{S}, \p{Lu}...) runs on a
 *    "collapsed" text with one byte per code point: ASCII stays, a non-ASCII code point becomes a
 *    byte naming its category (letter, number, punctuation, mark, symbol; 0x0B for whitespace; 0xD0
 *    otherwise), and \p{X} becomes a class of that byte plus the ASCII members. So \p{Lu} and \p{Ll}
 *    both mean "letter" outside ASCII, and \s is ASCII whitespace plus 0x0B. (llama.cpp's hand-written
 *    splitters for gpt2/llama3/qwen2 agree with this on every input.) A naive PCRE2 UTF+UCP run
 *    would differ: other tables, case classes, and \s+(?!\S) at fragment ends.
 *  - A regex without categories runs in UTF mode on the text with non-ASCII whitespace -> 0x0B.
 *  - Regex i runs separately on each piece left by regex i-1 (matches and the gaps between them).
 * Categories come from utf8proc (tok_unicode.c).
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"
#include "util/util.h"

/* ---- the regexes ---------------------------------------------------------------------------- */

#define RE_CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RE_LLAMA3                                                                                      \
    RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|" \
                    "\\s+(?!\\S)|\\s+"
#define RE_QWEN2                                                                                       \
    RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"      \
                    "\\s+(?!\\S)|\\s+"
#define RE_QWEN35                                                                                      \
    RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|"    \
                    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_UPPER "((?=[\\p{L}])([^a-z]))"
#define RE_LOWER "((?=[\\p{L}])([^A-Z]))"
#define RE_GPT4O                                                                                       \
    "[^\\r\\n\\p{L}\\p{N}]?" RE_UPPER "*" RE_LOWER "+" RE_CONTRACTIONS "?|[^\\r\\n\\p{L}\\p{N}]?" RE_UPPER   \
    "+" RE_LOWER "*" RE_CONTRACTIONS "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|"          \
    "\\s+(?!\\S)|\\s+"
#define RE_TEKKEN                                                                                      \
    "[^\\r\\n\\p{L}\\p{N}]?" RE_UPPER "*" RE_LOWER "+|[^\\r\\n\\p{L}\\p{N}]?" RE_UPPER "+" RE_LOWER        \
    "*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_SEED_CODER                                                                                  \
    RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|"     \
                    "\\s+(?!\\S)|\\s+"
#define RE_BAILING                                                                                     \
    "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"   \
    "[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"
#define RE_UFAKZEKA                                                                                    \
    "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_BLOOM " ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+"
#define RE_CJK_HAN_KANA "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
#define RE_DSV3_MAIN                                                                                   \
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?"       \
    "[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"
#define RE_SPARK_MAIN                                                                                  \
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?"       \
    "[\\p{P}\\p{S}]+|[\r\n]|\\s+(?!\\S)|\\s+"
#define RE_CJK_HANGUL "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
#define RE_DEEPSEEK_LETTERS                                                                            \
    "\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af"            \
    "\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5"          \
    "\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba"              \
    "\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45"              \
    "\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe"                \
    "\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc"              \
    "\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139"           \
    "\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3"          \
    "\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06"              \
    "\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3"                        \
    "\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df"                     \
    "\U0001e900-\U0001e943]+"
#define RE_DEEPSEEK_PUNCT "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+"

/* One pre-tokenizer: the names that select it, its regexes and how it changes the defaults. */
typedef struct pretok_def {
    const char *names[10];
    const char *regex[QR_TOK_MAX_REGEX];
    qr_tok_pre_flags flags; /* ignore_merges, clean_spaces, add_bos, bos_null, add_sep */
} pretok_def;

/* clean_spaces defaults to true for BPE; the entries that keep it say so. */
static const pretok_def k_pretoks[] = {
    {{"default"}, {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}, {false, true, false, false, false}},
    {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano"},
     {RE_LLAMA3}, {true, true, true, false, false}},
    {{"dbrx", "smaug-bpe"}, {RE_LLAMA3}, {false, true, false, false, false}},
    {{"chatglm-bpe"}, {RE_LLAMA3}, {false, true, false, true, false}},
    {{"glm4", "glm5"}, {RE_LLAMA3}, {true, true, false, true, false}},
    {{"deepseek-llm"}, {"[\r\n]", RE_DEEPSEEK_LETTERS, RE_DEEPSEEK_PUNCT, "\\s+$", RE_CJK_HANGUL, "\\p{N}+"},
     {false, false, false, false, false}},
    {{"deepseek-coder"}, {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", RE_CJK_HANGUL, "\\p{N}"}, {false, false, false, false, false}},
    {{"deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"}, {"\\p{N}{1,3}", RE_CJK_HAN_KANA, RE_DSV3_MAIN},
     {false, false, false, false, false}},
    {{"spark2_5"}, {"\\p{N}{1,3}", RE_CJK_HAN_KANA, RE_SPARK_MAIN, "\\p{N}"}, {false, false, false, false, false}},
    {{"falcon"}, {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]"}, {false, true, false, false, false}},
    {{"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum",
      "modern-bert"},
     {RE_GPT2}, {false, true, false, false, false}},
    {{"mpt", "olmo", "jais", "exaone4"}, {RE_GPT2}, {false, true, false, false, false}},
    {{"trillion", "granite-docling"}, {RE_GPT2}, {false, false, false, false, false}},
    {{"jina-v1-en", "jina-v2-code", "roberta-bpe"}, {RE_GPT2}, {false, true, false, false, true}},
    {{"starcoder", "refact", "codeshell", "exaone", "minerva-7b", "mellum2"}, {"\\p{N}", RE_GPT2},
     {false, true, false, false, false}},
    {{"smollm", "command-r"}, {"\\p{N}", RE_GPT2}, {false, false, false, false, false}},
    {{"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "hunyuan", "solar-open", "grok-2"}, {RE_QWEN2},
     {false, false, false, false, false}},
    {{"stablelm2", "megrez"}, {RE_QWEN2}, {false, true, false, false, false}},
    {{"qwen35"}, {RE_QWEN35}, {false, false, false, false, false}},
    {{"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"}, {RE_GPT4O}, {false, false, false, false, false}},
    {{"tekken"}, {RE_TEKKEN}, {true, false, true, false, false}},
    {{"poro-chat"}, {RE_BLOOM}, {false, false, false, false, false}},
    {{"bloom", "gpt3-finnish"}, {RE_BLOOM}, {false, true, false, false, false}},
    {{"viking"}, {RE_BLOOM, "\\p{N}"}, {false, false, false, false, false}},
    {{"seed-coder"}, {RE_SEED_CODER}, {false, false, false, false, false}},
    {{"bailingmoe", "bailingmoe2", "llada-moe"}, {RE_BAILING}, {false, false, false, false, false}},
    {{"ufakzeka"}, {RE_UFAKZEKA}, {false, false, false, false, false}},
    {{"chameleon"},
     {"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )", "\\p{N}",
      "[\\p{P}!-/:-@\\[-`{-~]", RE_GPT2},
     {false, false, true, false, false}},
};

/* ---- collapsing --------------------------------------------------------------------------- */

enum { COLLAPSE_NUMBER = 0xD1, COLLAPSE_LETTER = 0xD2, COLLAPSE_PUNCT = 0xD3, COLLAPSE_MARK = 0xD4,
       COLLAPSE_SYMBOL = 0xD5, COLLAPSE_OTHER = 0xD0, COLLAPSE_SPACE = 0x0B };

typedef struct ucat {
    const char *name; /* "\p{..}" */
    unsigned char marker;
    const char *ascii; /* class members below 128 */
} ucat;

static const ucat k_ucats[] = {
    {"\\p{N}", COLLAPSE_NUMBER, "0-9"},
    {"\\p{L}", COLLAPSE_LETTER, "A-Za-z"},
    {"\\p{P}", COLLAPSE_PUNCT, "!-#%-*,-/:-;?-@\\[-\\]_\\{\\}"},
    {"\\p{M}", COLLAPSE_MARK, ""},
    {"\\p{S}", COLLAPSE_SYMBOL, "\\$\\+<->^`\\|\\~"},
    {"\\p{Lu}", COLLAPSE_LETTER, "A-Za-z"},
    {"\\p{Ll}", COLLAPSE_LETTER, "A-Za-z"},
    {"\\p{Lt}", COLLAPSE_LETTER, "A-Za-z"},
    {"\\p{Lm}", COLLAPSE_LETTER, "A-Za-z"},
    {"\\p{Lo}", COLLAPSE_LETTER, "A-Za-z"},
};

static bool uses_categories(const char *re) {
    for (size_t i = 0; i < sizeof k_ucats / sizeof k_ucats[0]; i++)
        if (strstr(re, k_ucats[i].name)) return true;
    return false;
}

/* Rewrites re for the collapsed text: \p{X} -> [marker ascii] (or "marker ascii" inside a class).
 * Returns a malloc'ed string or NULL (OOM or a non-ASCII byte in re). */
static char *collapse_regex(const char *re) {
    size_t n = strlen(re);
    char *out = malloc(n * 8 + 1);
    if (!out) return NULL;
    size_t o = 0;
    bool inside = false;
    for (size_t i = 0; i < n; i++) {
        if ((unsigned char)re[i] >= 0x80) {
            free(out);
            return NULL;
        }
        if (re[i] == '[' && (i == 0 || re[i - 1] != '\\')) {
            out[o++] = '[';
            inside = true;
            continue;
        }
        if (inside && re[i] == ']' && re[i - 1] != '\\') {
            out[o++] = ']';
            inside = false;
            continue;
        }
        if (re[i] == '\\' && i + 3 < n && re[i + 1] == 'p' && re[i + 2] == '{') {
            const char *close = strchr(re + i + 3, '}');
            if (close && (size_t)(close - re) <= i + 10) {
                size_t plen = (size_t)(close - (re + i)) + 1;
                const ucat *hit = NULL;
                for (size_t k = 0; k < sizeof k_ucats / sizeof k_ucats[0]; k++)
                    if (strlen(k_ucats[k].name) == plen && !memcmp(k_ucats[k].name, re + i, plen)) hit = &k_ucats[k];
                if (hit) {
                    if (!inside) out[o++] = '[';
                    out[o++] = (char)hit->marker;
                    size_t al = strlen(hit->ascii);
                    memcpy(out + o, hit->ascii, al);
                    o += al;
                    if (!inside) out[o++] = ']';
                    i += plen - 1;
                    continue;
                }
            }
        }
        out[o++] = re[i];
    }
    out[o] = 0;
    return out;
}

/* ---- init --------------------------------------------------------------------------------- */

static const pretok_def *find_def(const char *name) {
    if (!name || !*name) name = "default";
    for (size_t i = 0; i < sizeof k_pretoks / sizeof k_pretoks[0]; i++)
        for (size_t j = 0; j < 10 && k_pretoks[i].names[j]; j++)
            if (!strcmp(k_pretoks[i].names[j], name)) return &k_pretoks[i];
    return NULL;
}

qr_status qr_tok_pretok_init(qr_tok_pretok *p, const char *name, qr_tok_pre_flags *flags, char *err,
                             size_t err_len) {
    memset(p, 0, sizeof *p);
    const pretok_def *def = find_def(name);
    if (!def)
        return qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "tokenizer.ggml.pre: unknown pre-tokenizer type '%s'", name);
    p->name = def->names[0];
    *flags = def->flags;
    for (int i = 0; i < QR_TOK_MAX_REGEX && def->regex[i]; i++) {
        const char *src = def->regex[i];
        bool collapsed = uses_categories(src);
        char *pattern = NULL;
        uint32_t options = PCRE2_NO_AUTO_CAPTURE | PCRE2_DOLLAR_ENDONLY;
        if (collapsed) {
            pattern = collapse_regex(src);
            if (!pattern) {
                qr_tok_pretok_free(p);
                return qr_errf(err, err_len, QR_ERR_INTERNAL, "pre-tokenizer '%s': regex %d cannot be collapsed",
                               def->names[0], i);
            }
        } else {
            options |= PCRE2_UTF | PCRE2_MATCH_INVALID_UTF;
        }
        int errcode = 0;
        PCRE2_SIZE erroff = 0;
        pcre2_code *code = pcre2_compile((PCRE2_SPTR)(pattern ? pattern : src), PCRE2_ZERO_TERMINATED, options,
                                         &errcode, &erroff, NULL);
        free(pattern);
        if (!code) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(errcode, msg, sizeof msg);
            qr_tok_pretok_free(p);
            return qr_errf(err, err_len, QR_ERR_INTERNAL, "pre-tokenizer '%s': regex %d: %s at %zu", def->names[0], i,
                           (const char *)msg, (size_t)erroff);
        }
        (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE); /* falls back to the interpreter */
        p->regex[i].code = code;
        p->regex[i].collapsed = collapsed;
        p->n_regex = i + 1;
    }
    return QR_OK;
}

void qr_tok_pretok_free(qr_tok_pretok *p) {
    for (int i = 0; i < p->n_regex; i++) pcre2_code_free((pcre2_code *)p->regex[i].code);
    memset(p, 0, sizeof *p);
}

void qr_tok_words_free(qr_tok_words *w) {
    free(w->cpts);
    free(w->lens);
    memset(w, 0, sizeof *w);
}

/* ---- splitting ---------------------------------------------------------------------------- */

typedef struct size_vec {
    size_t *v;
    size_t n, cap;
} size_vec;

static bool sv_push(size_vec *a, size_t x) {
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 256;
        size_t *v = realloc(a->v, cap * sizeof *v);
        if (!v) return false;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return true;
}

/* The subject a regex runs on: `text` (bytes), and for UTF mode the code point index of each byte. */
typedef struct subject {
    const char *text;
    size_t len;
    const size_t *cpt_of_byte;  /* [len + 1] (UTF mode) or NULL (one byte per code point) */
    const size_t *byte_of_cpt;  /* [n_cpts + 1] (UTF mode) or NULL */
} subject;

static size_t to_byte(const subject *s, size_t cpt) { return s->byte_of_cpt ? s->byte_of_cpt[cpt] : cpt; }
static size_t to_cpt(const subject *s, size_t byte) { return s->cpt_of_byte ? s->cpt_of_byte[byte] : byte; }

/* Runs one regex over every piece in `in` (lengths in code points); appends new lengths to `out`. */
static qr_status split_with(const qr_tok_regex *re, const subject *s, const size_vec *in, size_vec *out,
                            pcre2_match_data *md, pcre2_match_context **mctx, pcre2_jit_stack **jstack) {
    const pcre2_code *code = (const pcre2_code *)re->code;
    size_t start = 0;
    for (size_t f = 0; f < in->n; f++) {
        size_t flen = in->v[f];
        size_t b0 = to_byte(s, start), b1 = to_byte(s, start + flen);
        PCRE2_SPTR subj = (PCRE2_SPTR)(s->text + b0);
        size_t blen = b1 - b0;
        size_t pos = 0;    /* end of the last piece emitted, bytes from b0 */
        size_t search = 0; /* where the next match attempt starts */
        while (search < blen) {
            int rc = pcre2_match(code, subj, blen, search, 0, md, *mctx);
            if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !*jstack) {
                *jstack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, NULL);
                *mctx = pcre2_match_context_create(NULL);
                if (!*jstack || !*mctx) return QR_ERR_NOMEM;
                pcre2_jit_stack_assign(*mctx, NULL, *jstack);
                continue;
            }
            if (rc == PCRE2_ERROR_NOMATCH) break;
            if (rc < 0) return rc == PCRE2_ERROR_NOMEMORY ? QR_ERR_NOMEM : QR_ERR_INTERNAL;
            const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            size_t ms = ov[0], me = ov[1];
            if (me <= ms) { /* an empty match splits nothing: look again one code point later */
                search = to_byte(s, to_cpt(s, b0 + ms) + 1) - b0;
                continue;
            }
            size_t cpos = to_cpt(s, b0 + pos), cms = to_cpt(s, b0 + ms), cme = to_cpt(s, b0 + me);
            if (cms > cpos && !sv_push(out, cms - cpos)) return QR_ERR_NOMEM;
            if (!sv_push(out, cme - cms)) return QR_ERR_NOMEM;
            pos = search = me;
        }
        size_t cpos = to_cpt(s, b0 + pos);
        if (start + flen > cpos && !sv_push(out, start + flen - cpos)) return QR_ERR_NOMEM;
        start += flen;
    }
    return QR_OK;
}

qr_status qr_tok_pretok_split(const qr_tok_pretok *p, const char *text, size_t len, qr_tok_words *w) {
    qr_status st = QR_ERR_NOMEM;
    memset(w, 0, sizeof *w);
    char *collapsed = NULL, *utf = NULL;
    size_t *cpt_of_byte = NULL, *byte_of_cpt = NULL;
    size_vec a = {0}, b = {0};
    pcre2_match_data *md = NULL;
    pcre2_match_context *mctx = NULL;
    pcre2_jit_stack *jstack = NULL;

    w->cpts = malloc((len ? len : 1) * sizeof *w->cpts);
    if (!w->cpts) goto done;
    size_t n = 0;
    for (size_t off = 0; off < len;) w->cpts[n++] = qr_tok_utf8_decode(text, len, &off);
    w->n_cpts = n;
    if (n == 0) {
        st = QR_OK;
        goto done;
    }

    bool need_collapsed = false, need_utf = false;
    for (int i = 0; i < p->n_regex; i++) {
        if (p->regex[i].collapsed) need_collapsed = true;
        else need_utf = true;
    }
    if (need_collapsed) {
        collapsed = malloc(n);
        if (!collapsed) goto done;
        for (size_t i = 0; i < n; i++) {
            uint32_t c = w->cpts[i];
            if (c < 128) {
                collapsed[i] = (char)c;
                continue;
            }
            uint16_t f = qr_tok_cpt_flags(c);
            unsigned char m;
            if (f & QR_CPT_WHITESPACE) m = COLLAPSE_SPACE;
            else switch (f & QR_CPT_CATEGORIES) {
                case QR_CPT_NUMBER: m = COLLAPSE_NUMBER; break;
                case QR_CPT_LETTER: m = COLLAPSE_LETTER; break;
                case QR_CPT_PUNCTUATION: m = COLLAPSE_PUNCT; break;
                case QR_CPT_MARK: m = COLLAPSE_MARK; break;
                case QR_CPT_SYMBOL: m = COLLAPSE_SYMBOL; break;
                default: m = COLLAPSE_OTHER; break;
                }
            collapsed[i] = (char)m;
        }
    }
    if (need_utf) {
        utf = malloc(n * 4 + 1);
        byte_of_cpt = malloc((n + 1) * sizeof *byte_of_cpt);
        cpt_of_byte = malloc((n * 4 + 1) * sizeof *cpt_of_byte);
        if (!utf || !byte_of_cpt || !cpt_of_byte) goto done;
        size_t o = 0;
        for (size_t i = 0; i < n; i++) {
            uint32_t c = w->cpts[i];
            if (c >= 128 && (qr_tok_cpt_flags(c) & QR_CPT_WHITESPACE)) c = 0x0B;
            byte_of_cpt[i] = o;
            size_t k = qr_tok_utf8_encode(c, utf + o);
            for (size_t j = 0; j < k; j++) cpt_of_byte[o + j] = i;
            o += k;
        }
        byte_of_cpt[n] = o;
        cpt_of_byte[o] = n;
    }

    if (!sv_push(&a, n)) goto done;
    for (int i = 0; i < p->n_regex; i++) {
        const qr_tok_regex *re = &p->regex[i];
        subject s;
        if (re->collapsed) {
            s = (subject){collapsed, n, NULL, NULL};
        } else {
            s = (subject){utf, byte_of_cpt[n], cpt_of_byte, byte_of_cpt};
        }
        md = pcre2_match_data_create_from_pattern((const pcre2_code *)re->code, NULL);
        if (!md) goto done;
        b.n = 0;
        st = split_with(re, &s, &a, &b, md, &mctx, &jstack);
        pcre2_match_data_free(md);
        md = NULL;
        if (st != QR_OK) goto done;
        st = QR_ERR_NOMEM;
        size_vec t = a;
        a = b;
        b = t;
    }
    w->lens = a.v;
    w->n_words = a.n;
    w->cap_words = a.cap;
    a.v = NULL;
    st = QR_OK;
done:
    if (st != QR_OK) {
        free(w->cpts);
        memset(w, 0, sizeof *w);
    }
    free(a.v);
    free(b.v);
    free(collapsed);
    free(utf);
    free(cpt_of_byte);
    free(byte_of_cpt);
    if (md) pcre2_match_data_free(md);
    if (mctx) pcre2_match_context_free(mctx);
    if (jstack) pcre2_jit_stack_free(jstack);
    return st;
}
