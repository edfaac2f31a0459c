"""Schemathesis hooks (SCHEMATHESIS_HOOKS=st_hooks): half of the generated requests name the real
model (from $QUARREL_ST_MODEL) so that the cases reach tokenization, the scheduler and the
response encoders instead of stopping at 404 MODEL_NOT_FOUND."""
import os
import zlib

import schemathesis

MODEL = os.environ.get("QUARREL_ST_MODEL", "")


def _pick(value):
    return MODEL and zlib.crc32(repr(value).encode()) % 2 == 0


@schemathesis.hook
def map_body(ctx, body):
    if isinstance(body, dict) and isinstance(body.get("model"), str) and _pick(body):
        body["model"] = MODEL
    return body


@schemathesis.hook
def map_path_parameters(ctx, params):
    if isinstance(params, dict) and "name" in params and _pick(params):
        params["name"] = MODEL
    return params
