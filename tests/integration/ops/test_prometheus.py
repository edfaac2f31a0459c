"""A real Prometheus (Debian's `prometheus` server) scrapes a real `quarrel serve` on loopback.

The Prometheus configuration is deploy/prometheus/prometheus.yml, the file the compose stack runs, with
the target, the scrape interval (1 s) and the rule-file path rewritten. Requests go through the server;
Prometheus's HTTP API must then show the counters increased and the histograms with buckets. promtool
checks the /metrics text, and every PromQL expression of the Grafana dashboard and the alert rules is
evaluated by this Prometheus (so a typo in a query fails here, not on a user's screen).
"""
import json
import math
import re
import subprocess
import time

import pytest
import requests
import yaml

from ops_helpers import MOE_SSM_METRICS, MODEL_NAME, ROOT, Server, find_tool, free_port, metric_names

PROM_HOW = "apt-get install prometheus (scripts/setup.sh installs it)"
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "quarrel.json"


@pytest.fixture(scope="module")
def server(quarrel_bin, smollm):
    s = Server(quarrel_bin, [smollm], ["--parallel", "2", "--ctx", "2048"])
    yield s
    s.stop()


class Prometheus:
    def __init__(self, tmp, target):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cfg = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
        cfg["global"]["scrape_interval"] = "1s"
        cfg["global"]["evaluation_interval"] = "1s"
        cfg["rule_files"] = [str(ROOT / "deploy" / "prometheus" / p) for p in cfg["rule_files"]]
        jobs = {j["job_name"]: j for j in cfg["scrape_configs"]}
        jobs["quarrel"]["static_configs"] = [{"targets": [target]}]
        jobs["prometheus"]["static_configs"] = [{"targets": [f"127.0.0.1:{self.port}"]}]
        (tmp / "prometheus.yml").write_text(yaml.safe_dump(cfg))
        self.log = open(tmp / "prometheus.log", "w+")
        self.proc = subprocess.Popen(
            [find_tool("prometheus", PROM_HOW), f"--config.file={tmp / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}",
             "--storage.tsdb.retention.time=1h", "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT)
        end = time.time() + 60
        while time.time() < end:
            assert self.proc.poll() is None, self.logs()
            try:
                if requests.get(self.url + "/-/ready", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.1)
        raise RuntimeError("prometheus did not become ready:\n" + self.logs())

    def logs(self):
        self.log.seek(0)
        return self.log.read()

    def query(self, q):
        r = requests.get(self.url + "/api/v1/query", params={"query": q}, timeout=10)
        body = r.json()
        assert r.status_code == 200 and body["status"] == "success", (q, body)
        return body["data"]["result"]

    def value(self, q):
        res = self.query(q)
        return float(res[0]["value"][1]) if res else None

    def wait_for(self, q, pred, timeout=30):
        end = time.time() + timeout
        v = None
        while time.time() < end:
            v = self.value(q)
            if v is not None and pred(v):
                return v
            time.sleep(0.25)
        raise AssertionError(f"{q}: last value {v}")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture(scope="module")
def prom(server, tmp_path_factory):
    p = Prometheus(tmp_path_factory.mktemp("prometheus"), f"127.0.0.1:{server.port}")
    yield p
    p.stop()


def generate(server, n=6):
    r = requests.post(server.url + "/v1/completions", timeout=120,
                      json={"model": MODEL_NAME, "prompt": "The sea is", "max_tokens": n, "temperature": 0})
    assert r.status_code == 200, r.text
    r = requests.post(server.url + "/v1/chat/completions", timeout=120,
                      json={"model": MODEL_NAME, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": n})
    assert r.status_code == 200, r.text
    r = requests.post(server.url + "/api/generate", timeout=120,
                      json={"model": MODEL_NAME, "prompt": "One, two,", "stream": False, "options": {"num_predict": n}})
    assert r.status_code == 200, r.text


def test_promtool_check_metrics(server):
    generate(server, 4)
    requests.post(server.url + "/tokenize", data=b"{not json", timeout=10)  # an error series too
    text = requests.get(server.url + "/metrics", timeout=10).text
    promtool = find_tool("promtool", PROM_HOW)
    r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr + "\n" + text
    # every family has HELP and TYPE, histograms end with +Inf = _count
    for fam in ("quarrel_requests_total", "quarrel_time_to_first_token_seconds", "quarrel_errors_total"):
        assert f"# HELP {fam} " in text and f"# TYPE {fam} " in text, fam


def test_prometheus_scrapes_counters_and_histograms(server, prom):
    m = f'model="{MODEL_NAME}"'
    assert prom.wait_for('up{job="quarrel"}', lambda v: v == 1) == 1
    # the first scrape that sees the model; counters may already hold other tests' requests
    prom.wait_for("quarrel_models_loaded", lambda v: v == 1)
    before_req = prom.value(f'sum(quarrel_requests_total{{{m},endpoint="/v1/completions",code="200"}})') or 0.0
    before_gen = prom.value(f'sum(quarrel_tokens_total{{{m},kind="generated"}})') or 0.0
    before_ttft = prom.value(f'sum(quarrel_time_to_first_token_seconds_count{{{m}}})') or 0.0
    for _ in range(3):
        generate(server)
    local = server.metric("quarrel_requests_total", model=MODEL_NAME, endpoint="/v1/completions", code="200")
    assert local >= before_req + 3
    prom.wait_for(f'sum(quarrel_requests_total{{{m},endpoint="/v1/completions",code="200"}})', lambda v: v >= before_req + 3)
    # generations may stop early at an end token: the server's own counters say how many tokens came
    local_gen = server.metric("quarrel_tokens_total", model=MODEL_NAME, kind="generated")
    local_ttft = server.metric("quarrel_time_to_first_token_seconds_count", model=MODEL_NAME)
    assert local_gen >= before_gen + 3 and local_ttft >= before_ttft + 3
    prom.wait_for(f'sum(quarrel_tokens_total{{{m},kind="generated"}})', lambda v: v >= local_gen)
    prom.wait_for(f'sum(quarrel_tokens_total{{{m},kind="prompt"}})', lambda v: v > 0)
    prom.wait_for(f'sum(quarrel_time_to_first_token_seconds_count{{{m}}})', lambda v: v >= local_ttft)
    # histograms: a series per bucket bound, cumulative, ending in +Inf == _count
    buckets = prom.query(f'quarrel_time_to_first_token_seconds_bucket{{{m}}}')
    les = {b["metric"]["le"]: float(b["value"][1]) for b in buckets}
    assert len(les) >= 5 and "+Inf" in les, les
    bounds = sorted((float(k), v) for k, v in les.items())
    assert all(a[1] <= b[1] for a, b in zip(bounds, bounds[1:])), bounds
    count = prom.value(f'quarrel_time_to_first_token_seconds_count{{{m}}}')
    assert les["+Inf"] == count
    dur = prom.query('quarrel_request_duration_seconds_bucket{endpoint="/v1/chat/completions"}')
    assert len(dur) >= 5 and any(b["metric"]["le"] == "+Inf" for b in dur)
    # PromQL over the histogram gives a finite latency
    prom.wait_for(f'rate(quarrel_time_to_first_token_seconds_count{{{m}}}[30s])', lambda v: v > 0)
    q = prom.value(f'histogram_quantile(0.5, sum by (le) (rate(quarrel_time_to_first_token_seconds_bucket{{{m}}}[30s])))')
    assert q is not None and 0 < q < 120, q
    # gauges arrive too
    assert prom.value(f'quarrel_kv_blocks_free{{{m}}}') > 0
    assert prom.value(f'quarrel_queue_depth{{{m}}}') is not None


def grafana_expr(expr):
    return expr.replace("$__rate_interval", "1m").replace("$model", ".*").replace("$instance", ".*")


def test_dashboard_and_alert_queries_evaluate(server, prom):
    """Every panel query and alert expression is valid PromQL to this Prometheus; every quarrel_* family
    they read is scraped from the server, except the issue-9 MoE/SSM names (exported only for models with
    experts or Mamba2 layers; this server runs the dense SmolLM2)."""
    prom.wait_for('up{job="quarrel"}', lambda v: v == 1)
    names = set(requests.get(prom.url + "/api/v1/label/__name__/values", timeout=10).json()["data"])
    d = json.loads(DASHBOARD.read_text())
    exprs = [(p["title"], t["expr"]) for p in d["panels"] if p["type"] != "row" for t in p["targets"]]
    for v in d["templating"]["list"]:  # variables: label_values(METRIC, LABEL) must list something
        if v["type"] == "query":
            metric, label = re.fullmatch(r"label_values\((\w+), (\w+)\)", v["definition"]).groups()
            assert prom.query(f"count by ({label}) ({metric})"), v["definition"]
    rules = yaml.safe_load((ROOT / "deploy" / "prometheus" / "alerts.yml").read_text())
    exprs += [(r["alert"], r["expr"]) for g in rules["groups"] for r in g["rules"]]
    assert len(exprs) > 30
    not_exported = set()
    for title, expr in exprs:
        prom.query(grafana_expr(expr))  # asserts status success
        for fam in metric_names(expr):
            scraped = fam in names or any(n in names for n in (fam + "_bucket", fam + "_count"))
            if not scraped:
                assert fam in MOE_SSM_METRICS, (title, fam)
                not_exported.add(fam)
    # the Prometheus rule manager loaded deploy/prometheus/alerts.yml
    groups = requests.get(prom.url + "/api/v1/rules", timeout=10).json()["data"]["groups"]
    assert {r["name"] for g in groups for r in g["rules"]} >= {"QuarrelDown", "QuarrelHighErrorRate"}
    # the panels that read served metrics show data now
    tok = prom.value('sum(rate(quarrel_tokens_total{kind="generated"}[1m]))')
    assert tok is not None and not math.isnan(tok)
