/* generate.c — a complete program on libquarrel's public API (quarrel.h): load a GGUF model, wrap a
 * prompt in the model's chat template, tokenize it, and generate a reply with a sampler chain, printing
 * each piece of text as it comes.
 *
 *   cc -std=c17 generate.c $(pkg-config --cflags --libs quarrel) -o generate
 *   ./generate MODEL.gguf "Write a haiku about the sea." [N_PREDICT [TEMPERATURE [SEED]]]
 *
 * TEMPERATURE 0 (the default) samples greedily: the reply is then the one `quarrel run -m MODEL --chat
 * -p PROMPT -n N_PREDICT --temp 0` prints. */
#include <quarrel.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* qr_token_callback: prints the text that became safe to show; returning false would stop. */
static bool print_piece(qr_token token, const char *text, size_t len, void *user_data) {
    (void)token;
    (void)user_data;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return true;
}

/* Tokenizes text into *ids (malloc'd, *n of them): qr_tokenize says how many tokens there are, so a
 * first call with no room asks for the count and a second one fills the array. */
static qr_status tokenize_all(const qr_tokenizer *tok, const char *text, qr_token **ids, size_t *n) {
    qr_status st = qr_tokenize(tok, text, strlen(text), true, true, NULL, 0, n);
    if (st != QR_OK) return st;
    if (!(*ids = malloc((*n ? *n : 1) * sizeof **ids))) return QR_ERR_NOMEM;
    return qr_tokenize(tok, text, strlen(text), true, true, *ids, *n, n);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL.gguf PROMPT [N_PREDICT [TEMPERATURE [SEED]]]\n", argv[0]);
        return 2;
    }
    if (qr_version_number() != QUARREL_VERSION_NUMBER)
        fprintf(stderr, "note: quarrel.h %s, libquarrel %s\n", QUARREL_VERSION_STRING, qr_version());
    char err[1024] = "";
    int rc = 1;
    qr_model *model = NULL;
    qr_tokenizer *tok = NULL;
    qr_context *ctx = NULL;
    qr_sampler_chain *smp = NULL;
    char *prompt = NULL;
    qr_token *ids = NULL;

    /* 1. the model (CUDA when this build has it and a GPU can hold the model, else the CPU) and its tokenizer */
    if (qr_model_load(argv[1], NULL, &model, err, sizeof err) != QR_OK) goto fail;
    if (qr_tokenizer_from_model(model, &tok, err, sizeof err) != QR_OK) goto fail;

    /* 2. a context: a KV cache of 2048 tokens for one sequence */
    qr_context_params cp = qr_context_default_params();
    cp.n_ctx = 2048;
    if (qr_context_create(model, &cp, &ctx, err, sizeof err) != QR_OK) goto fail;

    /* 3. the prompt: one user message in the model's chat template, then tokens (the template's text
     *    spells special tokens such as <|im_start|>, hence parse_special) */
    const qr_chat_message msgs[] = {{.role = "user", .content = argv[2]}};
    if (qr_chat_apply_template(model, tok, msgs, 1, true, &prompt, NULL, err, sizeof err) != QR_OK) goto fail;
    size_t n_ids = 0;
    qr_status st = tokenize_all(tok, prompt, &ids, &n_ids);
    if (st != QR_OK) {
        snprintf(err, sizeof err, "tokenize: %s", qr_status_str(st));
        goto fail;
    }

    /* 4. the sampler chain: llama.cpp's defaults, greedy unless a temperature is given */
    qr_sampler_chain_params sp = qr_sampler_chain_default_params();
    sp.temperature = argc > 4 ? strtof(argv[4], NULL) : 0.0f;
    if (argc > 5) sp.seed = strtoull(argv[5], NULL, 10);
    if (qr_sampler_chain_create(qr_model_n_vocab(model), &sp, &smp, err, sizeof err) != QR_OK) goto fail;

    /* 5. generate: prefill, then sample / print / decode until an end-of-generation token or N_PREDICT */
    qr_generate_params gp = qr_generate_default_params();
    gp.n_predict = argc > 3 ? atoi(argv[3]) : 128;
    qr_generate_result res;
    if (qr_generate(ctx, tok, smp, ids, n_ids, &gp, print_piece, NULL, &res, err, sizeof err) != QR_OK) goto fail;
    printf("\n");
    fprintf(stderr, "%d prompt tokens, %d generated (%.1f tokens/s), ended by %s\n", res.n_prompt, res.n_generated,
            res.decode_seconds > 0 ? res.n_generated / res.decode_seconds : 0.0,
            res.end == QR_GENERATE_EOG ? "end of generation" : res.end == QR_GENERATE_LENGTH ? "N_PREDICT" : "context");
    rc = 0;
fail:
    if (rc) fprintf(stderr, "generate: %s\n", err);
    free(ids);
    free(prompt);
    qr_sampler_chain_free(smp);
    qr_context_free(ctx);
    qr_tokenizer_free(tok);
    qr_model_free(model);
    return rc;
}
