"""The real `ollama` client against `quarrel serve`: generate, chat, embed, list, show, ps, version;
NDJSON streaming with Ollama's final timing fields."""
import json

import ollama
import pytest
import requests

from conftest import MODEL_NAME


@pytest.fixture(scope="module")
def client(server):
    return ollama.Client(host=server.url, timeout=120)


def test_generate(client):
    r = client.generate(model=MODEL_NAME, prompt="Why is the sky blue?", options={"temperature": 0, "num_predict": 8})
    assert r.done and r.done_reason == "length"
    assert r.response
    assert r.eval_count == 8 and r.prompt_eval_count > 5
    assert r.total_duration >= r.eval_duration > 0 and r.prompt_eval_duration > 0
    assert r.context and len(r.context) == r.prompt_eval_count + r.eval_count
    parts = list(client.generate(model=MODEL_NAME, prompt="Why is the sky blue?", stream=True,
                                 options={"temperature": 0, "num_predict": 8}))
    assert parts[-1].done and not any(p.done for p in parts[:-1])
    assert "".join(p.response for p in parts) == r.response
    assert parts[-1].eval_count == 8


def test_chat(client):
    msgs = [{"role": "user", "content": "What is 2+2?"}]
    r = client.chat(model=MODEL_NAME, messages=msgs, options={"temperature": 0, "num_predict": 10})
    assert r.message.role == "assistant" and r.message.content
    parts = list(client.chat(model=MODEL_NAME, messages=msgs, stream=True, options={"temperature": 0, "num_predict": 10}))
    assert "".join(p.message.content for p in parts) == r.message.content
    assert parts[-1].done and parts[-1].eval_count == r.eval_count


def test_list_show_ps_version(client, server):
    names = [m.model for m in client.list().models]
    assert MODEL_NAME in names
    info = client.show(MODEL_NAME)
    assert info.details.family == "llama" and info.details.quantization_level == "Q4_1"
    assert info.modelinfo["general.architecture"] == "llama"
    assert "im_start" in info.template
    ps = client.ps()
    assert any(m.model == MODEL_NAME for m in ps.models)
    assert requests.get(server.url + "/api/version", timeout=5).json()["version"]


def test_embed(client):
    r = client.embed(model=MODEL_NAME, input=["a cat", "a dog"])
    assert len(r.embeddings) == 2 and len(r.embeddings[0]) == 576
    legacy = client.embeddings(model=MODEL_NAME, prompt="a cat")
    assert len(legacy.embedding) == 576


def test_embed_truncate(client, server):
    """Ollama's `truncate`: by default a text over the embedding context is cut (as the first 2048
    tokens), with false it is refused with 400 (issue 35: never silent, never a 500)."""
    long = "word " * 3000
    r = client.embed(model=MODEL_NAME, input=long)
    assert len(r.embeddings[0]) == 576
    with pytest.raises(ollama.ResponseError) as e:
        client.embed(model=MODEL_NAME, input=long, truncate=False)
    assert e.value.status_code == 400 and "truncation off" in str(e.value)
    assert len(client.embed(model=MODEL_NAME, input="short text", truncate=False).embeddings) == 1
    r = requests.post(server.url + "/v1/embeddings", json={"model": MODEL_NAME, "input": long, "truncate": False},
                      timeout=60)
    assert r.status_code == 400 and "truncation off" in r.text
    r = requests.post(server.url + "/api/embed", json={"model": MODEL_NAME, "input": "x", "truncate": "no"}, timeout=60)
    assert r.status_code == 400 and "truncate" in r.text


def test_raw_ndjson_final_fields(server):
    r = requests.post(server.url + "/api/generate", json={"model": MODEL_NAME, "prompt": "Hi", "options": {
        "temperature": 0, "num_predict": 3}}, stream=True, timeout=60)
    assert r.headers["Content-Type"].startswith("application/x-ndjson")
    lines = [json.loads(l) for l in r.iter_lines() if l]
    final = lines[-1]
    for k in ("total_duration", "load_duration", "prompt_eval_count", "prompt_eval_duration", "eval_count",
              "eval_duration", "context", "done_reason", "created_at", "model"):
        assert k in final, k
    assert final["done"] is True and all(l["done"] is False for l in lines[:-1])


def test_unknown_model(client):
    with pytest.raises(ollama.ResponseError) as e:
        client.generate(model="nope:latest", prompt="x")
    assert e.value.status_code == 404
