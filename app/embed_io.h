/* embed_io.h — what `quarrel embed`, `push` and `search` (cmd_embed.c, cmd_push.c) share: the text
 * list of a JSON-lines file or -p, and opening a model + context sized for embeddings. */
#ifndef QR_APP_EMBED_IO_H
#define QR_APP_EMBED_IO_H

#include <stdbool.h>
#include <stdint.h>

#include "engine.h"

/* Texts with their ids and metadata. Ids: the line's "id" (an integer in [0, 2^32)) when present,
 * else its 1-based line number, so re-running a file gives the same ids. */
typedef struct embed_texts {
    int64_t n;
    char **text;      /* [n] owned, NUL-terminated */
    int64_t *id;      /* [n] */
    char **metadata;  /* [n] owned compact JSON of the line's "metadata", or NULL */
} embed_texts;

/* Reads a JSON-lines file: each non-blank line is an object with a string "text" (and optional "id",
 * "metadata"), or a bare JSON string. Prints "CMD: FILE:LINE: ..." and returns 1 on a missing file,
 * a malformed line, or no texts at all; 0 on success. */
int embed_texts_read(const char *cmd, const char *path, embed_texts *out);
/* One text (id 1) from -p. */
int embed_texts_one(const char *text, embed_texts *out);
void embed_texts_free(embed_texts *t);

/* Opens MODEL for embeddings: n_batch rows per pass, up to n_seq texts per pass, a KV cache that
 * holds a full pass. Prints errors; returns an exit code. */
int embed_engine_open(app_engine *e, const char *model, int32_t n_threads, int32_t n_batch, int32_t n_seq);

/* Parses --pooling NAME (model, none, mean, cls, last); -2 on a bad name. */
int embed_parse_pooling(const char *s);

#endif /* QR_APP_EMBED_IO_H */
