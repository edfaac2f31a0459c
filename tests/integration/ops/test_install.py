"""`cmake --install` into a temporary prefix: the binary, libquarrel (.so and .a), quarrel.h, quarrel.pc and
the man page land there; a small C program builds against the installed library with
`pkg-config --cflags --libs quarrel` (shared, and static with --static), runs, and loads the model;
`man` renders quarrel(1)."""
import os
import pathlib
import shutil
import subprocess

from ops_helpers import find_tool, libdir, pkg_config

PROGRAM = r"""
#include <quarrel.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    printf("quarrel %s\n", qr_version());
    if (argc < 2) return 0;
    char err[512];
    qr_model_params mp = qr_model_default_params();
    mp.n_threads = 2;
    mp.backend = QR_BACKEND_CPU;
    qr_model *model = NULL;
    if (qr_model_load(argv[1], &mp, &model, err, sizeof err) != QR_OK) {
        fprintf(stderr, "load: %s\n", err);
        return 1;
    }
    char desc[256];
    qr_model_desc(model, desc, sizeof desc);
    printf("model %s\n", desc);
    qr_context_params cp = qr_context_default_params();
    cp.n_ctx = 64;
    qr_context *ctx = NULL;
    if (qr_context_create(model, &cp, &ctx, err, sizeof err) != QR_OK) {
        fprintf(stderr, "context: %s\n", err);
        qr_model_free(model);
        return 1;
    }
    const qr_token prompt[] = {1, 504, 3136, 314};
    qr_batch batch = {.n_tokens = 4, .token = prompt};
    if (qr_decode(ctx, &batch, err, sizeof err) != QR_OK) {
        fprintf(stderr, "decode: %s\n", err);
        return 1;
    }
    const float *logits = qr_get_logits(ctx, -1);
    int best = 0;
    for (int i = 1; i < qr_model_n_vocab(model); i++)
        if (logits[i] > logits[best]) best = i;
    printf("next %d\n", best);
    qr_context_free(ctx);
    qr_model_free(model);
    return 0;
}
"""


def test_install_layout(prefix, quarrel_bin):
    lib = libdir(prefix)
    assert os.access(prefix / "bin" / "quarrel", os.X_OK)
    assert (lib / "libquarrel.a").is_file()
    sos = sorted(x.name for x in lib.glob("libquarrel.so*"))
    assert "libquarrel.so" in sos and any(n.startswith("libquarrel.so.0") for n in sos), sos
    assert (prefix / "include" / "quarrel.h").is_file()
    assert (prefix / "share" / "man" / "man1" / "quarrel.1").is_file()
    v = subprocess.run([str(prefix / "bin" / "quarrel"), "--version"], capture_output=True, text=True, check=True)
    assert v.stdout == subprocess.run([quarrel_bin, "--version"], capture_output=True, text=True).stdout


def compile_program(prefix, out, flags):
    src = out.with_suffix(".c")
    src.write_text(PROGRAM)
    cc = shutil.which("cc") or shutil.which("gcc")
    r = subprocess.run([cc, "-std=c17", "-Wall", "-Wextra", "-Werror", str(src), "-o", str(out), *flags],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"{' '.join(flags)}\n{r.stderr}"


def test_pkg_config_points_into_the_prefix(prefix):
    assert pkg_config(prefix, "--modversion") == [
        subprocess.run(["grep", "-m1", "^Version:", str(libdir(prefix) / "pkgconfig" / "quarrel.pc")],
                       capture_output=True, text=True).stdout.split()[1]]
    cflags = pkg_config(prefix, "--cflags")
    assert any(os.path.realpath(f[2:]) == os.path.realpath(prefix / "include") for f in cflags if f.startswith("-I")), cflags
    libs = pkg_config(prefix, "--libs")
    assert "-lquarrel" in libs
    assert any(os.path.realpath(f[2:]) == os.path.realpath(libdir(prefix)) for f in libs if f.startswith("-L")), libs


def test_program_against_shared_library(prefix, smollm, tmp_path):
    exe = tmp_path / "hello_shared"
    compile_program(prefix, exe, pkg_config(prefix, "--cflags", "--libs"))
    env = dict(os.environ, LD_LIBRARY_PATH=str(libdir(prefix)))
    ldd = subprocess.run(["ldd", str(exe)], env=env, capture_output=True, text=True).stdout
    assert str(libdir(prefix)) in ldd, ldd  # the installed libquarrel.so, not a build tree's
    r = subprocess.run([str(exe), smollm], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "quarrel " + pkg_config(prefix, "--modversion")[0]
    assert lines[1].startswith("model llama:") and lines[2].startswith("next ")


def test_program_against_static_library(prefix, smollm, tmp_path):
    """--static: libquarrel.a plus the Requires.private / Libs.private of quarrel.pc link a program
    that needs no libquarrel.so."""
    exe = tmp_path / "hello_static"
    flags = pkg_config(prefix, "--cflags") + [str(libdir(prefix) / "libquarrel.a")]
    flags += [f for f in pkg_config(prefix, "--static", "--libs") if f != "-lquarrel"]
    compile_program(prefix, exe, flags)
    ldd = subprocess.run(["ldd", str(exe)], capture_output=True, text=True).stdout
    assert "libquarrel" not in ldd, ldd
    r = subprocess.run([str(exe), smollm], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    shared = tmp_path / "hello_shared2"
    compile_program(prefix, shared, pkg_config(prefix, "--cflags", "--libs"))
    r2 = subprocess.run([str(shared), smollm], env=dict(os.environ, LD_LIBRARY_PATH=str(libdir(prefix))),
                        capture_output=True, text=True, timeout=120)
    assert r.stdout == r2.stdout  # same library, same greedy next token


def test_man_page_renders(prefix, quarrel_bin):
    man = find_tool("man", "apt-get install man-db (scripts/setup.sh)")
    page = prefix / "share" / "man" / "man1" / "quarrel.1"
    env = dict(os.environ, MANPAGER="cat", PAGER="cat", MANWIDTH="100", LC_ALL="C.UTF-8")
    r = subprocess.run([man, "-l", str(page)], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip() == "", r.stderr
    text = r.stdout
    assert text.startswith("QUARREL(1)")
    for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "COMMANDS", "OPTIONS", "ENVIRONMENT", "SEE ALSO"):
        assert f"\n{section}\n" in text, section
    # every command of `quarrel --help` and every serve option is on the page
    top = subprocess.run([quarrel_bin, "--help"], capture_output=True, text=True).stdout
    cmds = [ln.split()[0] for ln in top.split("commands:\n")[1].split("\n\n")[0].splitlines()]
    for c in cmds:
        assert c in text, c
    serve = subprocess.run([quarrel_bin, "serve", "--help"], capture_output=True, text=True).stdout
    for opt in [ln.split()[0] for ln in serve.splitlines() if ln.startswith("  --")]:
        assert opt in text, opt
    assert "QUARREL_API_KEY_DB" in text and "QUARREL_MAX_QUEUE" in text
    # `man quarrel` finds it through the prefix's MANPATH; groff reports no warnings
    r = subprocess.run([man, "quarrel"], env=dict(env, MANPATH=str(prefix / "share" / "man")), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("QUARREL(1)"), r.stderr
    groff = shutil.which("groff")
    if groff:
        r = subprocess.run([groff, "-man", "-Tutf8", "-ww", "-z", str(page)], capture_output=True, text=True)
        assert r.returncode == 0 and r.stderr == "", r.stderr


def test_man_page_is_current(prefix, quarrel_bin, tmp_path):
    """The installed page is what tools/gen_manpage.py makes from this binary's help now."""
    root = pathlib.Path(__file__).resolve().parents[3]
    out = tmp_path / "quarrel.1"
    env = dict(os.environ, SOURCE_DATE_EPOCH="0")
    subprocess.run(["python3", str(root / "tools" / "gen_manpage.py"), "--binary", quarrel_bin, "-o", str(out)],
                   env=env, check=True)
    strip = lambda t: "\n".join(ln for ln in t.splitlines() if not ln.startswith(".TH "))  # noqa: E731
    assert strip(out.read_text()) == strip((prefix / "share" / "man" / "man1" / "quarrel.1").read_text())
