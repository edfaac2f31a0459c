/* cmd_keys.c — `quarrel keys create|list|rotate|revoke --db PATH`: the server's API key store. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "commands.h"
#include "internal.h" /* the server's API key store */

static void usage(FILE *f) {
    fprintf(f, "usage: quarrel keys create --db PATH [--name NAME] [--rpm N] [--tpm N]\n"
               "       quarrel keys list   --db PATH [--json]\n"
               "       quarrel keys rotate --db PATH ID\n"
               "       quarrel keys revoke --db PATH ID\n"
               "The store keeps SHA-256 hashes only: a key is printed once, by create and rotate.\n"
               "--db defaults to $QUARREL_API_KEY_DB. --rpm / --tpm set per-key rate limits (requests / tokens\n"
               "per minute; 0 = the server's --rate-rpm / --rate-tpm).\n");
}

typedef struct list_ctx {
    bool json;
    int n;
} list_ctx;

static void print_key(void *arg, const srv_key_info *k) {
    list_ctx *lc = arg;
    char created[32];
    time_t t = (time_t)k->created;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", &tm);
    if (lc->json)
        printf("%s{\"id\":\"%s\",\"name\":\"%s\",\"created\":\"%s\",\"revoked\":%s,\"rpm\":%g,\"tpm\":%g}", lc->n ? "," : "",
               k->id, k->name, created, k->revoked ? "true" : "false", k->rpm, k->tpm);
    else
        printf("%-14s %-8s %-22s rpm=%-6g tpm=%-8g %s\n", k->id, k->revoked ? "revoked" : "active", created, k->rpm,
               k->tpm, k->name);
    lc->n++;
}

int cmd_keys(int argc, char **argv) {
    static const struct option lo[] = {{"db", 1, 0, 'd'}, {"name", 1, 0, 'n'}, {"rpm", 1, 0, 'r'},
                                       {"tpm", 1, 0, 't'}, {"json", 0, 0, 'j'}, {"help", 0, 0, 'h'},
                                       {0, 0, 0, 0}};
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *sub = argv[1];
    if (!strcmp(sub, "-h") || !strcmp(sub, "--help")) {
        usage(stdout);
        return 0;
    }
    const char *db = getenv("QUARREL_API_KEY_DB"), *name = "";
    double rpm = 0, tpm = 0;
    bool json = false;
    int c;
    optind = 2;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (c) {
        case 'd': db = optarg; break;
        case 'n': name = optarg; break;
        case 'r': rpm = atof(optarg); break;
        case 't': tpm = atof(optarg); break;
        case 'j': json = true; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!db || !*db) {
        fprintf(stderr, "quarrel keys: need --db PATH\n");
        return 2;
    }
    if (rpm < 0 || tpm < 0) {
        fprintf(stderr, "quarrel keys: --rpm/--tpm must be >= 0\n");
        return 2;
    }
    const bool create = !strcmp(sub, "create");
    if (!create && strcmp(sub, "list") && strcmp(sub, "rotate") && strcmp(sub, "revoke")) {
        fprintf(stderr, "quarrel keys: unknown subcommand '%s'\n", sub);
        usage(stderr);
        return 2;
    }
    const bool need_id = !strcmp(sub, "rotate") || !strcmp(sub, "revoke");
    if (need_id != (optind == argc - 1) || (!need_id && optind != argc)) {
        fprintf(stderr, "quarrel keys %s: %s\n", sub, need_id ? "need exactly one key ID" : "unexpected argument");
        return 2;
    }
    char err[1024];
    srv_keys *k = srv_keys_open(db, create, err, sizeof err);
    if (!k) {
        fprintf(stderr, "quarrel keys: %s\n", err);
        return 1;
    }
    int rc = 0;
    char key[SRV_KEY_LEN];
    if (create) {
        srv_key_info ki;
        if (srv_keys_create(k, name, rpm, tpm, key, &ki, err, sizeof err) < 0) rc = 1;
        else if (json) printf("{\"id\":\"%s\",\"key\":\"%s\",\"name\":\"%s\"}\n", ki.id, key, ki.name);
        else printf("id:  %s\nkey: %s\n(the key is shown only now; the store keeps its SHA-256)\n", ki.id, key);
    } else if (!strcmp(sub, "list")) {
        list_ctx lc = {.json = json};
        if (json) printf("[");
        if (srv_keys_list(k, print_key, &lc) < 0) {
            snprintf(err, sizeof err, "cannot read the key store");
            rc = 1;
        }
        if (json) printf("]\n");
    } else if (!strcmp(sub, "rotate")) {
        if (srv_keys_rotate(k, argv[optind], key, err, sizeof err) < 0) rc = 1;
        else if (json) printf("{\"id\":\"%s\",\"key\":\"%s\"}\n", argv[optind], key);
        else printf("id:  %s\nkey: %s\n(the old key no longer works)\n", argv[optind], key);
    } else {
        if (srv_keys_revoke(k, argv[optind], err, sizeof err) < 0) rc = 1;
        else printf("revoked %s\n", argv[optind]);
    }
    if (rc) fprintf(stderr, "quarrel keys: %s\n", err);
    srv_keys_close(k);
    return rc;
}
