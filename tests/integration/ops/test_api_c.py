"""The public C API as a program sees it (issue 33 item 2), on a tree installed with `cmake --install`:

- docs/api-c.md shows docs/examples/generate.c verbatim;
- the example builds with `cc $(pkg-config --cflags --libs quarrel)` against the installed library (no
  header or library of the source tree), runs on SmolLM2 and generates text: greedy, its reply is byte for
  byte what `quarrel run --chat --temp 0` prints for the same prompt, and sampled with a seed (the sampler
  chain's defaults), what `quarrel run --temp 0.8 --seed S` prints;
- the installed libquarrel.so exports exactly the QR_API functions of the installed quarrel.h.
"""
import os
import re
import shutil
import subprocess

import pytest

from ops_helpers import ROOT, libdir, pkg_config

EXAMPLE = ROOT / "docs" / "examples" / "generate.c"
API_C_MD = ROOT / "docs" / "api-c.md"
PROMPT = "Write a haiku about the sea."
N_PREDICT = "48"


def test_api_c_md_shows_the_example_verbatim():
    text = API_C_MD.read_text()
    m = re.search(r"<!-- docs/examples/generate\.c, verbatim -->\n```c\n(.*?)```\n", text, re.S)
    assert m, "docs/api-c.md has no ```c block after the marker <!-- docs/examples/generate.c, verbatim -->"
    assert m.group(1) == EXAMPLE.read_text(), "docs/api-c.md and docs/examples/generate.c differ"


@pytest.fixture(scope="module")
def example(prefix, tmp_path_factory):
    """docs/examples/generate.c built against the installed tree with pkg-config."""
    out = tmp_path_factory.mktemp("api_c") / "generate"
    cc = shutil.which("cc") or shutil.which("gcc")
    flags = pkg_config(prefix, "--cflags", "--libs")
    assert not any(str(ROOT) in f for f in flags), flags  # the installed tree only, not the sources
    r = subprocess.run([cc, "-std=c17", "-Wall", "-Wextra", "-Werror", str(EXAMPLE), "-o", str(out), *flags],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"{' '.join(flags)}\n{r.stderr}"
    return out


def run_example(prefix, exe, model, *args):
    env = dict(os.environ, LD_LIBRARY_PATH=str(libdir(prefix)))
    ldd = subprocess.run(["ldd", str(exe)], env=env, capture_output=True, text=True).stdout
    assert str(libdir(prefix)) in ldd, ldd  # the installed libquarrel.so
    r = subprocess.run([str(exe), model, PROMPT, N_PREDICT, *args], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    return r


def quarrel_run(quarrel_bin, model, *args):
    r = subprocess.run([quarrel_bin, "run", "-m", model, "-p", PROMPT, "-n", N_PREDICT, "-q", *args],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_example_generates_what_quarrel_run_generates(prefix, example, smollm, quarrel_bin):
    r = run_example(prefix, example, smollm)
    assert len(r.stdout.strip()) > 10, r.stdout  # real text, not an empty reply
    assert re.search(r"\d+ prompt tokens, \d+ generated", r.stderr), r.stderr
    assert r.stdout == quarrel_run(quarrel_bin, smollm, "--chat", "--temp", "0")


def test_example_samples_as_quarrel_run_samples(prefix, example, smollm, quarrel_bin):
    """A temperature and a seed: the sampler chain's defaults (top-k 40, top-p 0.95, min-p 0.05) are the
    CLI's, so the same seed draws the same reply; another seed draws another one."""
    a = run_example(prefix, example, smollm, "0.8", "7").stdout
    assert a.strip() and a == quarrel_run(quarrel_bin, smollm, "--chat", "--temp", "0.8", "--seed", "7")
    assert a != run_example(prefix, example, smollm, "0.8", "8").stdout


def test_installed_library_exports_exactly_the_header(prefix):
    lib = libdir(prefix) / "libquarrel.so"
    header = prefix / "include" / "quarrel.h"
    r = subprocess.run(["sh", str(ROOT / "tests" / "unit" / "check_public_exports.sh"), str(header), str(lib)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not list(libdir(prefix).glob("libquarrel_dev*")), "libquarrel_dev.so is internal: never installed"
