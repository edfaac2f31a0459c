"""Configuration sources (flags > QUARREL_* environment > config file) and the SIGTERM drain."""
import threading
import time

import requests

from conftest import MODEL_NAME, Server


def test_env_and_config_file(quarrel_bin, smollm, tmp_path):
    cfg = tmp_path / "serve.conf"
    cfg.write_text(f"# test\nmodel = {smollm}\nmax_body = 1000\nparallel = 2\n")
    s = Server(quarrel_bin, [], ["--config", str(cfg)], env={"QUARREL_MAX_JSON_DEPTH": "3"})
    try:
        r = requests.post(s.url + "/v1/completions", data=b"x" * 2000, timeout=10)
        assert r.status_code == 413  # from the file
        r = requests.post(s.url + "/v1/completions", json={"model": MODEL_NAME, "prompt": [[[[1]]]]}, timeout=10)
        assert r.status_code == 400 and "nesting" in r.text  # from the environment
        info = requests.get(s.url + "/api/models/" + MODEL_NAME, timeout=10).json()
        assert info["scheduler"]["slots"] == 2
    finally:
        s.stop()
    # a flag beats the environment
    s = Server(quarrel_bin, [smollm], ["--max-body", "100000"], env={"QUARREL_MAX_BODY": "100"})
    try:
        assert requests.post(s.url + "/v1/completions", data=b"x" * 2000, timeout=10).status_code == 400
    finally:
        s.stop()


def test_sigterm_drains(quarrel_bin, smollm):
    s = Server(quarrel_bin, [smollm], ["--drain", "300"])
    out = {}

    def worker():
        out["r"] = requests.post(s.url + "/v1/completions", json={"model": MODEL_NAME, "prompt": "Once upon a time",
                                                                  "max_tokens": 40, "temperature": 0,
                                                                  "ignore_eos": True}, timeout=120)

    t = threading.Thread(target=worker)
    t.start()
    time.sleep(0.5)
    s.proc.terminate()
    t.join()
    assert out["r"].status_code == 200 and out["r"].json()["usage"]["completion_tokens"] == 40
    assert s.proc.wait(timeout=60) == 0
    assert any(l.get("msg") == "drained" and l.get("unfinished") == 0 for l in s.log_lines())
    s.stop()
