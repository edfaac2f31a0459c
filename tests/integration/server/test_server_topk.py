"""Top-k rows (issue 29): a step whose rows all sample greedily or with a small top-k brings back each row's best
candidates (the backend's topk_rows; the CPU backend has the same op as the GPU's) instead of its logits. The tokens
must be those of the full rows: the same requests with QUARREL_SAMPLE_TOPK=0 (every row's logits scanned on the
host) give the same text, for greedy, seeded top-k / top-p / min-p sampling, and requests that need the whole row
(no top-k, logprobs, penalties, a grammar) mixed into the same steps."""
import concurrent.futures
import re

import requests

N = 24
REQUESTS = [
    {"prompt": "The three primary colors are", "temperature": 0},
    {"prompt": "Once upon a time", "temperature": 0.9, "top_k": 40, "top_p": 0.9, "seed": 11},
    {"prompt": "A list of fruits:", "temperature": 1.2, "top_k": 5, "min_p": 0.1, "seed": 12},
    {"prompt": "def fibonacci(n):", "temperature": 0.7, "top_k": 63, "seed": 13},
    {"prompt": "The capital of France", "temperature": 1.0, "top_k": 0, "top_p": 0.95, "seed": 14},  # whole row
    {"prompt": "Count: one, two,", "temperature": 0, "logprobs": 2},  # whole row
    {"prompt": "Colors again:", "temperature": 0, "frequency_penalty": 0.5},  # whole row once there is a history
    {"prompt": "Answer yes or no:", "temperature": 0, "response_format": {"type": "json_object"}},  # grammar
]


def run_all(srv, parallel):
    def one(body):
        r = requests.post(srv.url + "/v1/completions", json=dict(body, max_tokens=N), timeout=120)
        assert r.status_code == 200, r.text
        ch = r.json()["choices"][0]
        return ch["text"], ch.get("logprobs")

    if not parallel:
        return [one(b) for b in REQUESTS]
    with concurrent.futures.ThreadPoolExecutor(len(REQUESTS)) as ex:
        return list(ex.map(one, REQUESTS))


def test_topk_rows_same_tokens(make_server, smollm):
    # one sequence: every request's passes are the same with and without top-k rows, so the logits are too
    on = make_server([smollm], ["--parallel", "1"], env={"QUARREL_HOST_PROF": "1"})
    off = make_server([smollm], ["--parallel", "1"], env={"QUARREL_SAMPLE_TOPK": "0"})
    a, b = run_all(on, False), run_all(off, False)
    assert a == b
    assert all(text for text, _ in a)
    # several sequences at once (top-k rows in steps shared with rows that need their logits): each sequence's
    # tokens are drawn from its own candidates, so the greedy ones equal the one-sequence run wherever the batched
    # logits pick the same argmax; here only check the requests finish and the server stays healthy
    many = make_server([smollm], ["--parallel", "8"], env={"QUARREL_HOST_PROF": "1"})
    for _ in range(2):
        for text, _ in run_all(many, True):
            assert text
    assert requests.get(many.url + "/readyz", timeout=10).status_code == 200


def test_topk_rows_profile(make_server, smollm):
    """The steps of greedy requests ask for top-k rows (the scheduler's host profile counts them)."""
    srv = make_server([smollm], ["--parallel", "2"], env={"QUARREL_HOST_PROF": "1"})
    for _ in range(6):
        r = requests.post(srv.url + "/v1/completions", json={"prompt": "Hello", "max_tokens": 48, "temperature": 0},
                          timeout=120)
        assert r.status_code == 200
    logs = srv.logs()
    m = re.findall(r"(\d+) steps of [\d.]+ rows .*; (\d+) steps asked for top-k rows", logs)
    assert m, logs[-2000:]
    steps, topk = map(int, m[-1])
    assert steps == 256 and topk >= 250  # every decode step of greedy requests (a prompt pass has no history)


def test_topk_rows_tensor_parallel(make_server, smollm):
    """With CPU ranks (--tp 3) each rank finds its vocabulary columns' candidates and the context merges them; a row
    that needs its logits reads every rank's columns. The texts equal those of the full rows."""
    on = make_server([smollm], ["--parallel", "1", "--backend", "cpu", "--tp", "3"], env={"QUARREL_HOST_PROF": "1"})
    off = make_server([smollm], ["--parallel", "1", "--backend", "cpu", "--tp", "3"], env={"QUARREL_SAMPLE_TOPK": "0"})
    a, b = run_all(on, False), run_all(off, False)
    assert a == b
    assert all(text for text, _ in a)
