/* tok_unicode.c — code point flags, case and decomposition (through utf8proc), UTF-8 coding with
 * llama.cpp's leniency, and the GPT-2 byte <-> unicode mapping. */
#include <utf8proc.h>

#include "tokenizer/tok_internal.h"

/* Is cpt in Unicode's White_Space property (PropList.txt; the list llama.cpp uses)? */
static bool is_white_space(uint32_t cpt) {
    if (cpt <= 0x20) return cpt == 0x20 || (cpt >= 0x09 && cpt <= 0x0D);
    if (cpt < 0x85) return false;
    switch (cpt) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
        return true;
    default:
        return cpt >= 0x2000 && cpt <= 0x200A;
    }
}

uint16_t qr_tok_cpt_flags(uint32_t cpt) {
    if (cpt > 0x10FFFF) return QR_CPT_UNDEFINED;
    uint16_t f;
    switch (utf8proc_category((utf8proc_int32_t)cpt)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO:
        f = QR_CPT_LETTER; break;
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
        f = QR_CPT_MARK; break;
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
        f = QR_CPT_NUMBER; break;
    case UTF8PROC_CATEGORY_PC: case UTF8PROC_CATEGORY_PD: case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE: case UTF8PROC_CATEGORY_PI: case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
        f = QR_CPT_PUNCTUATION; break;
    case UTF8PROC_CATEGORY_SM: case UTF8PROC_CATEGORY_SC: case UTF8PROC_CATEGORY_SK:
    case UTF8PROC_CATEGORY_SO:
        f = QR_CPT_SYMBOL; break;
    case UTF8PROC_CATEGORY_ZS: case UTF8PROC_CATEGORY_ZL: case UTF8PROC_CATEGORY_ZP:
        f = QR_CPT_SEPARATOR; break;
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
        f = QR_CPT_CONTROL; break;
    default:
        f = QR_CPT_UNDEFINED; break;
    }
    if (is_white_space(cpt)) f |= QR_CPT_WHITESPACE;
    return f;
}

uint32_t qr_tok_utf8_decode(const char *str, size_t n, size_t *off) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = *off;
    unsigned char c = s[i];
    if (!(c & 0x80)) {
        *off = i + 1;
        return c;
    }
    if (!(c & 0x40)) goto invalid; /* continuation byte as a lead */
    if (!(c & 0x20)) {
        if (i + 1 >= n || (s[i + 1] & 0xC0) != 0x80) goto invalid;
        *off = i + 2;
        return ((uint32_t)(c & 0x1F) << 6) | (s[i + 1] & 0x3F);
    }
    if (!(c & 0x10)) {
        if (i + 2 >= n || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80) goto invalid;
        *off = i + 3;
        return ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
    }
    if (!(c & 0x08)) {
        if (i + 3 >= n || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80 || (s[i + 3] & 0xC0) != 0x80)
            goto invalid;
        *off = i + 4;
        return ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[i + 1] & 0x3F) << 12) |
               ((uint32_t)(s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F);
    }
invalid:
    *off = i + 1;
    return 0xFFFD;
}

size_t qr_tok_utf8_encode(uint32_t cpt, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (cpt <= 0x7F) {
        o[0] = (unsigned char)cpt;
        return 1;
    }
    if (cpt <= 0x7FF) {
        o[0] = (unsigned char)(0xC0 | ((cpt >> 6) & 0x1F));
        o[1] = (unsigned char)(0x80 | (cpt & 0x3F));
        return 2;
    }
    if (cpt <= 0xFFFF) {
        o[0] = (unsigned char)(0xE0 | ((cpt >> 12) & 0x0F));
        o[1] = (unsigned char)(0x80 | ((cpt >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cpt & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | ((cpt >> 18) & 0x07));
    o[1] = (unsigned char)(0x80 | ((cpt >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cpt >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cpt & 0x3F));
    return 4;
}

uint32_t qr_tok_tolower(uint32_t cpt) {
    if (cpt < 0x80) return (cpt >= 'A' && cpt <= 'Z') ? cpt + 32 : cpt;
    if (cpt > 0x10FFFF) return cpt;
    return (uint32_t)utf8proc_tolower((utf8proc_int32_t)cpt);
}

/* GPT-2's printable bytes map to themselves; the other 68 map to U+0100.. in byte order. */
static bool byte_is_printable(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
}

uint32_t qr_tok_byte_to_cpt(uint8_t b) {
    if (byte_is_printable(b)) return b;
    uint32_t n = 0;
    for (unsigned c = 0; c < b; c++)
        if (!byte_is_printable(c)) n++;
    return 256 + n;
}

int qr_tok_cpt_to_byte(uint32_t cpt) {
    if (cpt < 256) return byte_is_printable(cpt) ? (int)cpt : -1;
    if (cpt >= 256 + 68) return -1;
    uint32_t n = cpt - 256;
    for (unsigned c = 0; c < 256; c++) {
        if (byte_is_printable(c)) continue;
        if (n == 0) return (int)c;
        n--;
    }
    return -1;
}
