"""API keys: `quarrel keys create|list|rotate|revoke`, Bearer and X-API-Key auth, 401s, per-key
token-bucket rate limits -> 429 with Retry-After."""
import json
import subprocess

import openai
import pytest
import requests

from conftest import MODEL_NAME


def keys(binary, db, *args):
    r = subprocess.run([binary, "keys", *args, "--db", db, "--json"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout) if r.stdout.strip().startswith(("{", "[")) else r.stdout


def test_keys_auth_rotate_revoke(quarrel_bin, smollm, make_server, tmp_path):
    db = str(tmp_path / "keys.db")
    k1 = keys(quarrel_bin, db, "create", "--name", "alice")
    k2 = keys(quarrel_bin, db, "create", "--name", "bob")
    assert k1["key"].startswith("qr-") and k1["id"] != k2["id"]
    listed = keys(quarrel_bin, db, "list")
    assert [k["name"] for k in listed] == ["alice", "bob"] and not any(k["revoked"] for k in listed)
    raw = open(db, "rb").read()
    assert k1["key"].encode() not in raw  # only hashes are stored
    s = make_server([smollm], ["--api-key-db", db])
    u = s.url + "/v1/models"
    r = requests.get(u, timeout=5)
    assert r.status_code == 401 and r.json()["error"]["code"] == "UNAUTHORIZED"
    assert requests.get(u, headers={"Authorization": "Bearer qr-000000000000-" + "0" * 40}, timeout=5).status_code == 401
    assert requests.get(u, headers={"Authorization": "Bearer " + k1["key"]}, timeout=5).status_code == 200
    assert requests.get(u, headers={"X-API-Key": k2["key"]}, timeout=5).status_code == 200
    h = requests.get(s.url + "/healthz", timeout=5)
    assert h.status_code == 200 and h.json() == {"status": "ok", "auth": True}  # public, says a key is needed
    c = openai.OpenAI(base_url=s.url + "/v1", api_key=k1["key"], max_retries=0)
    assert c.completions.create(model=MODEL_NAME, prompt="Hi", max_tokens=2).usage.completion_tokens == 2
    bad = openai.OpenAI(base_url=s.url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    # rotate: the old key stops working, the new one works
    rot = keys(quarrel_bin, db, "rotate", k1["id"])
    assert rot["key"] != k1["key"]
    assert requests.get(u, headers={"Authorization": "Bearer " + k1["key"]}, timeout=5).status_code == 401
    assert requests.get(u, headers={"Authorization": "Bearer " + rot["key"]}, timeout=5).status_code == 200
    # revoke
    subprocess.run([quarrel_bin, "keys", "revoke", k2["id"], "--db", db], check=True, capture_output=True)
    assert requests.get(u, headers={"X-API-Key": k2["key"]}, timeout=5).status_code == 401
    assert [k["revoked"] for k in keys(quarrel_bin, db, "list")] == [False, True]
    # ws without a key: an error message, then the connection closes
    from websockets.sync.client import connect
    with connect(s.url.replace("http", "ws") + "/ws") as ws:
        m = json.loads(ws.recv(timeout=10))
        assert m["type"] == "error" and m["payload"]["code"] == "UNAUTHORIZED"
    with connect(s.url.replace("http", "ws") + "/ws", additional_headers={"X-API-Key": rot["key"]}) as ws:
        ws.send(json.dumps({"type": "status"}))
        assert json.loads(ws.recv(timeout=10))["type"] == "status"


def test_rate_limit(quarrel_bin, smollm, make_server, tmp_path):
    db = str(tmp_path / "keys.db")
    k = keys(quarrel_bin, db, "create", "--name", "slow", "--rpm", "2")
    free = keys(quarrel_bin, db, "create", "--name", "free")
    s = make_server([smollm], ["--api-key-db", db])
    h = {"Authorization": "Bearer " + k["key"]}
    codes = [requests.get(s.url + "/v1/models", headers=h, timeout=5).status_code for _ in range(3)]
    assert codes == [200, 200, 429]
    r = requests.get(s.url + "/v1/models", headers=h, timeout=5)
    assert r.status_code == 429 and r.json()["error"]["code"] == "RATE_LIMITED"
    assert 1 <= int(r.headers["Retry-After"]) <= 30
    # buckets are per key
    assert requests.get(s.url + "/v1/models", headers={"X-API-Key": free["key"]}, timeout=5).status_code == 200


def test_token_rate_limit(smollm, make_server):
    s = make_server([smollm], ["--rate-tpm", "30"])
    body = {"model": MODEL_NAME, "prompt": "Hello there, how are you today?", "max_tokens": 30, "temperature": 0,
            "ignore_eos": True}
    assert requests.post(s.url + "/v1/completions", json=body, timeout=60).status_code == 200
    r = requests.post(s.url + "/v1/completions", json=body, timeout=60)
    assert r.status_code == 429 and int(r.headers["Retry-After"]) >= 1


def test_responses_and_messages_auth_and_limits(quarrel_bin, smollm, make_server, tmp_path):
    """/v1/responses and /v1/messages go through the same key check and per-key limits as every route: the
    anthropic client's x-api-key header works, refusals come in each API's shape, and a stored response is
    visible to the key that made it only."""
    import anthropic

    db = str(tmp_path / "keys.db")
    k = keys(quarrel_bin, db, "create", "--name", "limited", "--rpm", "3")
    other = keys(quarrel_bin, db, "create", "--name", "other")
    s = make_server([smollm], ["--api-key-db", db])
    msg = [{"role": "user", "content": "Hi"}]
    with pytest.raises(anthropic.AuthenticationError) as e:
        anthropic.Anthropic(base_url=s.url, api_key="wrong", max_retries=0).messages.create(
            model=MODEL_NAME, max_tokens=2, messages=msg)
    assert e.value.body["type"] == "error" and e.value.body["error"]["type"] == "authentication_error"
    assert requests.post(s.url + "/v1/responses", json={"input": "x"}, timeout=5).status_code == 401
    a = anthropic.Anthropic(base_url=s.url, api_key=k["key"], max_retries=0)  # sends x-api-key
    assert a.messages.create(model=MODEL_NAME, max_tokens=2, messages=msg).usage.output_tokens <= 2  # 1
    o = openai.OpenAI(base_url=s.url + "/v1", api_key=k["key"], max_retries=0)
    r = o.responses.create(model=MODEL_NAME, input="Hi", max_output_tokens=2)  # 2
    assert requests.get(s.url + "/v1/responses/" + r.id, headers={"X-API-Key": other["key"]}, timeout=5).status_code == 404
    assert o.responses.retrieve(r.id).id == r.id  # 3
    with pytest.raises(anthropic.RateLimitError) as e:
        a.messages.count_tokens(model=MODEL_NAME, messages=msg)
    assert e.value.body["error"]["type"] == "rate_limit_error" and int(e.value.response.headers["Retry-After"]) >= 1
    with pytest.raises(openai.RateLimitError):
        o.responses.create(model=MODEL_NAME, input="Hi", max_output_tokens=2)
    # the other key has its own bucket
    assert requests.post(s.url + "/v1/messages/count_tokens", json={"messages": msg}, headers={"x-api-key": other["key"]},
                         timeout=10).status_code == 200
