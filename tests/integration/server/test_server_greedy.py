"""Acceptance 3: greedy output through every API equals `quarrel run` greedy output for the same
prompt (plain prompts against `quarrel run -p`, chat prompts against `quarrel run --chat -p`)."""
import json

import ollama
import openai
import pytest
import requests
from websockets.sync.client import connect

from conftest import MODEL_NAME, run_greedy

N = 24
PLAIN = "The three primary colors are"
CHAT = "Write a haiku about the sea."


@pytest.fixture(scope="module")
def ref(quarrel_bin, smollm):
    return {"plain": run_greedy(quarrel_bin, smollm, PLAIN, N), "chat": run_greedy(quarrel_bin, smollm, CHAT, N, chat=True)}


def test_openai(server, ref):
    c = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0)
    r = c.completions.create(model=MODEL_NAME, prompt=PLAIN, max_tokens=N, temperature=0)
    assert r.choices[0].text == ref["plain"]
    r = c.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": CHAT}], max_tokens=N,
                                  temperature=0)
    assert r.choices[0].message.content == ref["chat"]
    s = "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": CHAT}], max_tokens=N, temperature=0, stream=True))
    assert s == ref["chat"]


def test_ollama(server, ref):
    c = ollama.Client(host=server.url)
    opts = {"temperature": 0, "num_predict": N}
    assert c.generate(model=MODEL_NAME, prompt=CHAT, options=opts).response == ref["chat"]  # templated
    assert c.generate(model=MODEL_NAME, prompt=PLAIN, raw=True, options=opts).response == ref["plain"]
    assert c.chat(model=MODEL_NAME, messages=[{"role": "user", "content": CHAT}], options=opts).message.content == ref["chat"]


def test_api_stream(server, ref):
    r = requests.post(server.url + "/api/stream", json={"model": MODEL_NAME, "prompt": PLAIN, "max_tokens": N,
                                                        "temperature": 0}, stream=True, timeout=60)
    events = [json.loads(l[6:]) for l in r.iter_lines() if l.startswith(b"data: {")]
    assert events[-1]["complete"] is True
    assert "".join(e["token"] for e in events) == ref["plain"]


def test_ws(server, ref):
    with connect(server.url.replace("http", "ws") + "/ws") as ws:
        ws.send(json.dumps({"type": "inference", "payload": {"model": MODEL_NAME, "messages": [
            {"role": "user", "content": CHAT}], "max_tokens": N, "temperature": 0}}))
        text = ""
        while True:
            m = json.loads(ws.recv(timeout=60))
            assert m["type"] == "inference"
            text += m["payload"]["token"]
            if m["payload"]["complete"]:
                break
    assert text == ref["chat"]
