/* test_gguf.c — GGUF reader and writer: the malformed corpus (tests/data/gguf_bad, made by
 * tools/make_bad_gguf.py), every prefix of valid files, well-formed edge cases built with the writer
 * (every value type, nested arrays, v2/v3, custom alignment), typed getters, writer argument errors,
 * and byte-identical read -> write -> read round trips of both real models. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "util/util.h"

/* ---- helpers ------------------------------------------------------------------------------------ */

static const char *data_dir(void) {
    const char *d = getenv("QR_TEST_DATA_DIR");
    return d && *d ? d : QR_TEST_DATA_DIR;
}

/* Reads a whole file into a malloc'ed buffer of exactly its size (so ASan sees any over-read). */
static uint8_t *slurp(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    assert_non_null(buf);
    if (n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n) fail_msg("short read on %s", path);
    fclose(f);
    *size = (size_t)n;
    return buf;
}

/* Opens buf[0..size) from an exact-size heap copy; returns the status, *g on success. */
static qr_status open_copy(const void *buf, size_t size, qr_gguf **g, char *err, size_t err_len, void **copy) {
    *copy = malloc(size ? size : 1);
    assert_non_null(*copy);
    if (size) memcpy(*copy, buf, size);
    return qr_gguf_open_memory(*copy, size, g, err, err_len);
}

static void expect_contains(const char *what, const char *msg, const char *needle) {
    if (!strstr(msg, needle)) fail_msg("%s: message \"%s\" lacks \"%s\"", what, msg, needle);
}

/* ---- the malformed corpus ------------------------------------------------------------------------ */

typedef struct bad_case {
    const char *file;
    qr_status status;
    const char *message; /* must appear in the error message (offset included) */
} bad_case;

/* Offsets follow the layouts in tools/make_bad_gguf.py (which prints them as it writes each file). */
static const bad_case bad_cases[] = {
    {"empty.gguf", QR_ERR_FORMAT, "offset 0: file truncated: magic needs 4 bytes, 0 left"},
    {"truncated_header.gguf", QR_ERR_FORMAT, "offset 8: file truncated: tensor count needs 8 bytes, 4 left"},
    {"bad_magic.gguf", QR_ERR_FORMAT, "offset 0: bad magic 0x4c4d4747"},
    {"version1.gguf", QR_ERR_UNSUPPORTED, "offset 4: GGUF version 1 is not supported"},
    {"version99.gguf", QR_ERR_UNSUPPORTED, "offset 4: unsupported GGUF version 99"},
    {"big_endian.gguf", QR_ERR_UNSUPPORTED, "offset 4: GGUF version field 0x03000000 looks big-endian"},
    {"truncated_mid_file.gguf", QR_ERR_FORMAT, "offset 114: file truncated: tensor n_dims needs 4 bytes, 1 left"},
    {"n_kv_absurd.gguf", QR_ERR_FORMAT, "offset 16: key/value count 1099511627776 is impossible for a file of 288 bytes"},
    {"n_tensors_absurd.gguf", QR_ERR_FORMAT, "offset 8: tensor count 1099511627776 is impossible"},
    {"n_kv_u64max.gguf", QR_ERR_FORMAT, "offset 16: key/value count 18446744073709551615 is impossible"},
    {"counts_sum_absurd.gguf", QR_ERR_FORMAT, "offset 8: 3 tensors and 3 key/values cannot fit in a file of 124 bytes"},
    {"key_len_past_eof.gguf", QR_ERR_FORMAT, "offset 24: key length 9223372036854775807 runs past end of file (size 55)"},
    {"key_len_u64max.gguf", QR_ERR_FORMAT, "offset 24: key length 18446744073709551615 runs past end of file"},
    {"string_len_past_eof.gguf", QR_ERR_FORMAT, "offset 37: key 'k': string length 1000 runs past end of file (size 50)"},
    {"array_count_overflow.gguf", QR_ERR_FORMAT, "offset 41: key 'k': array count 4611686018427387905 of uint32 (4 bytes each) runs past end"},
    {"array_count_past_eof.gguf", QR_ERR_FORMAT, "offset 41: key 'k': array count 17 of uint8 (1 bytes each) runs past end of file (size 65)"},
    {"string_array_count_past_eof.gguf", QR_ERR_FORMAT, "offset 41: key 'k': array count 2305843009213693952 of string"},
    {"string_array_elem_past_eof.gguf", QR_ERR_FORMAT, "offset 58: key 'k': string length 99 runs past end of file (size 68)"},
    {"nested_array_count_past_eof.gguf", QR_ERR_FORMAT, "offset 41: key 'k': array count 1099511627776 of array"},
    {"unknown_value_type.gguf", QR_ERR_FORMAT, "offset 33: key 'k': unknown value type 13"},
    {"unknown_array_elem_type.gguf", QR_ERR_FORMAT, "offset 37: key 'k': unknown array element type 99"},
    {"bad_bool.gguf", QR_ERR_FORMAT, "offset 37: key 'k': bool value 2 is not 0 or 1"},
    {"bad_bool_array.gguf", QR_ERR_FORMAT, "offset 50: key 'k': bool element 1 has value 7"},
    {"array_nesting_too_deep.gguf", QR_ERR_FORMAT, "offset 133: key 'k': arrays nested deeper than 8 levels"},
    {"duplicate_key.gguf", QR_ERR_FORMAT, "offset 105: duplicate key 'general.name' (first at offset 69)"},
    {"alignment_not_pow2.gguf", QR_ERR_FORMAT, "offset 134: general.alignment 48 is not a nonzero power of two"},
    {"alignment_zero.gguf", QR_ERR_FORMAT, "offset 134: general.alignment 0 is not a nonzero power of two"},
    {"alignment_wrong_type.gguf", QR_ERR_FORMAT, "offset 130: general.alignment has type uint64 (must be uint32)"},
    {"tensor_n_dims_zero.gguf", QR_ERR_FORMAT, "offset 66: tensor 'w': n_dims 0 out of range 1..4"},
    {"tensor_n_dims_five.gguf", QR_ERR_FORMAT, "offset 66: tensor 'w': n_dims 5 out of range 1..4"},
    {"tensor_dim_zero.gguf", QR_ERR_FORMAT, "offset 78: tensor 'w': dimension 1 is 0 (must be >= 1)"},
    {"tensor_dim_negative.gguf", QR_ERR_FORMAT, "offset 70: tensor 'w': dimension 0 is -5 (must be >= 1)"},
    {"tensor_nelements_overflow.gguf", QR_ERR_FORMAT, "offset 78: tensor 'w': element count overflows int64 at dimension 1"},
    {"tensor_nbytes_overflow.gguf", QR_ERR_FORMAT, "offset 66: tensor 'w': byte size overflows"},
    {"tensor_type_removed.gguf", QR_ERR_FORMAT, "offset 78: tensor 'w': unknown tensor type 4"},
    {"tensor_type_unknown.gguf", QR_ERR_FORMAT, "offset 78: tensor 'w': unknown tensor type 1000"},
    {"tensor_block_size.gguf", QR_ERR_FORMAT, "offset 70: tensor 'w': ne[0] = 33 is not a multiple of the block size 32 of Q4_0"},
    {"tensor_offset_misaligned.gguf", QR_ERR_FORMAT, "offset 82: tensor 'w': data offset 16 is not a multiple of the alignment 32"},
    {"tensor_offset_past_eof.gguf", QR_ERR_FORMAT, "offset 82: tensor 'w': data [1099511627776, +16 bytes) runs past end of file"},
    {"tensor_size_past_eof.gguf", QR_ERR_FORMAT, "offset 82: tensor 'w': data [0, +68 bytes) runs past end of file (data section at 96, file size 160)"},
    {"tensor_offset_wraps.gguf", QR_ERR_FORMAT, "offset 82: tensor 'w': data [18446744073709551584, +64 bytes) runs past end"},
    {"tensor_info_truncated.gguf", QR_ERR_FORMAT, "offset 78: file truncated: tensor dimension needs 8 bytes, 0 left"},
    {"tensor_name_past_eof.gguf", QR_ERR_FORMAT, "offset 57: tensor name length 1125899906842624 runs past end of file"},
    {"duplicate_tensor_name.gguf", QR_ERR_FORMAT, "offset 90: duplicate tensor name 'w' (first at offset 57)"},
    {"alignment_data_past_eof.gguf", QR_ERR_FORMAT, "offset 82: tensor 'a': data [0, +128 bytes) runs past end of file (data section at 4096"},
};
#define N_BAD (sizeof bad_cases / sizeof bad_cases[0])

/* Every corpus file fails with the expected status and message, both via mmap and from memory. */
static void test_bad_corpus(void **state) {
    (void)state;
    for (size_t i = 0; i < N_BAD; i++) {
        const bad_case *c = &bad_cases[i];
        char path[1024], err[512] = "";
        snprintf(path, sizeof path, "%s/gguf_bad/%s", data_dir(), c->file);
        qr_gguf *g = (qr_gguf *)1;
        qr_status st = qr_gguf_open(path, &g, err, sizeof err);
        if (st != c->status) fail_msg("%s: status %d (%s), expected %d; message: %s", c->file, st, qr_status_str(st), c->status, err);
        assert_null(g);
        expect_contains(c->file, err, c->message);
        expect_contains(c->file, err, path); /* the file-based message names the file */

        size_t size;
        uint8_t *buf = slurp(path, &size);
        void *copy;
        char err2[512] = "";
        st = open_copy(buf, size, &g, err2, sizeof err2, &copy);
        assert_int_equal(st, c->status);
        expect_contains(c->file, err2, c->message);
        free(copy);
        free(buf);
    }
}

/* The corpus directory and the table above list the same files. */
static void test_bad_corpus_complete(void **state) {
    (void)state;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/gguf_bad", data_dir());
    DIR *d = opendir(dir);
    if (!d) fail_msg("cannot open %s", dir);
    size_t n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        n++;
        bool listed = false;
        for (size_t i = 0; i < N_BAD; i++) listed |= strcmp(bad_cases[i].file, e->d_name) == 0;
        if (!listed) fail_msg("%s/%s has no expectation in test_gguf.c", dir, e->d_name);
    }
    closedir(d);
    assert_int_equal(n, N_BAD);
}

/* ---- valid files and their prefixes ------------------------------------------------------------- */

/* End of the last byte that must be present: the data of the furthest tensor (padding optional). */
static uint64_t required_size(const qr_gguf *g) {
    uint64_t end = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        uint64_t e = g->data_offset + g->tensors[i].offset + g->tensors[i].nbytes;
        if (e > end) end = e;
    }
    return end;
}

/* Opens every prefix of buf: shorter than `need` must fail with FORMAT naming an offset; longer succeeds. */
static void check_prefixes(const char *what, const uint8_t *buf, size_t size, uint64_t need) {
    for (size_t n = 0; n <= size; n++) {
        qr_gguf *g = NULL;
        void *copy;
        char err[512] = "";
        qr_status st = open_copy(buf, n, &g, err, sizeof err, &copy);
        if (n < need) {
            if (st != QR_ERR_FORMAT) fail_msg("%s: prefix %zu of %zu: status %d, expected FORMAT (%s)", what, n, size, st, err);
            expect_contains(what, err, "offset ");
            assert_null(g);
        } else if (st != QR_OK) {
            fail_msg("%s: prefix %zu of %zu (need %llu) failed: %s", what, n, size, (unsigned long long)need, err);
        }
        qr_gguf_close(g);
        free(copy);
    }
}

static void test_good_files_and_prefixes(void **state) {
    (void)state;
    static const char *files[] = {"minimal_v3.gguf", "small_v2.gguf", "all_types.gguf"};
    for (size_t f = 0; f < 3; f++) {
        char path[1024], err[512] = "";
        snprintf(path, sizeof path, "%s/gguf_good/%s", data_dir(), files[f]);
        qr_gguf *g = NULL;
        if (qr_gguf_open(path, &g, err, sizeof err)) fail_msg("%s: %s", files[f], err);
        uint64_t need = required_size(g);
        if (g->n_tensors == 0) need = 24; /* header only: the padding after it is optional */
        size_t size;
        uint8_t *buf = slurp(path, &size);
        assert_int_equal(size, g->size);
        check_prefixes(files[f], buf, size, need);
        free(buf);
        qr_gguf_close(g);
    }
}

/* all_types.gguf (written by the Python generator) reads back with the values the generator put in. */
static void test_all_types_file(void **state) {
    (void)state;
    char path[1024], err[512] = "";
    snprintf(path, sizeof path, "%s/gguf_good/all_types.gguf", data_dir());
    qr_gguf *g = NULL;
    if (qr_gguf_open(path, &g, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(g->version, 3);
    assert_int_equal(g->alignment, 64);
    assert_int_equal(g->data_offset % 64, 0);
    assert_int_equal(g->n_kv, 18);
    assert_int_equal(g->n_tensors, 3);
    assert_int_equal(qr_gguf_get(g, "v.u8")->u64, 255);
    assert_int_equal(qr_gguf_get(g, "v.i8")->i64, -128);
    assert_int_equal(qr_gguf_get(g, "v.u16")->u64, 65535);
    assert_int_equal(qr_gguf_get(g, "v.i16")->i64, -32768);
    assert_int_equal(qr_gguf_get(g, "v.u32")->u64, 4000000000u);
    assert_int_equal(qr_gguf_get(g, "v.i32")->i64, -2000000000);
    assert_true(qr_gguf_get(g, "v.f32")->f64 == 0.25);
    assert_int_equal(qr_gguf_get(g, "v.bool")->u64, 1);
    assert_true(qr_gguf_str_eq(qr_gguf_get(g, "v.str")->str, "h\xc3\xa9llo"));
    assert_true(qr_gguf_get(g, "v.u64")->u64 == UINT64_MAX);
    assert_true(qr_gguf_get(g, "v.i64")->i64 == INT64_MIN);
    assert_true(qr_gguf_get(g, "v.f64")->f64 == -1.5);
    const qr_gguf_value *a = qr_gguf_get_arr(g, "v.arr_i32", QR_GGUF_I32);
    assert_non_null(a);
    assert_int_equal(a->arr.count, 3);
    assert_int_equal(qr_gguf_arr_i64(a, 0), -1);
    assert_int_equal(qr_gguf_arr_i64(a, 2), 7);
    assert_true(qr_gguf_arr_f64(a, 0) == -1.0);
    a = qr_gguf_get_arr(g, "v.arr_str", QR_GGUF_STRING);
    assert_true(qr_gguf_str_eq(qr_gguf_arr_str(a, 0), "a") && qr_gguf_arr_str(a, 1).len == 0);
    a = qr_gguf_get_arr(g, "v.arr_arr", QR_GGUF_ARRAY);
    assert_non_null(a);
    assert_int_equal(a->arr.count, 2);
    assert_int_equal(a->arr.items[0].arr.elem_type, QR_GGUF_U8);
    assert_int_equal(qr_gguf_arr_u64(&a->arr.items[0], 1), 2);
    assert_true(qr_gguf_str_eq(qr_gguf_arr_str(&a->arr.items[1], 0), "z"));
    a = qr_gguf_get_arr(g, "v.arr_empty", QR_GGUF_F32);
    assert_int_equal(a->arr.count, 0);
    const qr_gguf_tensor *t = qr_gguf_get_tensor(g, "t.q4_0");
    assert_non_null(t);
    assert_int_equal(t->type, QR_TYPE_Q4_0);
    assert_int_equal(t->n_dims, 3);
    assert_int_equal(t->ne[0], 64);
    assert_int_equal(t->ne[2], 2);
    assert_int_equal(t->ne[3], 1);
    assert_int_equal(t->nbytes, 2 * 2 * 18);
    assert_int_equal(qr_gguf_tensor_nelements(t), 128);
    assert_ptr_equal(t->data, g->base + g->data_offset + t->offset);
    assert_int_equal(((const uint8_t *)qr_gguf_get_tensor(g, "t.f32")->data)[1], 0x5b); /* fill pattern 0x5A + i */
    qr_gguf_close(g);
}

/* ---- writer-built edge cases --------------------------------------------------------------------- */

/* Writes w to memory, checks that it opens, returns the reader and (via *buf) the bytes. */
static qr_gguf *write_and_open(qr_gguf_writer *w, void **buf, size_t *size) {
    char err[512] = "";
    if (qr_gguf_writer_write_memory(w, buf, size, err, sizeof err)) fail_msg("write: %s", err);
    qr_gguf *g = NULL;
    if (qr_gguf_open_memory(*buf, *size, &g, err, sizeof err)) fail_msg("reopen: %s", err);
    return g;
}

/* Every value type through the writer, in v2 and v3, with default and custom alignment. */
static void test_writer_every_type(void **state) {
    (void)state;
    const uint32_t versions[] = {2, 3};
    const uint32_t aligns[] = {32, 1, 256};
    for (int vi = 0; vi < 2; vi++)
        for (int ai = 0; ai < 3; ai++) {
            qr_gguf_writer *w = qr_gguf_writer_create(versions[vi], aligns[ai]);
            assert_non_null(w);
            assert_int_equal(qr_gguf_writer_set_u32(w, "k.u32", 123456789u), QR_OK);
            assert_int_equal(qr_gguf_writer_set_i32(w, "k.i32", -5), QR_OK);
            assert_int_equal(qr_gguf_writer_set_u64(w, "k.u64", 1ull << 40), QR_OK);
            assert_int_equal(qr_gguf_writer_set_f32(w, "k.f32", 1e-6f), QR_OK);
            assert_int_equal(qr_gguf_writer_set_bool(w, "k.bool", true), QR_OK);
            assert_int_equal(qr_gguf_writer_set_str(w, "k.str", ""), QR_OK);
            const int16_t i16s[] = {-3, 4, 32767};
            assert_int_equal(qr_gguf_writer_set_arr(w, "k.arr_i16", QR_GGUF_I16, i16s, 3), QR_OK);
            const double f64s[] = {0.5, -2.25};
            assert_int_equal(qr_gguf_writer_set_arr(w, "k.arr_f64", QR_GGUF_F64, f64s, 2), QR_OK);
            const uint8_t bools[] = {1, 0, 1};
            assert_int_equal(qr_gguf_writer_set_arr(w, "k.arr_bool", QR_GGUF_BOOL, bools, 3), QR_OK);
            const char *strs[] = {"x", "", "yz"};
            assert_int_equal(qr_gguf_writer_set_arr_str(w, "k.arr_str", strs, 3), QR_OK);
            /* other scalar types and nested arrays through set_value */
            const qr_gguf_value scalars[] = {
                {.type = QR_GGUF_U8, .u64 = 200},     {.type = QR_GGUF_I8, .i64 = -100},
                {.type = QR_GGUF_U16, .u64 = 60000},  {.type = QR_GGUF_I16, .i64 = -30000},
                {.type = QR_GGUF_I64, .i64 = -7},     {.type = QR_GGUF_F64, .f64 = 3.141592653589793},
            };
            const char *scalar_keys[] = {"s.u8", "s.i8", "s.u16", "s.i16", "s.i64", "s.f64"};
            for (int i = 0; i < 6; i++)
                assert_int_equal(qr_gguf_writer_set_value(w, (qr_gguf_str){scalar_keys[i], strlen(scalar_keys[i])}, &scalars[i]), QR_OK);
            const uint32_t u32s[] = {1, 2, 3};
            qr_gguf_str inner_strs[] = {{"p", 1}, {"qq", 2}};
            qr_gguf_value level2[2] = {
                {.type = QR_GGUF_ARRAY, .arr = {.elem_type = QR_GGUF_U32, .count = 3, .data = (const uint8_t *)u32s}},
                {.type = QR_GGUF_ARRAY, .arr = {.elem_type = QR_GGUF_STRING, .count = 2, .strs = inner_strs}},
            };
            qr_gguf_value level1 = {.type = QR_GGUF_ARRAY, .arr = {.elem_type = QR_GGUF_ARRAY, .count = 2, .items = level2}};
            qr_gguf_value top = {.type = QR_GGUF_ARRAY, .arr = {.elem_type = QR_GGUF_ARRAY, .count = 1, .items = &level1}};
            assert_int_equal(qr_gguf_writer_set_value(w, (qr_gguf_str){"k.nested_not_terminated", 8}, &top), QR_OK);
            if (ai == 2) assert_int_equal(qr_gguf_writer_set_u32(w, "general.alignment", 128), QR_OK); /* overrides 256 */
            float f32s[3 * 5];
            for (int i = 0; i < 15; i++) f32s[i] = (float)i * 0.5f;
            uint8_t q4[2 * 18];
            for (int i = 0; i < 36; i++) q4[i] = (uint8_t)(i * 7);
            assert_int_equal(qr_gguf_writer_add_tensor(w, "t.f32", QR_TYPE_F32, 2, (const int64_t[]){3, 5}, f32s), QR_OK);
            assert_int_equal(qr_gguf_writer_add_tensor(w, "t.q4_0", QR_TYPE_Q4_0, 1, (const int64_t[]){64}, q4), QR_OK);

            void *buf;
            size_t size;
            qr_gguf *g = write_and_open(w, &buf, &size);
            uint32_t expect_align = ai == 2 ? 128 : aligns[ai];
            assert_int_equal(g->version, versions[vi]);
            assert_int_equal(g->alignment, expect_align);
            /* alignment 1 given to create: the writer adds general.alignment itself, as the last key */
            assert_int_equal(g->n_kv, 17 + (ai != 0));
            if (ai == 1) assert_true(qr_gguf_str_eq(g->kv[17].key, "general.alignment"));
            uint32_t u32;
            int32_t i32;
            uint64_t u64;
            float f32;
            bool b;
            qr_gguf_str s;
            assert_true(qr_gguf_get_u32(g, "k.u32", &u32) && u32 == 123456789u);
            assert_true(qr_gguf_get_i32(g, "k.i32", &i32) && i32 == -5);
            assert_true(qr_gguf_get_u64(g, "k.u64", &u64) && u64 == 1ull << 40);
            assert_true(qr_gguf_get_f32(g, "k.f32", &f32) && f32 == 1e-6f);
            assert_true(qr_gguf_get_bool(g, "k.bool", &b) && b);
            assert_true(qr_gguf_get_str(g, "k.str", &s) && s.len == 0);
            const qr_gguf_value *v = qr_gguf_get_arr(g, "k.arr_i16", QR_GGUF_I16);
            assert_true(v && qr_gguf_arr_i64(v, 0) == -3 && qr_gguf_arr_i64(v, 2) == 32767);
            v = qr_gguf_get_arr(g, "k.arr_f64", QR_GGUF_VTYPE_COUNT);
            assert_true(v && qr_gguf_arr_f64(v, 1) == -2.25);
            v = qr_gguf_get_arr(g, "k.arr_bool", QR_GGUF_BOOL);
            assert_true(v && qr_gguf_arr_u64(v, 0) == 1 && qr_gguf_arr_u64(v, 1) == 0);
            v = qr_gguf_get_arr(g, "k.arr_str", QR_GGUF_STRING);
            assert_true(v && qr_gguf_str_eq(qr_gguf_arr_str(v, 2), "yz"));
            for (int i = 0; i < 6; i++) {
                const qr_gguf_value *sv = qr_gguf_get(g, scalar_keys[i]);
                assert_non_null(sv);
                assert_int_equal(sv->type, scalars[i].type);
                assert_memory_equal(&sv->u64, &scalars[i].u64, 8);
            }
            v = qr_gguf_get_arr(g, "k.nested", QR_GGUF_ARRAY);
            assert_non_null(v);
            const qr_gguf_value *l1 = &v->arr.items[0];
            assert_int_equal(l1->arr.count, 2);
            assert_int_equal(qr_gguf_arr_u64(&l1->arr.items[0], 2), 3);
            assert_true(qr_gguf_str_eq(qr_gguf_arr_str(&l1->arr.items[1], 1), "qq"));
            for (uint64_t i = 0; i < g->n_tensors; i++) {
                const qr_gguf_tensor *t = &g->tensors[i];
                assert_int_equal(t->offset % expect_align, 0);
                assert_int_equal((g->data_offset + t->offset) % expect_align, 0);
            }
            const qr_gguf_tensor *t = qr_gguf_get_tensor(g, "t.f32");
            assert_int_equal(t->nbytes, sizeof f32s);
            assert_memory_equal(t->data, f32s, sizeof f32s);
            t = qr_gguf_get_tensor(g, "t.q4_0");
            assert_memory_equal(t->data, q4, sizeof q4);
            assert_int_equal(size, g->data_offset + t->offset + ((36 + expect_align - 1) / expect_align) * expect_align);
            /* everything between the metadata and the data section, and after each tensor, is zero */
            for (uint64_t i = 0; i < g->n_tensors; i++) {
                const uint8_t *p = (const uint8_t *)g->tensors[i].data;
                uint64_t padded = (g->tensors[i].nbytes + expect_align - 1) / expect_align * expect_align;
                for (uint64_t k = g->tensors[i].nbytes; k < padded; k++) assert_int_equal(p[k], 0);
            }
            qr_gguf_close(g);
            free(buf);
            qr_gguf_writer_free(w);
        }
}

/* The typed getters convert between integer widths only when the value fits. */
static void test_getters(void **state) {
    (void)state;
    qr_gguf_writer *w = qr_gguf_writer_create(3, 32);
    qr_gguf_value neg = {.type = QR_GGUF_I8, .i64 = -1};
    qr_gguf_writer_set_value(w, (qr_gguf_str){"neg", 3}, &neg);
    qr_gguf_writer_set_u64(w, "big", 1ull << 33);
    qr_gguf_writer_set_i32(w, "small", 7);
    qr_gguf_writer_set_f32(w, "f", 2.5f);
    qr_gguf_writer_set_str(w, "s", "str");
    qr_gguf_writer_set_bool(w, "b", false);
    void *buf;
    size_t size;
    qr_gguf *g = write_and_open(w, &buf, &size);
    uint32_t u32 = 99;
    int32_t i32 = 99;
    uint64_t u64 = 99;
    float f = 0;
    bool b = true;
    qr_gguf_str s;
    assert_false(qr_gguf_get_u32(g, "neg", &u32));
    assert_int_equal(u32, 99); /* untouched */
    assert_false(qr_gguf_get_u64(g, "neg", &u64));
    assert_true(qr_gguf_get_i32(g, "neg", &i32) && i32 == -1);
    assert_false(qr_gguf_get_u32(g, "big", &u32));
    assert_false(qr_gguf_get_i32(g, "big", &i32));
    assert_true(qr_gguf_get_u64(g, "big", &u64) && u64 == 1ull << 33);
    assert_true(qr_gguf_get_u32(g, "small", &u32) && u32 == 7);
    assert_true(qr_gguf_get_f32(g, "small", &f) && f == 7.0f);
    assert_true(qr_gguf_get_f32(g, "f", &f) && f == 2.5f);
    assert_false(qr_gguf_get_u32(g, "f", &u32));
    assert_false(qr_gguf_get_str(g, "f", &s));
    assert_true(qr_gguf_get_str(g, "s", &s) && qr_gguf_str_eq(s, "str") && !qr_gguf_str_eq(s, "st"));
    assert_false(qr_gguf_get_bool(g, "small", &b));
    assert_true(qr_gguf_get_bool(g, "b", &b) && !b);
    assert_false(qr_gguf_get_u32(g, "absent", &u32));
    assert_null(qr_gguf_get(g, "absent"));
    assert_int_equal(qr_gguf_find_key(g, "s"), 4);
    assert_null(qr_gguf_get_arr(g, "s", QR_GGUF_VTYPE_COUNT));
    assert_null(qr_gguf_get_tensor(g, "s"));
    assert_int_equal(qr_gguf_find_tensor(g, "x"), -1);
    char small[3];
    assert_string_equal(qr_gguf_str_copy(s, small, sizeof small), "st");
    assert_string_equal(qr_gguf_vtype_name(QR_GGUF_F32), "float32");
    assert_string_equal(qr_gguf_vtype_name(99), "?");
    assert_int_equal(qr_gguf_vtype_size(QR_GGUF_U64), 8);
    assert_int_equal(qr_gguf_vtype_size(QR_GGUF_STRING), 0);
    qr_gguf_close(g);
    free(buf);
    qr_gguf_writer_free(w);
}

/* Argument errors are returned at once and reported (first one) by write with a message. */
static void test_writer_errors(void **state) {
    (void)state;
    char err[512];
    void *buf;
    size_t size;
    struct {
        int which;
        const char *message;
    } cases[] = {
        {0, "duplicate key 'a'"},      {1, "duplicate tensor name 't'"},      {2, "not a multiple of Q4_0's block size 32"},
        {3, "n_dims 5 out of range"},  {4, "general.alignment 24 is not a nonzero power of two"},
        {5, "ne[1] = 0"},              {6, "GGUF version 1 cannot be written"}, {7, "alignment 3 is not a nonzero power of two"},
        {8, "set_arr needs a scalar element type"}, {9, "key 'b': bool value not 0 or 1"},
        {10, "key 'ba': bool array element not 0 or 1"},
    };
    static const float data[64];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        qr_gguf_writer *w = qr_gguf_writer_create(cases[i].which == 6 ? 1 : 3, cases[i].which == 7 ? 3 : 32);
        qr_status st = QR_OK;
        switch (cases[i].which) {
        case 0: qr_gguf_writer_set_u32(w, "a", 1); qr_gguf_writer_set_str(w, "a", "x"); break;
        case 1:
            qr_gguf_writer_add_tensor(w, "t", QR_TYPE_F32, 1, (const int64_t[]){4}, data);
            qr_gguf_writer_add_tensor(w, "t", QR_TYPE_F32, 1, (const int64_t[]){4}, data);
            break;
        case 2: st = qr_gguf_writer_add_tensor(w, "q", QR_TYPE_Q4_0, 1, (const int64_t[]){48}, data); break;
        case 3: st = qr_gguf_writer_add_tensor(w, "q", QR_TYPE_F32, 5, (const int64_t[]){1, 1, 1, 1, 1}, data); break;
        case 4: st = qr_gguf_writer_set_u32(w, "general.alignment", 24); break;
        case 5: st = qr_gguf_writer_add_tensor(w, "z", QR_TYPE_F32, 2, (const int64_t[]){4, 0}, data); break;
        case 8: st = qr_gguf_writer_set_arr(w, "s", QR_GGUF_STRING, data, 1); break;
        case 9: st = qr_gguf_writer_set_value(w, (qr_gguf_str){"b", 1}, &(qr_gguf_value){.type = QR_GGUF_BOOL, .u64 = 2}); break;
        case 10: st = qr_gguf_writer_set_arr(w, "ba", QR_GGUF_BOOL, (const uint8_t[]){0, 1, 2}, 3); break;
        default: break;
        }
        if (cases[i].which >= 2 && cases[i].which != 6 && cases[i].which != 7) assert_int_equal(st, QR_ERR_INVALID_ARG);
        err[0] = 0;
        assert_int_equal(qr_gguf_writer_write_memory(w, &buf, &size, err, sizeof err), QR_ERR_INVALID_ARG);
        assert_null(buf);
        expect_contains("writer", err, cases[i].message);
        char path[] = "/tmp/qr_test_gguf_never_XXXXXX";
        int fd = mkstemp(path);
        assert_true(fd >= 0);
        close(fd);
        unlink(path);
        assert_int_equal(qr_gguf_writer_write(w, path, err, sizeof err), QR_ERR_INVALID_ARG);
        assert_int_equal(access(path, F_OK), -1); /* nothing written */
        qr_gguf_writer_free(w);
    }
}

/* ---- round trips -------------------------------------------------------------------------------- */

/* Copies every key/value and tensor of g, in order, into a new writer. */
static qr_gguf_writer *copy_all(const qr_gguf *g) {
    qr_gguf_writer *w = qr_gguf_writer_create(g->version, g->alignment);
    assert_non_null(w);
    for (uint64_t i = 0; i < g->n_kv; i++) assert_int_equal(qr_gguf_writer_set_value(w, g->kv[i].key, &g->kv[i].value), QR_OK);
    for (uint64_t i = 0; i < g->n_tensors; i++) assert_int_equal(qr_gguf_writer_copy_tensor(w, &g->tensors[i]), QR_OK);
    return w;
}

/* Read -> write -> read of `path` reproduces the file byte for byte and the lookups work. */
static void roundtrip_file(const char *path) {
    char err[512] = "";
    qr_gguf *g = NULL;
    if (qr_gguf_open(path, &g, err, sizeof err)) fail_msg("%s", err);
    for (uint64_t i = 0; i < g->n_kv; i++) {
        char key[512];
        qr_gguf_str_copy(g->kv[i].key, key, sizeof key);
        assert_int_equal(qr_gguf_find_key(g, key), (int64_t)i);
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        char name[512];
        qr_gguf_str_copy(g->tensors[i].name, name, sizeof name);
        assert_int_equal(qr_gguf_find_tensor(g, name), (int64_t)i);
    }
    qr_gguf_writer *w = copy_all(g);
    const char *tmpdir = getenv("TMPDIR");
    char out[1024];
    snprintf(out, sizeof out, "%s/qr_test_gguf_rt_XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
    int fd = mkstemp(out);
    assert_true(fd >= 0);
    close(fd);
    if (qr_gguf_writer_write(w, out, err, sizeof err)) fail_msg("write %s: %s", out, err);
    qr_gguf_writer_free(w);
    qr_mapped_file a, b;
    assert_int_equal(qr_map_file(path, &a, err, sizeof err), QR_OK);
    assert_int_equal(qr_map_file(out, &b, err, sizeof err), QR_OK);
    if (a.size != b.size) fail_msg("%s: round trip size %zu != %zu", path, b.size, a.size);
    if (memcmp(a.data, b.data, a.size) != 0) {
        size_t k = 0;
        while (a.data[k] == b.data[k]) k++;
        fail_msg("%s: round trip differs first at byte %zu", path, k);
    }
    qr_gguf *g2 = NULL;
    if (qr_gguf_open(out, &g2, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(g2->n_kv, g->n_kv);
    assert_int_equal(g2->n_tensors, g->n_tensors);
    assert_int_equal(g2->data_offset, g->data_offset);
    qr_gguf_close(g2);
    qr_unmap_file(&a);
    qr_unmap_file(&b);
    unlink(out);
    qr_gguf_close(g);
}

static void test_roundtrip_small(void **state) {
    (void)state;
    static const char *files[] = {"minimal_v3.gguf", "small_v2.gguf", "all_types.gguf"};
    for (int i = 0; i < 3; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/gguf_good/%s", data_dir(), files[i]);
        roundtrip_file(path);
    }
}

static void model_path(const char *name, char *out, size_t cap) {
    const char *dir = getenv("QUARREL_MODELS_DIR");
    if (dir && *dir) snprintf(out, cap, "%s/%s", dir, name);
    else snprintf(out, cap, "%s/.cache/quarrel/models/%s", getenv("HOME") ? getenv("HOME") : "", name);
    if (access(out, R_OK) != 0) fail_msg("model missing: %s (set QUARREL_MODELS_DIR or run scripts/setup.sh)", out);
}

/* Both real models: structure facts, then a byte-identical round trip. */
static void test_roundtrip_models(void **state) {
    (void)state;
    struct {
        const char *file, *arch;
        uint64_t n_kv, n_tensors;
    } models[] = {
        {"SmolLM2-135M-Instruct.Q4_1.gguf", "llama", 33, 272},
        {"gemma-3-270m-q4_k_m.gguf", "gemma3", 33, 236},
    };
    for (int i = 0; i < 2; i++) {
        char path[1024], err[512] = "";
        model_path(models[i].file, path, sizeof path);
        qr_gguf *g = NULL;
        if (qr_gguf_open(path, &g, err, sizeof err)) fail_msg("%s", err);
        qr_gguf_str arch;
        assert_true(qr_gguf_get_str(g, "general.architecture", &arch));
        assert_true(qr_gguf_str_eq(arch, models[i].arch));
        assert_int_equal(g->n_kv, models[i].n_kv);
        assert_int_equal(g->n_tensors, models[i].n_tensors);
        const qr_gguf_value *tokens = qr_gguf_get_arr(g, "tokenizer.ggml.tokens", QR_GGUF_STRING);
        assert_non_null(tokens);
        assert_true(tokens->arr.count > 1000);
        qr_gguf_close(g);
        roundtrip_file(path);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_corpus),
        cmocka_unit_test(test_bad_corpus_complete),
        cmocka_unit_test(test_good_files_and_prefixes),
        cmocka_unit_test(test_all_types_file),
        cmocka_unit_test(test_writer_every_type),
        cmocka_unit_test(test_getters),
        cmocka_unit_test(test_writer_errors),
        cmocka_unit_test(test_roundtrip_small),
        cmocka_unit_test(test_roundtrip_models),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
