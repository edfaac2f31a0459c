"""The real `openai` client against `quarrel serve`: chat and completions, streaming and not,
usage, logprobs, stop, seed, n = 1, embeddings, and JSON errors."""
import openai
import pytest
import requests

from conftest import MODEL_NAME


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def test_models(client):
    ids = [m.id for m in client.models.list().data]
    assert MODEL_NAME in ids


def test_chat_non_stream(client):
    r = client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "Say hello."}],
                                       max_tokens=8, temperature=0)
    assert r.object == "chat.completion"
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.completion_tokens == 8 or r.choices[0].finish_reason == "stop"
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert r.usage.prompt_tokens > 5


def test_chat_stream_equals_non_stream(client):
    msgs = [{"role": "user", "content": "Name three colors."}]
    full = client.chat.completions.create(model=MODEL_NAME, messages=msgs, max_tokens=12, temperature=0)
    chunks = list(client.chat.completions.create(model=MODEL_NAME, messages=msgs, max_tokens=12, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full.choices[0].message.content
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0].choices[0].finish_reason == full.choices[0].finish_reason
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == full.usage.completion_tokens
    assert chunks[0].choices[0].delta.role == "assistant"


def test_completions_logprobs_and_stream(client):
    r = client.completions.create(model=MODEL_NAME, prompt="The capital of France is", max_tokens=6, temperature=0,
                                  logprobs=3)
    assert r.object == "text_completion"
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == 6 and len(lp.token_logprobs) == 6
    assert all(x <= 0 for x in lp.token_logprobs)
    # greedy: the chosen token is the most likely alternative
    for tok, top in zip(lp.tokens, lp.top_logprobs):
        assert max(top, key=top.get) == tok
    assert "".join(lp.tokens) == r.choices[0].text
    s = "".join(c.choices[0].text for c in client.completions.create(
        model=MODEL_NAME, prompt="The capital of France is", max_tokens=6, temperature=0, stream=True))
    assert s == r.choices[0].text


def test_chat_logprobs(client):
    r = client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "Hi"}], max_tokens=4,
                                       temperature=0, logprobs=True, top_logprobs=2)
    content = r.choices[0].logprobs.content
    assert len(content) == 4
    for c in content:
        assert len(c.top_logprobs) == 2
        assert c.top_logprobs[0].token == c.token and c.top_logprobs[0].logprob >= c.top_logprobs[1].logprob


def test_stop_strings(client):
    base = client.completions.create(model=MODEL_NAME, prompt="1, 2, 3, 4,", max_tokens=12, temperature=0)
    text = base.choices[0].text
    assert " 6" in text
    r = client.completions.create(model=MODEL_NAME, prompt="1, 2, 3, 4,", max_tokens=12, temperature=0, stop=[" 6"])
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].text == text[:text.index(" 6")]


def test_seed_reproducible(client):
    kw = dict(model=MODEL_NAME, prompt="Once upon a time", max_tokens=16, temperature=1.0, seed=1234)
    a = client.completions.create(**kw).choices[0].text
    b = client.completions.create(**kw).choices[0].text
    c = client.completions.create(**{**kw, "seed": 99}).choices[0].text
    assert a == b
    assert a != c


def test_embeddings(client):
    r = client.embeddings.create(model=MODEL_NAME, input=["hello world", "goodbye"])
    assert len(r.data) == 2 and r.data[1].index == 1
    v = r.data[0].embedding
    assert len(v) == 576
    assert abs(sum(x * x for x in v) - 1.0) < 1e-3  # normalized
    assert r.usage.prompt_tokens > 0


def test_errors(client, server):
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "x"}])
    assert e.value.body["code"] == "MODEL_NOT_FOUND"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "x"}], n=2)
    assert e.value.body["code"] == "INVALID_REQUEST"
    r = requests.post(server.url + "/v1/chat/completions", data=b"{not json", timeout=10)
    assert r.status_code == 400 and r.json()["error"]["code"] == "INVALID_REQUEST"
    r = requests.post(server.url + "/v1/chat/completions", json={"model": MODEL_NAME, "messages": "hi"}, timeout=10)
    assert r.status_code == 400 and "messages" in r.json()["error"]["message"]
    r = requests.post(server.url + "/v1/completions", json={"model": MODEL_NAME, "prompt": "x", "temperature": "hot"},
                      timeout=10)
    assert r.status_code == 400 and "temperature" in r.json()["error"]["message"]
