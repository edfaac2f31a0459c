"""`quarrel chat` driven through tmux, as a person at a terminal uses it (a real pty: Ctrl-C is a SIGINT from
the terminal driver): Ctrl-C mid-reply stops the reply and keeps the conversation; /set, /save, /load, /clear;
multi-line input; the status line with tokens/s; `quarrel run MODEL` without a prompt is a chat; a long prompt
shows a progress bar on a terminal."""
import json
import os
import re
import shutil
import subprocess
import time
import uuid

import pytest

TMUX = shutil.which("tmux")
pytestmark = pytest.mark.skipif(TMUX is None, reason="tmux is not installed (scripts/setup.sh installs it)")
STATUS = re.compile(r"\[(stopped, )?(\d+) tokens, ([\d.]+) tok/s \| prompt (\d+) tokens")


class Tmux:
    """One detached tmux session running a command in a 200x60 terminal."""

    def __init__(self, cmd, env=None):
        self.name = "qrtest-" + uuid.uuid4().hex[:8]
        envs = [f"{k}={v}" for k, v in (env or {}).items()]
        subprocess.run([TMUX, "new-session", "-d", "-s", self.name, "-x", "200", "-y", "60", "env", *envs, *cmd],
                       check=True)
        subprocess.run([TMUX, "set-option", "-t", self.name, "remain-on-exit", "on"], check=True)

    def keys(self, *keys):
        subprocess.run([TMUX, "send-keys", "-t", self.name, *keys], check=True)

    def line(self, text):
        self.keys("-l", text)
        self.keys("Enter")

    def screen(self):
        return subprocess.run([TMUX, "capture-pane", "-p", "-J", "-S", "-2000", "-t", self.name], capture_output=True,
                              text=True, check=True).stdout

    def wait(self, pred, timeout=60, what=""):
        end = time.time() + timeout
        while time.time() < end:
            s = self.screen()
            if pred(s):
                return s
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}; screen:\n{self.screen()}")

    def dead(self):
        r = subprocess.run([TMUX, "display-message", "-p", "-t", self.name, "#{pane_dead}"], capture_output=True,
                           text=True)
        return r.stdout.strip() == "1"

    def kill(self):
        subprocess.run([TMUX, "kill-session", "-t", self.name], capture_output=True)


def prompts(screen):
    return screen.count(">>> ")


@pytest.fixture
def chat(quarrel_bin, smollm2):
    sessions = []

    def start(*args, cmd="chat"):
        t = Tmux([quarrel_bin, cmd, *( ["-m", str(smollm2)] if cmd == "chat" else []), "-t", "2", *map(str, args)])
        sessions.append(t)
        t.wait(lambda s: ">>> " in s, 60, "the first prompt")
        return t

    yield start
    for t in sessions:
        t.kill()


def test_ctrl_c_stops_the_reply_and_keeps_the_conversation(chat, tmp_path):
    t = chat("--temp", 0, "-n", 2000)
    t.line("Write a very long story about a dragon who bakes bread.")
    # the reply streams: some words appear, then Ctrl-C
    t.wait(lambda s: len(s.split("bakes bread.")[-1].split()) >= 8, 60, "the reply to start")
    t.keys("C-c")
    s = t.wait(lambda s: prompts(s) == 2, 30, "the prompt after Ctrl-C")
    m = STATUS.search(s)
    assert m and m.group(1) == "stopped, " and 0 < int(m.group(2)) < 2000, s
    assert not t.dead()  # the chat goes on
    # the stopped reply is part of the conversation
    out = tmp_path / "conv.json"
    t.line(f"/save {out}")
    t.wait(lambda s: "saved 2 messages" in s, 10, "/save")
    conv = json.loads(out.read_text())["messages"]
    assert [m["role"] for m in conv] == ["user", "assistant"] and len(conv[1]["content"]) > 20
    assert conv[1]["content"].split()[0] in t.screen()
    # and the next turn sees it: the prompt grew by the stopped reply
    t.line("/set n-predict 4")
    t.wait(lambda s: "n-predict = 4" in s, 10, "/set n-predict")
    t.line("Go on.")
    s = t.wait(lambda s: len(STATUS.findall(s)) == 2, 60, "the second reply")
    first, second = STATUS.findall(s)
    assert int(second[3]) > int(first[3]) + int(first[1]) - 2, (first, second)
    # Ctrl-C at the prompt drops the typed line; Ctrl-D quits
    t.keys("-l", "never sent")
    t.keys("C-c")
    t.wait(lambda s: "Ctrl-D or /exit quits" in s, 10, "the Ctrl-C hint")
    t.keys("C-d")
    s = t.wait(lambda s: t.dead(), 20, "the exit")
    assert "never sent" not in s.split("Ctrl-D or /exit quits")[-1]


def test_slash_commands_multiline_and_status_line(chat, tmp_path):
    t = chat("--temp", 0, "-n", 6)
    t.line("/set")
    t.wait(lambda s: "temp 0, top-k 40" in s and "n-predict 6" in s, 10, "/set listing")
    t.line("/set temp 0.3")
    t.wait(lambda s: "temp = 0.3" in s, 10, "/set temp")
    t.line("/set top-k nope")
    t.wait(lambda s: "bad value" in s.lower(), 10, "a bad /set value")
    t.line("/set system You answer in French.")
    t.wait(lambda s: "system message set" in s, 10, "/set system")
    # multi-line: a backslash continues the line, a """ block spans lines
    t.line("Line one \\")
    t.line("line two")
    s = t.wait(lambda s: len(STATUS.findall(s)) == 1, 60, "the first reply")
    m = STATUS.search(s)
    assert m.group(1) is None and 1 <= int(m.group(2)) <= 6 and float(m.group(3)) > 0
    t.line('"""')
    t.line("alpha")
    t.line("")
    t.line("omega")
    t.line('"""')
    t.wait(lambda s: len(STATUS.findall(s)) == 2, 60, "the second reply")
    path = tmp_path / "c.json"
    t.line(f"/save {path}")
    t.wait(lambda s: "saved 5 messages" in s, 10, "/save")
    saved = json.loads(path.read_text())
    assert saved["system"] == "You answer in French."
    msgs = saved["messages"]
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user", "assistant"]
    assert msgs[1]["content"] == "Line one \nline two" and msgs[3]["content"] == "alpha\n\nomega"
    # /clear forgets (the system message stays), /load brings it back
    t.line("/clear")
    t.wait(lambda s: "conversation cleared" in s, 10, "/clear")
    t.line(f"/save {tmp_path / 'empty.json'}")
    t.wait(lambda s: "saved 1 messages" in s, 10, "/save after /clear")
    t.line(f"/load {path}")
    t.wait(lambda s: "loaded 5 messages" in s, 10, "/load")
    t.line("/load /nonexistent.json")
    t.wait(lambda s: "/nonexistent.json:" in s, 10, "a failed /load")
    t.line("Again")
    s = t.wait(lambda s: len(STATUS.findall(s)) == 3, 60, "the third reply")
    assert int(STATUS.findall(s)[2][3]) > int(STATUS.findall(s)[1][3])  # the loaded history is in the prompt
    t.line("/nope")
    t.wait(lambda s: "unknown command /nope" in s, 10, "an unknown command")
    t.line("/exit")
    t.wait(lambda s: t.dead(), 20, "the exit")


def test_run_model_without_prompt_is_a_chat_and_long_prompts_show_progress(quarrel_bin, smollm2, tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    os.symlink(smollm2, models / os.path.basename(smollm2))
    t = Tmux([quarrel_bin, "run", "smollm2", "-t", "2", "-n", "3"], env={"QUARREL_MODELS_DIR": str(models)})
    try:
        t.wait(lambda s: ">>> " in s, 60, "the chat prompt of quarrel run MODEL")
        t.line("Hi")
        t.wait(lambda s: STATUS.search(s), 60, "a reply")
        t.line("/bye")
        t.wait(lambda s: t.dead(), 20, "the exit")
    finally:
        t.kill()
    # a long prompt on a terminal: the prefill's progress bar (cleared when done), the same text as without
    prompt = " ".join(["The quick brown fox jumps over the lazy dog."] * 200)  # ~2000 tokens
    pf = tmp_path / "p.txt"
    pf.write_text(prompt)
    out = tmp_path / "out.txt"
    args = [quarrel_bin, "run", "-m", str(smollm2), "-f", str(pf), "-n", "8", "--temp", "0", "-t", "2", "-q"]
    t = Tmux(["sh", "-c", " ".join(map(str, args)) + f" > {out}; echo EXIT=$?"])
    try:
        seen = t.wait(lambda s: "prompt [" in s or "EXIT=" in s, 120, "the prompt progress bar")
        assert "prompt [" in seen and "tokens" in seen, seen
        t.wait(lambda s: "EXIT=0" in s, 120, "the run to finish")
    finally:
        t.kill()
    plain = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0 and "prompt [" not in plain.stderr  # not a terminal: no bar
    assert out.read_text() == plain.stdout  # chunked prefill on the terminal: the same answer
