"""docs/api.md against /openapi.yaml and a live server.

- The route tables of docs/api.md and the paths of /openapi.yaml (as served by the binary) list the same
  (method, route) pairs, and every route has a curl example.
- Every curl example of docs/api.md runs (bash, the real curl) against `quarrel serve` on SmolLM2 with a
  key store, $QUARREL_URL and $QUARREL_KEY set as the docs say, and gets a 2xx status (the /ws
  handshake: 101, the success status /openapi.yaml documents for it).
"""
import json
import os
import re
import shutil
import subprocess
import tempfile

import pytest
import requests
import yaml

from ops_helpers import ROOT, Server

API_MD = ROOT / "docs" / "api.md"
METHODS = ("get", "post", "put", "delete", "patch")


# Sections whose tables list routes outside the API contract: the Web UI's static files (/, /app.js,
# /vendor/*) are served by the binary but are not API operations, so /openapi.yaml leaves them out.
NON_API_SECTIONS = {"Web UI"}


def doc_routes():
    """(METHOD, path) pairs from the first cell of the route tables (| `GET /a`, `POST /b` | ... |)."""
    out = set()
    section = ""
    for line in API_MD.read_text().splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
        if not line.startswith("| `") or section in NON_API_SECTIONS:
            continue
        first = line.split("|")[1]
        for m in re.finditer(r"`(GET|POST|PUT|DELETE|PATCH) (/[^`\s]*)`", first):
            out.add((m.group(1), m.group(2)))
    return out


def curl_examples():
    """Every fenced sh block of docs/api.md that runs curl: (first comment line or command, script)."""
    text = API_MD.read_text()
    out = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        if not re.search(r"^curl ", block, re.M):
            continue
        title = next((ln.lstrip("# ").strip() for ln in block.splitlines() if ln.startswith("#")), block.split("\n")[0])
        out.append((title, block))
    return out


def example_route(script):
    """(METHOD, path) that a curl example calls: the route its first comment names (`# METHOD /path ...`), which
    one of its URLs must call (an example may first make what it needs, e.g. a stored response's id), else its
    first URL."""
    cmd = " ".join(ln for ln in script.replace("\\\n", " ").splitlines() if not ln.startswith("#"))
    m = re.search(r'"\$QUARREL_URL(/[^"?\s]*)', cmd)
    assert m, f"example without \"$QUARREL_URL/...\": {cmd}"
    named = re.match(r"#\s*(GET|POST|PUT|DELETE|PATCH)\s+(/[^\s,:]*)", script)
    if named:
        urls = re.findall(r'"\$QUARREL_URL(/[^"?\s]*)', cmd)
        assert any(route_matches(named.group(2), u) for u in urls), f"no URL of {named.group(0)!r} in: {cmd}"
        return named.group(1), named.group(2)
    method = "POST" if re.search(r"\s(-d|--data\S*)\s", cmd) else "GET"
    x = re.search(r"\s-X\s+(\w+)", cmd)
    return (x.group(1).upper() if x else method), m.group(1)


def route_matches(template, path):
    return re.fullmatch(re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template)), path) is not None


@pytest.fixture(scope="module")
def keyed_server(quarrel_bin, smollm, tmp_path_factory):
    """SmolLM2 with a key store (auth on) and one key."""
    db = tmp_path_factory.mktemp("keys") / "keys.db"
    r = subprocess.run([quarrel_bin, "keys", "create", "--db", str(db), "--name", "docs", "--json"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    key = json.loads(r.stdout)["key"]
    s = Server(quarrel_bin, [smollm], ["--parallel", "2", "--ctx", "2048", "--api-key-db", str(db)])
    s.key = key
    yield s
    s.stop()


@pytest.fixture(scope="module")
def openapi(keyed_server):
    r = requests.get(keyed_server.url + "/openapi.yaml", timeout=10)
    assert r.status_code == 200
    doc = yaml.safe_load(r.text)
    assert doc == yaml.safe_load((ROOT / "src" / "server" / "openapi.yaml").read_text())
    return doc


def spec_routes(doc):
    return {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops if m in METHODS}


def test_docs_and_openapi_list_the_same_routes(openapi):
    spec, docs = spec_routes(openapi), doc_routes()
    assert len(spec) >= 20
    assert spec - docs == set(), f"in /openapi.yaml, missing from the route tables of docs/api.md: {sorted(spec - docs)}"
    assert docs - spec == set(), f"in docs/api.md, missing from /openapi.yaml: {sorted(docs - spec)}"


def test_every_route_has_a_curl_example(openapi):
    examples = [example_route(s) for _, s in curl_examples()]
    for method, path in sorted(spec_routes(openapi)):
        assert any(m == method and route_matches(path, p) for m, p in examples), f"no curl example for {method} {path}"
    for method, path in examples:  # and every example calls a documented route
        assert any(m == method and route_matches(t, path) for m, t in spec_routes(openapi)), (method, path)


def success_codes(doc, method, path):
    for template, ops in doc["paths"].items():
        if route_matches(template, path) and method.lower() in ops:
            return {int(c) for c in ops[method.lower()]["responses"] if c.startswith(("1", "2"))}
    raise AssertionError(f"{method} {path} not in /openapi.yaml")


EXAMPLES = curl_examples()


def test_there_are_examples():
    assert len(EXAMPLES) >= 23


@pytest.mark.parametrize("title,script", EXAMPLES, ids=[t.split(" (")[0] for t, _ in EXAMPLES])
def test_curl_example_runs(title, script, keyed_server, openapi):
    assert shutil.which("curl"), "curl not installed"
    method, path = example_route(script)
    with tempfile.TemporaryDirectory() as tmp:
        codes = os.path.join(tmp, "codes")
        # The docs' commands run unchanged; a wrapper function adds only the status capture.
        # (the body is also printed, for an example that reads an answer: ID=$(curl ... | python3 ...))
        prelude = ('curl() { local rc=0; command curl -w "%{http_code}\\n" -o "$QR_BODY" "$@" >>"$QR_CODES" || rc=$?; '
                   'if [ $rc -eq 28 ] && [ "$QR_ALLOW_TIMEOUT" = 1 ]; then rc=0; fi; cat "$QR_BODY" 2>/dev/null || true; '
                   'return $rc; }\n')
        env = dict(os.environ, QUARREL_URL=keyed_server.url, QUARREL_KEY=keyed_server.key, QR_CODES=codes,
                   QR_BODY=os.path.join(tmp, "body"), QR_ALLOW_TIMEOUT="1" if path == "/ws" else "0")
        r = subprocess.run(["bash", "-euo", "pipefail", "-c", prelude + script], env=env, capture_output=True,
                           text=True, timeout=180)
        body = open(os.path.join(tmp, "body"), errors="replace").read() if os.path.exists(os.path.join(tmp, "body")) else ""
        assert r.returncode == 0, f"{title}: exit {r.returncode}\n{r.stderr}\n{body[:2000]}"
        got = [int(c) for c in open(codes).read().split()]
    ok = success_codes(openapi, method, path)
    assert got and all(c in ok and (200 <= c < 300 or (path == "/ws" and c == 101)) for c in got), \
        f"{title}: status {got}, documented success {sorted(ok)}\n{body[:2000]}"
    if path != "/ws" and method == "POST" and "stream" not in script:
        assert body.strip().startswith(("{", "[")), body[:500]


def test_examples_need_the_key(keyed_server):
    """The server of these tests really checks keys: without one a protected route is 401."""
    r = requests.get(keyed_server.url + "/api/tags", timeout=10)
    assert r.status_code == 401
    r = requests.get(keyed_server.url + "/api/tags", headers={"Authorization": f"Bearer {keyed_server.key}"}, timeout=10)
    assert r.status_code == 200
