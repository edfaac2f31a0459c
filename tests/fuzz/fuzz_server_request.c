/* fuzz_server_request.c — libFuzzer target: request bodies of every API through the server's
 * parser (src/server/reqparse.c): depth check, JSON parse, field validation. The first input byte
 * picks the API (and the depth limit); the rest is the body. Also runs the UTF-8 validator and the
 * duration parser on the raw bytes. Nothing may crash, leak or trip UBSan. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "server/reqparse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const srv_api api = (srv_api)(data[0] % 5);
    const int depth = 2 + (data[0] >> 3) % 64;
    const char *body = (const char *)data + 1;
    const size_t len = size - 1;
    srv_gen_req r;
    char err[512];
    (void)srv_gen_req_parse(body, len, api, depth, &r, err, sizeof err);
    srv_gen_req_free(&r);
    (void)srv_utf8_valid(body, len);
    json_t *s = json_stringn_nocheck(body, len);
    double secs;
    (void)srv_parse_duration(s, &secs);
    json_decref(s);
    return 0;
}
