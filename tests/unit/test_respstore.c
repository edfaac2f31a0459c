/* test_respstore.c — the bounded store of /v1/responses objects: per-key ownership, delete, least recently
 * used eviction by count and by bytes, expiry after the TTL, copies (callers cannot change what is kept). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "server/respstore.h"

static json_t *resp(int i) { return json_pack("{s:i, s:s}", "n", i, "object", "response"); }

static void put(srv_resp_store *s, const char *id, const char *owner, int i) {
    json_t *r = resp(i), *h = json_pack("[{s:s, s:s}]", "role", "user", "content", "hi");
    assert_int_equal(srv_resp_store_put(s, id, owner, r, h), 0);
    json_decref(r);
    json_decref(h);
}

static int n_of(srv_resp_store *s, const char *id, const char *owner) {
    json_t *r = NULL, *h = NULL;
    if (srv_resp_store_get(s, id, owner, &r, &h) < 0) {
        assert_null(r);
        assert_null(h);
        return -1;
    }
    assert_int_equal(json_array_size(h), 1);
    const int n = (int)json_integer_value(json_object_get(r, "n"));
    json_decref(r);
    json_decref(h);
    return n;
}

static void test_owner_and_delete(void **state) {
    (void)state;
    srv_resp_store *s = srv_resp_store_create(8, 1 << 20, 60);
    put(s, "resp_a", "key1", 1);
    put(s, "resp_b", "", 2);
    assert_int_equal(n_of(s, "resp_a", "key1"), 1);
    assert_int_equal(n_of(s, "resp_a", "key2"), -1); /* another key's */
    assert_int_equal(n_of(s, "resp_a", ""), -1);
    assert_int_equal(n_of(s, "resp_b", ""), 2);
    assert_int_equal(n_of(s, "resp_c", ""), -1);
    /* a copy comes back: changing it changes nothing kept */
    json_t *r = NULL;
    assert_int_equal(srv_resp_store_get(s, "resp_a", "key1", &r, NULL), 0);
    json_object_set_new(r, "n", json_integer(99));
    json_decref(r);
    assert_int_equal(n_of(s, "resp_a", "key1"), 1);
    assert_int_equal(srv_resp_store_delete(s, "resp_a", "key2"), -1);
    assert_int_equal(srv_resp_store_delete(s, "resp_a", "key1"), 0);
    assert_int_equal(srv_resp_store_delete(s, "resp_a", "key1"), -1);
    assert_int_equal(n_of(s, "resp_a", "key1"), -1);
    put(s, "resp_b", "", 3); /* the same id again replaces it */
    assert_int_equal(n_of(s, "resp_b", ""), 3);
    assert_int_equal(srv_resp_store_count(s), 1);
    srv_resp_store_free(s);
}

static void test_lru_by_count(void **state) {
    (void)state;
    srv_resp_store *s = srv_resp_store_create(3, 1 << 20, 60);
    put(s, "r1", "", 1);
    usleep(2000);
    put(s, "r2", "", 2);
    usleep(2000);
    put(s, "r3", "", 3);
    usleep(2000);
    assert_int_equal(n_of(s, "r1", ""), 1); /* r1 used: r2 is now the least recent */
    usleep(2000);
    put(s, "r4", "", 4);
    assert_int_equal(srv_resp_store_count(s), 3);
    assert_int_equal(n_of(s, "r2", ""), -1);
    assert_int_equal(n_of(s, "r1", ""), 1);
    assert_int_equal(n_of(s, "r3", ""), 3);
    assert_int_equal(n_of(s, "r4", ""), 4);
    srv_resp_store_free(s);
}

static void test_bytes_and_ttl(void **state) {
    (void)state;
    json_t *r = resp(0);
    const size_t one = json_dumpb(r, NULL, 0, JSON_COMPACT) + 40; /* about one entry (response + history) */
    json_decref(r);
    srv_resp_store *s = srv_resp_store_create(100, 2 * one, 60);
    put(s, "r1", "", 1);
    usleep(2000);
    put(s, "r2", "", 2);
    usleep(2000);
    put(s, "r3", "", 3); /* over the byte bound: the oldest goes */
    assert_int_equal(n_of(s, "r1", ""), -1);
    assert_int_equal(n_of(s, "r3", ""), 3);
    char text[1024];
    memset(text, 'x', sizeof text - 1);
    text[sizeof text - 1] = 0;
    json_t *big = json_pack("{s:s}", "text", text);
    assert_int_equal(srv_resp_store_put(s, "huge", "", big, NULL), -1); /* larger than the whole store */
    json_decref(big);
    srv_resp_store_free(s);
    s = srv_resp_store_create(10, 1 << 20, 0.05);
    put(s, "r1", "", 1);
    assert_int_equal(n_of(s, "r1", ""), 1);
    usleep(120 * 1000);
    assert_int_equal(n_of(s, "r1", ""), -1); /* expired */
    assert_int_equal(srv_resp_store_count(s), 0);
    srv_resp_store_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_owner_and_delete),
        cmocka_unit_test(test_lru_by_count),
        cmocka_unit_test(test_bytes_and_ttl),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
