/* quarrel.c — CLI entry: dispatches `quarrel SUBCOMMAND ...` to app/cmd_*.c. */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "quarrel.h"

typedef struct command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"run", cmd_run, "generate text from a prompt, streamed to stdout"},
    {"chat", cmd_chat, "interactive chat with the model's chat template"},
    {"list", cmd_list, "the models of the model directory and the Ollama store (names, size, type, arch)"},
    {"logits", cmd_logits, "teacher-forced logits of a text or id list, as .npy"},
    {"perplexity", cmd_perplexity, "perplexity of a text file (llama.cpp's method)"},
    {"bench", cmd_bench, "prefill and decode speed, llama-bench style"},
    {"inspect", cmd_inspect, "show a GGUF file's metadata and tensors (--json for machine-readable)"},
    {"synth", cmd_synth, "write a deterministic random-weight model (real shapes, working tokenizer)"},
    {"quantize", cmd_quantize, "convert a GGUF model to another type (llama-quantize's mixes)"},
    {"tokenize", cmd_tokenize, "text -> token ids with a model's tokenizer (as llama.cpp tokenizes)"},
    {"detokenize", cmd_detokenize, "token ids -> text"},
    {"serve", cmd_serve, "HTTP/WebSocket server: Ollama + OpenAI APIs, continuous batching"},
    {"worker", cmd_worker, "one rank of a model split over several processes or hosts (--tp-addr)"},
    {"keys", cmd_keys, "create, list, rotate and revoke the server's API keys"},
    {"template", cmd_template, "render a chat template (as transformers' apply_chat_template does)"},
    {"embed", cmd_embed, "embeddings of texts (bert, nomic-bert, pooled decoders) as .npy or JSON lines"},
    {"push", cmd_push, "embed a JSON-lines file and stream it to a Longbow (Arrow Flight) dataset"},
    {"search", cmd_search, "embed a query and search a Longbow dataset for its nearest neighbours"},
};

static void print_help(FILE *f) {
    fprintf(f, "quarrel %s — LLM inference for GGUF models\n\nusage: quarrel <command> [options]\n\ncommands:\n",
            qr_version());
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "  %-12s %s\n  %-12s %s\n\nRun `quarrel <command> --help` for a command's options.\n", "help",
            "show this help", "version", "print the version");
    app_print_model_names(f);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        print_help(stderr);
        return 2;
    }
    const char *name = argv[1];
    if (!strcmp(name, "help") || !strcmp(name, "--help") || !strcmp(name, "-h")) {
        print_help(stdout);
        return 0;
    }
    if (!strcmp(name, "version") || !strcmp(name, "--version")) {
        printf("quarrel %s\n", qr_version());
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(name, commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "quarrel: unknown command '%s'\n\n", name);
    print_help(stderr);
    return 2;
}
