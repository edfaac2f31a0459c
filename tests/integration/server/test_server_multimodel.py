"""Several models: two loaded at start, one loaded on demand (hot swap) and unloaded by
keep_alive = 0, and a 503 when a model does not fit the memory budget."""
import time

import ollama
import requests

from conftest import MODEL_NAME


def test_two_models_hot_swap_keep_alive(make_server, smollm, gemma):
    s = make_server([smollm], ["--parallel", "2", "--ctx", "2048"])
    c = ollama.Client(host=s.url)
    assert [m.model for m in c.ps().models] == [MODEL_NAME]
    # gemma is not loaded: naming its path loads it (hot swap)
    r = c.generate(model=gemma, prompt="Hello", options={"temperature": 0, "num_predict": 3}, keep_alive=0)
    assert r.eval_count == 3
    # keep_alive 0: unloaded as soon as it is idle
    deadline = time.time() + 10
    while len(c.ps().models) != 1 and time.time() < deadline:
        time.sleep(0.1)
    assert [m.model for m in c.ps().models] == [MODEL_NAME]
    # loaded again, kept this time; both answer
    r = c.generate(model=gemma, prompt="Hello", options={"temperature": 0, "num_predict": 3}, keep_alive="5m")
    assert r.eval_count == 3
    names = sorted(m.model for m in c.ps().models)
    assert len(names) == 2 and MODEL_NAME in names
    assert c.generate(model=MODEL_NAME, prompt="Hi", options={"num_predict": 2}).eval_count == 2
    info = requests.get(s.url + "/api/models", timeout=10).json()["models"]
    assert {m["architecture"] for m in info} == {"llama", "gemma3"}


def test_memory_budget(make_server, smollm, gemma):
    s = make_server([smollm], ["--parallel", "1", "--ctx", "1024", "--mem-budget-mb", "150"])
    r = requests.post(s.url + "/api/generate", json={"model": gemma, "prompt": "x", "options": {"num_predict": 1}},
                      timeout=60)
    assert r.status_code == 503 and r.json()["error"]["code"] == "OVERLOADED"
    assert "budget" in r.json()["error"]["message"]
    r = requests.post(s.url + "/api/generate", json={"model": "/no/such/model.gguf", "prompt": "x"}, timeout=10)
    assert r.status_code == 404 and r.json()["error"]["code"] == "MODEL_NOT_FOUND"


def test_no_load(make_server, smollm, gemma):
    s = make_server([smollm], ["--no-load"])
    r = requests.post(s.url + "/api/generate", json={"model": gemma, "prompt": "x"}, timeout=10)
    assert r.status_code == 404
