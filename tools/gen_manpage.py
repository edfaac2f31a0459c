#!/usr/bin/env python3
"""Generates the man page quarrel(1) from the CLI's own help texts.

    tools/gen_manpage.py --binary build/quarrel -o build/quarrel.1

`quarrel --help` gives the command list (NAME, SYNOPSIS, COMMANDS); `quarrel CMD --help` gives each
command's options, copied verbatim into a preformatted block of its own subsection. The ENVIRONMENT
section lists the QUARREL_* variables that `quarrel serve` reads (one per `--option` of its help). The
date is $SOURCE_DATE_EPOCH's (reproducible builds), else today's. Standard library only (CMake runs it at
build time; `cmake --install` installs the page into share/man/man1).
"""
import argparse
import datetime
import os
import re
import subprocess
import sys


def run_help(binary, *args):
    # no model directory, no Ollama store: the --help texts list the models found there, which the man page
    # (the same on every machine) leaves out
    env = dict(os.environ, QUARREL_MODELS_DIR="/nonexistent/quarrel-manpage", OLLAMA_MODELS="/nonexistent/quarrel-manpage")
    r = subprocess.run([binary, *args, "--help"], capture_output=True, text=True, timeout=60, env=env)
    if r.returncode != 0:
        raise SystemExit(f"gen_manpage: `{binary} {' '.join(args)} --help` exited {r.returncode}: {r.stderr}")
    return r.stdout


def esc(text):
    """Text -> roff: backslashes escaped, '-' as a real minus, no control character at a line start."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    out = []
    for line in text.split("\n"):
        if line.startswith((".", "'")):
            line = "\\&" + line
        out.append(line)
    return "\n".join(out)


def parse_commands(top):
    """(name, summary) pairs from the `commands:` block of `quarrel --help`."""
    cmds, inside = [], False
    for line in top.splitlines():
        if line.strip() == "commands:":
            inside = True
            continue
        if inside:
            m = re.match(r"^  (\S+)\s+(.*)$", line)
            if not m:
                if cmds:
                    break
                continue
            cmds.append((m.group(1), m.group(2).strip()))
    if not cmds:
        raise SystemExit("gen_manpage: no commands found in `quarrel --help`")
    return cmds


def serve_env(serve_help):
    """(VARIABLE, option, help) for every `--option` line of `quarrel serve --help`."""
    out = []
    for line in serve_help.splitlines():
        m = re.match(r"^  --(\S+)\s+(.*)$", line)
        if m and m.group(1) != "config":
            out.append(("QUARREL_" + m.group(1).upper().replace("-", "_"), m.group(1), m.group(2).strip()))
    return out


def build_page(binary):
    top = run_help(binary)
    version = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True).stdout.split()[-1]
    first = top.splitlines()[0]
    tagline = first.split("—", 1)[1].strip() if "—" in first else "LLM inference for GGUF models"
    cmds = parse_commands(top)
    helps = {name: run_help(binary, name) for name, _ in cmds if name not in ("help", "version")}
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    day = datetime.datetime.fromtimestamp(int(epoch), datetime.timezone.utc) if epoch else datetime.datetime.now()
    L = []
    L.append(f'.TH QUARREL 1 "{day:%Y-%m-%d}" "quarrel {version}" "User Commands"')
    L.append(".SH NAME")
    L.append(f"quarrel \\- {esc(tagline)}")
    L.append(".SH SYNOPSIS")
    L.append(".B quarrel")
    L.append(".I command")
    L.append("[\\fIoptions\\fR]")
    L.append(".SH DESCRIPTION")
    L.append("Quarrel runs GGUF language and embedding models on x86 CPUs (AVX2/AVX\\-512 kernels chosen at run "
             "time) and NVIDIA GPUs (when the build has CUDA and a GPU is present). It is one binary: a CLI for "
             "generation, inspection and quantization, and an HTTP/WebSocket server with Ollama\\- and "
             "OpenAI\\-compatible APIs and Prometheus metrics.")
    L.append(".PP")
    L.append("This page is generated from the program's own \\fB\\-\\-help\\fR output "
             "(tools/gen_manpage.py); \\fBquarrel \\fIcommand\\fB \\-\\-help\\fR prints the same text.")
    L.append(".SH COMMANDS")
    for name, summary in cmds:
        L.append(".TP")
        L.append(f"\\fB{esc(name)}\\fR")
        L.append(esc(summary))
    L.append(".SH OPTIONS")
    for name, _ in cmds:
        if name not in helps:
            continue
        L.append(f".SS quarrel {esc(name)}")
        L.append(".nf")
        L.append(".ft CR")
        L.append(esc(helps[name].rstrip("\n")))
        L.append(".ft R")
        L.append(".fi")
    if "serve" in helps:
        L.append(".SH ENVIRONMENT")
        L.append("Every option of \\fBquarrel serve\\fR can also be given as an environment variable (flags win "
                 "over the environment, which wins over \\fB\\-\\-config\\fR \\fIFILE\\fR). Options without a value "
                 "are switched on by 1, true or yes.")
        for var, opt, text in serve_env(helps["serve"]):
            L.append(".TP")
            L.append(f"\\fB{esc(var)}\\fR")
            L.append(f"\\fB\\-\\-{esc(opt)}\\fR: {esc(text)}")
        L.append(".TP")
        L.append("\\fBOLLAMA_MODELS\\fR")
        L.append("the Ollama model store searched for Ollama names (default \\fI~/.ollama/models\\fR).")
        L.append(".TP")
        L.append("\\fBQUARREL_API_KEY_DB\\fR")
        L.append("also the default \\fB\\-\\-db\\fR of \\fBquarrel keys\\fR.")
    L.append(".SH EXIT STATUS")
    L.append("0 on success, 1 on a runtime error, 2 on a usage error. \\fBquarrel serve\\fR exits 0 after "
             "draining on SIGTERM or SIGINT.")
    L.append(".SH FILES")
    L.append(".TP")
    L.append("\\fI~/.cache/quarrel/models\\fR")
    L.append("where scripts/setup.sh puts the default models.")
    L.append(".SH SEE ALSO")
    L.append("docs/api.md (HTTP API), docs/operations.md (deployment, metrics, tuning), docs/models.md "
             "(architectures and quant types), in the source tree; \\fB/openapi.yaml\\fR on a running server.")
    return "\n".join(L) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", required=True, help="the quarrel executable")
    ap.add_argument("-o", "--output", help="output file (default: stdout)")
    a = ap.parse_args()
    page = build_page(a.binary)
    if a.output:
        tmp = a.output + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(page)
        os.replace(tmp, a.output)
    else:
        sys.stdout.write(page)


if __name__ == "__main__":
    main()
