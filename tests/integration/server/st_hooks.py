"""Schemathesis hooks (SCHEMATHESIS_HOOKS=st_hooks): half of the generated requests name the real
model (from $QUARREL_ST_MODEL) so that the cases reach tokenization, the scheduler and the
response encoders instead of stopping at 404 MODEL_NOT_FOUND; token ids at or past the model's
vocabulary ($QUARREL_ST_VOCAB, which the schema cannot know) are folded into it (negative ids, which
the schema forbids, are left for the negative cases); a tool that tool_choice names (/v1/responses,
/v1/messages) is added to `tools` when missing (the schema cannot tie the two fields)."""
import os
import re
import zlib

import schemathesis

MODEL = os.environ.get("QUARREL_ST_MODEL", "")
VOCAB = int(os.environ.get("QUARREL_ST_VOCAB", "0"))


def _fold(t):
    """t folded into the vocabulary when it is an integral number at or past it, else t."""
    if isinstance(t, bool) or not isinstance(t, (int, float)) or t != t or t in (float("inf"), float("-inf")):
        return t
    return int(t) % VOCAB if t >= VOCAB and t == int(t) else t


def _fold_ids(ids):
    if VOCAB and isinstance(ids, list):
        for i, t in enumerate(ids):
            ids[i] = _fold(t)


def _fold_bias(bias):
    if VOCAB and isinstance(bias, dict):
        for k in [k for k in bias if k.isdigit() and k.isascii() and int(k) >= VOCAB]:
            bias[str(int(k) % VOCAB)] = bias.pop(k)


def _add_named_tool(body):
    """tool_choice {type: function | tool, name} must name one of tools: add the tool when it is missing."""
    tc, tools = body.get("tool_choice"), body.get("tools")
    if not isinstance(tc, dict) or not isinstance(tc.get("name"), str) or tc.get("type") not in ("function", "tool"):
        return
    name = tc["name"]
    if not re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", name) or not (tools is None or isinstance(tools, list)):
        return
    tools = body["tools"] = tools or []
    if not any(isinstance(t, dict) and t.get("name") == name for t in tools):
        tools.append({"type": "function", "name": name} if tc["type"] == "function"
                     else {"name": name, "input_schema": {"type": "object"}})


def _pick(value):
    return MODEL and zlib.crc32(repr(value).encode()) % 2 == 0


@schemathesis.hook
def map_body(ctx, body):
    if isinstance(body, dict) and isinstance(body.get("model"), str) and _pick(body):
        body["model"] = MODEL
    if isinstance(body, dict):
        _fold_ids(body.get("tokens"))  # /detokenize
        _fold_ids(body.get("prompt"))  # /v1/completions: a prompt of token ids
        _fold_bias(body.get("logit_bias"))  # OpenAI: token id -> bias
        _add_named_tool(body)
    return body


@schemathesis.hook
def map_path_parameters(ctx, params):
    if isinstance(params, dict) and "name" in params and _pick(params):
        params["name"] = MODEL
    return params
