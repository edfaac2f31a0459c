"""Chat templates: `quarrel template` must render byte for byte what Python jinja2 renders when it is
configured the way Hugging Face transformers configures it for apply_chat_template:
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the loopcontrols extension and
the {% generation %} tag, the tojson filter replaced by json.dumps(ensure_ascii=False, ...), and the
raise_exception / strftime_now globals. The render call passes messages, tools (None when absent),
documents, add_generation_prompt and the special tokens, as transformers does.

The real templates live in tests/data/templates (see README.md there for where each comes from).
"""
import datetime
import functools
import json
import os
import pathlib
import subprocess

import jinja2
import jinja2.ext
import jinja2.nodes
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = pathlib.Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "tests" / "data" / "templates"
MESSAGES = TEMPLATES / "messages"
FIXED_DATE = "2024-07-26"
FIXED_NOW = datetime.datetime(2024, 7, 26)


class GenerationTag(jinja2.ext.Extension):
    """transformers' AssistantTracker: {% generation %}...{% endgeneration %} renders its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    def _generation_support(self, caller):
        return caller()


def hf_environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return FIXED_NOW.strftime(format)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


@functools.lru_cache(maxsize=None)
def compiled(src):
    return hf_environment().from_string(src)


def reference(src, case, add_generation_prompt, bos=None, eos=None):
    """What transformers' apply_chat_template(tokenize=False) renders."""
    kwargs = {}
    if bos is not None:
        kwargs["bos_token"] = bos
    if eos is not None:
        kwargs["eos_token"] = eos
    kwargs.update(case.get("extra", {}))
    return compiled(src).render(
        messages=case.get("messages", []),
        tools=case.get("tools"),
        documents=case.get("documents"),
        add_generation_prompt=add_generation_prompt,
        **kwargs,
    )


def run_quarrel(quarrel_bin, tmp_path, source_args, case, add_generation_prompt, bos=None, eos=None, tools_flag=False):
    doc = {"messages": case.get("messages", [])}
    for key in ("documents", "extra"):
        if key in case:
            doc[key] = case[key]
    args = [quarrel_bin, "template", *source_args, "--messages", str(tmp_path / "case.json"), "--date", FIXED_DATE]
    if "tools" in case:
        if tools_flag:
            (tmp_path / "tools.json").write_text(json.dumps(case["tools"]), encoding="utf-8")
            args += ["--tools", str(tmp_path / "tools.json")]
        else:
            doc["tools"] = case["tools"]
    (tmp_path / "case.json").write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    if not add_generation_prompt:
        args.append("--no-generation-prompt")
    if bos is not None:
        args += ["--bos", bos]
    if eos is not None:
        args += ["--eos", eos]
    return subprocess.run(args, capture_output=True, timeout=60)


def load_cases(name):
    return json.loads((MESSAGES / name).read_text(encoding="utf-8"))


# template file -> (message-case files, bos, eos)
SUITES = {
    "smollm2-chatml.jinja": (["chat.json"], "<|im_start|>", "<|im_end|>"),
    "gemma3.jinja": (["chat.json", "gemma3.json"], "<bos>", "<eos>"),
    "meta-llama-Llama-3.3-70B-Instruct.jinja": (["chat.json", "llama3.json"], "<|begin_of_text|>", "<|eot_id|>"),
    "mistralai-Mistral-Nemo-Instruct-2407.jinja": (["chat.json", "mistral.json"], "<s>", "</s>"),
    "ibm-granite-granite-3.3-2B-Instruct.jinja": (["chat.json", "granite.json"], "<|end_of_text|>", "<|end_of_text|>"),
    "openai-gpt-oss-120b.jinja": (["chat.json", "gpt_oss.json"], "<|startoftext|>", "<|return|>"),
    "Qwen-Qwen3-0.6B.jinja": (["chat.json", "qwen3.json"], None, "<|im_end|>"),
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja": (["hermes.json"], "<|begin_of_text|>", "<|im_end|>"),
    # issue 30 part 3: GLM-4.x, Ministral 3, DeepSeek V3.1
    "GLM-4.6.jinja": (["chat.json"], None, "<|endoftext|>"),
    "mistralai-Ministral-3-14B-Reasoning-2512.jinja": (["chat.json"], "<s>", "</s>"),
    "deepseek-ai-DeepSeek-V3.1.jinja": (["chat.json"], "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
}


def render_params():
    params = []
    for tmpl, (case_files, bos, eos) in SUITES.items():
        for cf in case_files:
            for name, case in load_cases(cf).items():
                if case.get("only") and tmpl not in case["only"]:
                    continue
                if case.get("skip") and tmpl in case["skip"]:
                    continue
                for gen in (True, False):
                    params.append(pytest.param(tmpl, case, gen, bos, eos, id=f"{tmpl[:-6]}-{name}-gen{int(gen)}"))
    return params


@pytest.mark.parametrize("tmpl,case,gen,bos,eos", render_params())
def test_template_matches_jinja2(quarrel_bin, tmp_path, tmpl, case, gen, bos, eos):
    src = (TEMPLATES / tmpl).read_text(encoding="utf-8")
    want_error = None
    try:
        want = reference(src, case, gen, bos, eos)
    except jinja2.exceptions.TemplateError as e:
        want_error = str(e)
    r = run_quarrel(quarrel_bin, tmp_path, ["--template", str(TEMPLATES / tmpl)], case, gen, bos, eos,
                    tools_flag=gen)
    if want_error is not None:
        assert r.returncode != 0, f"jinja2 raised {want_error!r} but quarrel rendered {r.stdout!r}"
        assert want_error.encode() in r.stderr, r.stderr
        return
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout == want.encode("utf-8")


# Templates that raise_exception() for bad conversations: the error text must reach the user and the
# exit status must be non-zero.
RAISING = [
    ("gemma3.jinja", {"messages": [{"role": "assistant", "content": "hi"}]},
     "Conversation roles must alternate user/assistant/user/assistant/..."),
    ("mistralai-Mistral-Nemo-Instruct-2407.jinja",
     {"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]},
     "After the optional system message, conversation roles must alternate user/assistant/user/assistant/..."),
    ("mistralai-Mistral-Nemo-Instruct-2407.jinja",
     {"messages": [{"role": "user", "content": "a"},
                   {"role": "assistant", "tool_calls": [{"id": "short", "function": {"name": "f", "arguments": "{}"}}]}]},
     "Tool call IDs should be alphanumeric strings with length 9!"),
    ("meta-llama-Llama-3.3-70B-Instruct.jinja",
     {"messages": [{"role": "user", "content": "a"},
                   {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": {}}},
                                                        {"function": {"name": "g", "arguments": {}}}]}]},
     "This model only supports single tool-calls at once!"),
    ("openai-gpt-oss-120b.jinja", {"messages": [{"role": "tool", "content": "x"}]},
     "Message has tool role, but there was no previous assistant message with a tool call!"),
]


@pytest.mark.parametrize("tmpl,case,message", RAISING, ids=[f"{t[:-6]}-{i}" for i, (t, _, _) in enumerate(RAISING)])
def test_raise_exception_is_a_clear_error(quarrel_bin, tmp_path, tmpl, case, message):
    src = (TEMPLATES / tmpl).read_text(encoding="utf-8")
    with pytest.raises(jinja2.exceptions.TemplateError) as exc:
        reference(src, case, True, "<s>", "</s>")
    assert str(exc.value) == message
    r = run_quarrel(quarrel_bin, tmp_path, ["--template", str(TEMPLATES / tmpl)], case, True, "<s>", "</s>")
    assert r.returncode != 0
    assert r.stdout == b""
    err = r.stderr.decode()
    assert "raise_exception: " + message in err, err
    assert "template line " in err, err


def gguf_template_and_tokens(path):
    from gguf import GGUFReader

    reader = GGUFReader(str(path))

    def field_str(field):
        return bytes(field.parts[field.data[0]]).decode("utf-8")

    src = field_str(reader.fields["tokenizer.chat_template"])
    tokens = reader.fields["tokenizer.ggml.tokens"]

    def token(key):
        idx = int(reader.fields[key].parts[reader.fields[key].data[0]][0])
        return bytes(tokens.parts[tokens.data[idx]]).decode("utf-8")

    return src, token("tokenizer.ggml.bos_token_id"), token("tokenizer.ggml.eos_token_id")


@pytest.mark.parametrize("gen", [True, False])
@pytest.mark.parametrize("name", ["system_and_user", "multi_turn", "no_system"])
def test_template_from_gguf(quarrel_bin, tmp_path, smollm2, name, gen):
    src, bos, eos = gguf_template_and_tokens(smollm2)
    assert src == (TEMPLATES / "smollm2-chatml.jinja").read_text(encoding="utf-8")
    case = load_cases("chat.json")[name]
    want = reference(src, case, gen, bos, eos)
    r = run_quarrel(quarrel_bin, tmp_path, ["--model", str(smollm2)], case, gen)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout == want.encode("utf-8")


def test_gguf_without_template_is_an_error(quarrel_bin, tmp_path, gemma3):
    r = run_quarrel(quarrel_bin, tmp_path, ["--model", str(gemma3)], load_cases("chat.json")["multi_turn"], True)
    assert r.returncode != 0
    assert b"has no tokenizer.chat_template" in r.stderr


# ---- feature snippets: small templates exercising the interpreter, compared with jinja2 ----------------

SNIPPETS = json.loads((TEMPLATES / "snippets.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[f"s{i:03d}" for i in range(len(SNIPPETS))])
def test_snippet_matches_jinja2(quarrel_bin, tmp_path, snippet):
    src = snippet["t"]
    ctx = dict(snippet.get("ctx", {}))
    case = {"messages": ctx.pop("messages", []), "extra": ctx}
    (tmp_path / "t.jinja").write_text(src, encoding="utf-8", newline="")
    try:
        want = reference(src, case, True).encode("utf-8")
        want_error = None
    except Exception as e:  # jinja2 raised: we must fail too (message wording may differ)
        want, want_error = None, f"{type(e).__name__}: {e}"
    r = run_quarrel(quarrel_bin, tmp_path, ["--template", str(tmp_path / "t.jinja")], case, True)
    if want_error is not None:
        assert r.returncode != 0, f"jinja2 failed with {want_error} but quarrel rendered {r.stdout!r}"
        assert r.stderr.startswith(b"quarrel template: template"), r.stderr
        return
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout == want, f"template {src!r}"
