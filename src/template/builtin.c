/* builtin.c — chat templates for GGUF files that carry none (tokenizer.chat_template absent): the prompt
 * formats of the model families, written as Jinja for our template engine. The choice follows the vocabulary: a
 * model whose tokens include Gemma's turn markers gets the Gemma format, one with ChatML's markers gets ChatML
 * (what llama.cpp's server falls back to as well). Formats are the families' published conventions. */
#include <string.h>

#include "template/template.h"

/* Gemma 2 / 3: turns "<start_of_turn>user|model\n...<end_of_turn>\n"; a system message is prepended to the first
 * user turn (Gemma has no system role); the assistant's role is "model"; other roles (tool) speak as the user. No
 * bos_token: the tokenizer adds BOS to a chat prompt (Gemma vocabularies set add_bos_token), and the published
 * template's own BOS would make two. */
static const char GEMMA[] =
    "{%- if messages and messages[0]['role'] == 'system' -%}"
    "{%- set first_prefix = messages[0]['content'] + '\\n\\n' -%}{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}{%- set first_prefix = '' -%}{%- set loop_messages = messages -%}{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else 'user' -%}"
    "{{ '<start_of_turn>' + role + '\\n' + (first_prefix if loop.first else '') }}"
    "{{ (message['content'] or '') | trim }}{{ '<end_of_turn>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}";

/* ChatML: "<|im_start|>role\ncontent<|im_end|>\n". */
static const char CHATML[] =
    "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') + '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}";

static const struct {
    const char *name, *src, *marker; /* marker: a token the vocabulary must have */
} BUILTIN[] = {
    {"gemma", GEMMA, "<start_of_turn>"},
    {"chatml", CHATML, "<|im_start|>"},
};

const char *qr_chat_template_builtin(const char *name) {
    for (size_t i = 0; name && i < sizeof BUILTIN / sizeof BUILTIN[0]; i++)
        if (!strcmp(BUILTIN[i].name, name)) return BUILTIN[i].src;
    return NULL;
}

const char *qr_chat_template_builtin_for(bool (*has_token)(const void *ctx, const char *text), const void *ctx,
                                         const char **name) {
    for (size_t i = 0; i < sizeof BUILTIN / sizeof BUILTIN[0]; i++)
        if (has_token(ctx, BUILTIN[i].marker)) {
            if (name) *name = BUILTIN[i].name;
            return BUILTIN[i].src;
        }
    return NULL;
}
