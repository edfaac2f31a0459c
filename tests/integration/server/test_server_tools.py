"""Tool calling and reasoning through the real clients on SmolLM2 (its template knows no tools: the
server teaches the generic JSON call format in a system message). A required or named tool_choice is
forced by the grammar, so even this 135M model returns a well-formed call whose arguments validate
against the function's parameters; streamed calls arrive as deltas the client assembles; tool results
go back into the prompt; bad tool definitions get a 400 and the server stays up. Reasoning is tested
synthetically (no reasoning model is in the test set): a GBNF grammar makes SmolLM2 open a <think>
section it cannot close by itself (logit_bias bans the tokens that start '<'), and the
max_thinking_tokens / reasoning_effort budget must close it."""
import json

import gguf
import jsonschema
import ollama
import openai
import pytest
import requests

from conftest import MODEL_NAME

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                            "unit": {"enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"]}
TIME = {"type": "object", "properties": {"timezone": {"type": "string", "maxLength": 20}}, "required": ["timezone"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather of a city",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time", "description": "Current time in a timezone",
                                           "parameters": TIME}}]
PARAMS = {"get_weather": WEATHER, "get_time": TIME}
ASK = [{"role": "user", "content": "What is the weather like in Paris today?"}]


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300)


def check_call(name, arguments):
    assert name in PARAMS, name
    args = json.loads(arguments) if isinstance(arguments, str) else arguments
    jsonschema.validate(args, PARAMS[name])
    return args


def test_required_tool_call(client):
    r = client.chat.completions.create(model=MODEL_NAME, messages=ASK, tools=TOOLS, tool_choice="required",
                                       parallel_tool_calls=False, max_tokens=120, temperature=0)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls"
    assert ch.message.content is None
    assert len(ch.message.tool_calls) == 1
    tc = ch.message.tool_calls[0]
    assert tc.type == "function" and tc.id
    check_call(tc.function.name, tc.function.arguments)


def test_named_tool_call_sampled(client):
    for seed in range(3):
        r = client.chat.completions.create(model=MODEL_NAME, messages=ASK, tools=TOOLS, max_tokens=120,
                                           tool_choice={"type": "function", "function": {"name": "get_time"}},
                                           temperature=1.0, seed=seed)
        calls = r.choices[0].message.tool_calls
        assert calls and all(c.function.name == "get_time" for c in calls)
        for c in calls:
            check_call(c.function.name, c.function.arguments)


def test_required_parallel_calls(client):
    r = client.chat.completions.create(model=MODEL_NAME, messages=ASK, tools=TOOLS, tool_choice="required",
                                       max_tokens=400, temperature=0)
    calls = r.choices[0].message.tool_calls
    assert calls and len(calls) <= 8
    assert len({c.id for c in calls}) == len(calls)
    for c in calls:
        check_call(c.function.name, c.function.arguments)


def test_streamed_tool_call_deltas(client):
    stream = client.chat.completions.create(model=MODEL_NAME, messages=ASK, tools=TOOLS, tool_choice="required",
                                            parallel_tool_calls=False, max_tokens=120, temperature=0, stream=True)
    calls, finish = {}, None
    for chunk in stream:
        d = chunk.choices[0].delta
        for tc in d.tool_calls or []:
            c = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
            if tc.id:
                c["id"] = tc.id
            if tc.function and tc.function.name:
                c["name"] += tc.function.name
            if tc.function and tc.function.arguments:
                c["arguments"] += tc.function.arguments
        assert not d.content  # a forced reply is only the call
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls"
    assert list(calls) == [0] and calls[0]["id"]
    check_call(calls[0]["name"], calls[0]["arguments"])
    # the same as the non-streamed reply (greedy)
    r = client.chat.completions.create(model=MODEL_NAME, messages=ASK, tools=TOOLS, tool_choice="required",
                                       parallel_tool_calls=False, max_tokens=120, temperature=0)
    tc = r.choices[0].message.tool_calls[0]
    assert (tc.function.name, json.loads(tc.function.arguments)) == (calls[0]["name"], json.loads(calls[0]["arguments"]))


def test_stream_helper_assembles(client):
    """The openai client's own stream helper (ChatCompletionStreamState) assembles the deltas."""
    with client.beta.chat.completions.stream(model=MODEL_NAME, messages=ASK, tools=TOOLS, tool_choice="required",
                                             parallel_tool_calls=False, max_tokens=120, temperature=0) as s:
        for _ in s:
            pass
        final = s.get_final_completion()
    tc = final.choices[0].message.tool_calls[0]
    check_call(tc.function.name, tc.function.arguments)


def test_tool_result_round_trip(client):
    first = client.chat.completions.create(model=MODEL_NAME, messages=ASK, tools=TOOLS, tool_choice="required",
                                           parallel_tool_calls=False, max_tokens=120, temperature=0)
    tc = first.choices[0].message.tool_calls[0]
    msgs = ASK + [first.choices[0].message.model_dump(exclude_none=True),
                  {"role": "tool", "tool_call_id": tc.id, "content": "18 degrees and sunny"}]
    r = client.chat.completions.create(model=MODEL_NAME, messages=msgs, tools=TOOLS, tool_choice="none",
                                       max_tokens=40, temperature=0)
    assert r.choices[0].message.tool_calls is None
    assert r.choices[0].message.content
    alone = client.chat.completions.create(model=MODEL_NAME, messages=ASK, tools=TOOLS, tool_choice="none",
                                           max_tokens=1, temperature=0)
    assert r.usage.prompt_tokens > alone.usage.prompt_tokens + 15  # the call and its result are in the prompt


def test_auto_and_none(client):
    r = client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "Say hi."}],
                                       tools=TOOLS, tool_choice="none", max_tokens=20, temperature=0)
    assert r.choices[0].message.tool_calls is None and r.choices[0].finish_reason in ("stop", "length")
    r = client.chat.completions.create(model=MODEL_NAME, messages=ASK, tools=TOOLS, max_tokens=60, temperature=0)
    for c in r.choices[0].message.tool_calls or []:  # the model decides; whatever it calls is well formed
        json.loads(c.function.arguments)


def test_ollama_tools(server):
    c = ollama.Client(host=server.url)
    r = c.chat(model=MODEL_NAME, messages=ASK, tools=TOOLS, options={"temperature": 0, "num_predict": 60})
    assert r.message.role == "assistant"
    for tc in r.message.tool_calls or []:
        check_call(tc.function.name, tc.function.arguments)
    # a call and its result back into the template
    hist = ASK + [{"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]},
        {"role": "tool", "content": "18 degrees and sunny", "tool_name": "get_weather"}]
    r = c.chat(model=MODEL_NAME, messages=hist, tools=TOOLS, options={"temperature": 0, "num_predict": 30})
    assert (r.message.content or r.message.tool_calls) and r.prompt_eval_count > 60
    # required (our extension on /api/chat), as the ollama client's own types read it, streamed and not
    body = {"model": MODEL_NAME, "messages": ASK, "tools": TOOLS, "tool_choice": "required",
            "parallel_tool_calls": False, "options": {"temperature": 0, "num_predict": 120}}
    resp = ollama.ChatResponse.model_validate(requests.post(server.url + "/api/chat", json={**body, "stream": False}).json())
    assert len(resp.message.tool_calls) == 1
    args = check_call(resp.message.tool_calls[0].function.name, resp.message.tool_calls[0].function.arguments)
    lines = requests.post(server.url + "/api/chat", json={**body, "stream": True}).text.strip().splitlines()
    chunks = [ollama.ChatResponse.model_validate(json.loads(l)) for l in lines]
    streamed = [tc for ch in chunks for tc in ch.message.tool_calls or []]
    assert len(streamed) == 1 and streamed[0].function.arguments == args
    assert chunks[-1].done


BAD = [
    ({"tools": {"type": "function"}}, "'tools' must be an array"),
    ({"tools": [{"type": "function"}]}, "'tools[0].function'"),
    ({"tools": [{"type": "function", "function": {"description": "x"}}]}, "'tools[0].function.name'"),
    ({"tools": [{"type": "function", "function": {"name": "has space"}}]}, "'tools[0].function.name'"),
    ({"tools": [{"type": "code", "function": {"name": "f"}}]}, "'tools[0].type'"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]}, "parameters"),
    ({"tools": TOOLS, "tool_choice": "sometimes"}, "'tool_choice'"),
    ({"tool_choice": "required"}, "'tools' is empty"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "'nope'"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": 3}}}],
      "tool_choice": "required"}, "tool 'f'"),
    ({"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}}, "response_format"),
    ({"reasoning_effort": "extreme"}, "'reasoning_effort'"),
    ({"max_thinking_tokens": -1}, "'max_thinking_tokens'"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}]}, "tool_calls[0]"),
]


@pytest.mark.parametrize("extra,needle", BAD)
def test_bad_tool_requests(server, extra, needle):
    body = {"model": MODEL_NAME, "messages": ASK, "max_tokens": 8, **extra}
    r = requests.post(server.url + "/v1/chat/completions", json=body)
    assert r.status_code == 400, r.text
    assert needle in r.json()["error"]["message"]
    r = requests.post(server.url + "/api/chat", json={"model": MODEL_NAME, "messages": ASK, "think": "very", "stream": False})
    assert r.status_code == 400 and "'think'" in r.text
    assert requests.get(server.url + "/healthz").status_code == 200


def lt_token_ids(smollm):
    """Ids of the tokens whose text starts with '<' (SmolLM2 cannot close a <think> section without one)."""
    r = gguf.GGUFReader(smollm)
    f = r.fields["tokenizer.ggml.tokens"]
    return [i for i, d in enumerate(f.data) if bytes(f.parts[d]).startswith(b"<")]


THINK_GRAMMAR = 'root ::= "<think>" [a-z ]* "</think>" "\\n"* [A-Za-z ]+ "."'


def test_reasoning_budget(server, smollm, client):
    ban = {str(t): -100 for t in lt_token_ids(smollm)}
    base = {"grammar": THINK_GRAMMAR, "logit_bias": ban}
    msgs = [{"role": "user", "content": "Tell me about cats."}]
    # no budget: the section never ends (the model cannot write '<')
    r = client.chat.completions.create(model=MODEL_NAME, messages=msgs, max_tokens=30, temperature=0, extra_body=base)
    m = r.choices[0].message
    assert r.choices[0].finish_reason == "length", r.choices[0]
    assert m.reasoning_content and not m.content
    for budget in (0, 4):
        r = client.chat.completions.create(model=MODEL_NAME, messages=msgs, max_tokens=60, temperature=0,
                                           extra_body={**base, "max_thinking_tokens": budget})
        m = r.choices[0].message
        reasoning = getattr(m, "reasoning_content", None) or ""
        n = len(requests.post(server.url + "/tokenize", json={"content": reasoning,
                                                               "add_special": False}).json()["tokens"])
        assert n <= budget + 1, (budget, reasoning)
        assert m.content and m.content.endswith("."), m.content
        assert "<think>" not in m.content and "</think>" not in m.content
        # streamed: the same split
        rs = cs = ""
        for ch in client.chat.completions.create(model=MODEL_NAME, messages=msgs, max_tokens=60, temperature=0,
                                                 stream=True, extra_body={**base, "max_thinking_tokens": budget}):
            d = ch.choices[0].delta
            rs += getattr(d, "reasoning_content", None) or ""
            cs += d.content or ""
        assert (rs, cs) == (reasoning, m.content)
    # reasoning_effort "none" is a budget of 0
    r = client.chat.completions.create(model=MODEL_NAME, messages=msgs, max_tokens=60, temperature=0,
                                       reasoning_effort="none", extra_body=base)
    assert r.choices[0].message.content.endswith(".")


def test_ollama_thinking_field(server, smollm):
    """Ollama's generate route splits a <think> section into `thinking` (forced here by a raw prompt that
    opens it: the prompt ends with <think>, so the reply is reasoning until </think>)."""
    r = requests.post(server.url + "/api/chat", json={
        "model": MODEL_NAME, "messages": [{"role": "user", "content": "Hi"}], "think": True, "stream": False,
        "max_thinking_tokens": 3, "options": {"temperature": 0, "num_predict": 20}})
    assert r.status_code == 200
    resp = ollama.ChatResponse.model_validate(r.json())
    assert resp.message.content is not None


def test_feature_metrics(server):
    before = server.metric("quarrel_requests_by_feature_total", feature="tools") or 0
    requests.post(server.url + "/v1/chat/completions", json={
        "model": MODEL_NAME, "messages": ASK, "tools": TOOLS, "tool_choice": "required", "max_tokens": 60,
        "temperature": 0})
    assert server.metric("quarrel_requests_by_feature_total", feature="tools") == before + 1
    assert server.metric("quarrel_requests_by_feature_total", feature="tool_choice_required") >= 1
