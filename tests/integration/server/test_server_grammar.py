"""Grammar-constrained sampling through the real clients: OpenAI response_format (json_schema with
and without strict, json_object) and Ollama format (a schema, "json"), on SmolLM2 (chat) and
Gemma 3 (its GGUF has no chat template: the built-in Gemma turn template, chat and completions), every
output validated with `jsonschema`; bad schemas and grammars get a 400 naming the construct and
the server stays up."""
import json
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import ollama
import openai
import pytest
import requests

from conftest import GEMMA, MODEL_NAME, Server

MAX_TOKENS = 160
# json_object mode constrains the syntax only: ask for something short so that the model ends it
COPY_ME = 'Repeat this JSON exactly: {"animal": "cat", "legs": 4}'

SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer"}},
     "required": ["name", "age"]},
    {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]},
    {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}}, "required": ["color"]},
    {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 4},
    {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                      "country": {"type": "string", "maxLength": 30},
                                      "population": {"type": "integer", "minimum": 0}},
     "required": ["city", "country"]},
    {"type": "object", "properties": {"user": {"type": "object", "properties": {
        "id": {"type": "integer"}, "email": {"type": "string", "format": "email"}}, "required": ["id", "email"]}},
     "required": ["user"]},
    {"type": "object", "properties": {"date": {"type": "string", "format": "date"}}, "required": ["date"]},
    {"type": "object", "properties": {"id": {"type": "string", "format": "uuid"}}, "required": ["id"]},
    {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{3}$"}},
     "required": ["code"]},
    {"type": "object", "properties": {"value": {"anyOf": [{"type": "number"}, {"type": "null"}]}},
     "required": ["value"]},
    {"$defs": {"pt": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                      "required": ["x", "y"]}},
     "type": "object", "properties": {"a": {"$ref": "#/$defs/pt"}, "b": {"$ref": "#/$defs/pt"}},
     "required": ["a", "b"]},
    {"type": "object", "properties": {"version": {"const": 2}, "name": {"type": "string", "maxLength": 10}},
     "required": ["version", "name"]},
    {"type": "array", "prefixItems": [{"type": "string", "maxLength": 10}, {"type": "integer"},
                                      {"type": "boolean"}]},
    {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string", "maxLength": 12},
                                               "maxItems": 3}}, "required": ["tags"]},
    {"type": "object", "properties": {"title": {"type": "string", "maxLength": 40}, "year": {"type": "integer"},
                                      "rating": {"type": "number"}}, "required": ["title"]},
    {"type": ["integer", "null"]},
    {"type": "object", "properties": {"when": {"type": "string", "format": "date-time"}}, "required": ["when"]},
    {"type": "object", "properties": {"answer": {"enum": ["yes", "no", "maybe"]},
                                      "confidence": {"type": "number", "minimum": 0}},
     "required": ["answer", "confidence"], "additionalProperties": False},
    {"type": "boolean"},
    {"type": "object", "properties": {"ip": {"type": "string", "format": "ipv4"},
                                      "port": {"type": "integer", "minimum": 0}}, "required": ["ip", "port"]},
]
assert len(SCHEMAS) == 20


def ask(schema):
    return "Reply with JSON that matches this schema: " + json.dumps(schema)


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def gemma_server(quarrel_bin, gemma):
    s = Server(quarrel_bin, [gemma], ["--parallel", "4", "--ctx", "4096"])
    yield s
    s.stop()


def check(schema, text, finish):
    assert finish == "stop", f"output cut at max_tokens: {text!r}"
    jsonschema.validate(json.loads(text), schema)


def chat_one(client, i, stream, model=MODEL_NAME, strict=None):
    schema = SCHEMAS[i]
    strict = i % 3 == 0 if strict is None else strict
    rf = {"type": "json_schema", "json_schema": {"name": f"s{i}", "schema": schema, "strict": strict}}
    msgs = [{"role": "user", "content": ask(schema)}]
    if not stream:
        r = client.chat.completions.create(model=model, messages=msgs, response_format=rf,
                                           max_tokens=MAX_TOKENS, temperature=0)
        return schema, r.choices[0].message.content, r.choices[0].finish_reason
    text, finish = "", None
    for c in client.chat.completions.create(model=model, messages=msgs, response_format=rf,
                                            max_tokens=MAX_TOKENS, temperature=0, stream=True):
        if c.choices:
            text += c.choices[0].delta.content or ""
            finish = c.choices[0].finish_reason or finish
    return schema, text, finish


def completion_one(client, i, stream):
    schema = SCHEMAS[i]
    rf = {"type": "json_schema", "json_schema": {"name": f"s{i}", "schema": schema, "strict": True}}
    prompt = ask(schema) + "\nJSON: "
    model = GEMMA.removesuffix(".gguf")
    if not stream:
        r = client.completions.create(model=model, prompt=prompt, max_tokens=MAX_TOKENS, temperature=0,
                                      extra_body={"response_format": rf})
        return schema, r.choices[0].text, r.choices[0].finish_reason
    text, finish = "", None
    for c in client.completions.create(model=model, prompt=prompt, max_tokens=MAX_TOKENS, temperature=0,
                                       stream=True, extra_body={"response_format": rf}):
        if c.choices:
            text += c.choices[0].text or ""
            finish = c.choices[0].finish_reason or finish
    return schema, text, finish


@pytest.mark.parametrize("stream", [False, True])
def test_openai_chat_json_schema_smollm(client, stream):
    with ThreadPoolExecutor(4) as ex:
        for schema, text, finish in ex.map(lambda i: chat_one(client, i, stream), range(len(SCHEMAS))):
            check(schema, text, finish)


@pytest.mark.parametrize("stream", [False, True])
def test_openai_json_schema_gemma(gemma_server, stream):
    c = openai.OpenAI(base_url=gemma_server.url + "/v1", api_key="unused", max_retries=0, timeout=300)
    with ThreadPoolExecutor(4) as ex:
        for schema, text, finish in ex.map(lambda i: completion_one(c, i, stream), range(len(SCHEMAS))):
            check(schema, text, finish)


@pytest.mark.parametrize("stream", [False, True])
def test_openai_chat_json_schema_gemma(gemma_server, stream):
    """Gemma 3's GGUF carries no chat template: chat requests render through the built-in Gemma turn format."""
    c = openai.OpenAI(base_url=gemma_server.url + "/v1", api_key="unused", max_retries=0, timeout=300)
    model = GEMMA.removesuffix(".gguf")
    # Gemma 3 270M is a base model: in chat form it fills the email with "1"s; the email format's RFC 5321 bounds
    # (a local part of <= 64 characters, labels of <= 63) make it end the string within max_tokens
    with ThreadPoolExecutor(4) as ex:
        for schema, text, finish in ex.map(lambda i: chat_one(c, i, stream, model, True), range(len(SCHEMAS))):
            check(schema, text, finish)


@pytest.mark.parametrize("stream", [False, True])
def test_gemma_chat_required_tool_call(gemma_server, stream):
    """tool_choice=required on Gemma 3 (built-in template, no tool markers: the generic JSON call format) returns
    a parsed call whose arguments validate; streamed, the client assembles the deltas."""
    weather = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}}, "required": ["city"]}
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather of a city",
                                               "parameters": weather}}]
    c = openai.OpenAI(base_url=gemma_server.url + "/v1", api_key="unused", max_retries=0, timeout=300)
    kw = dict(model=GEMMA.removesuffix(".gguf"), messages=[{"role": "user", "content": "Weather in Paris?"}],
              tools=tools, tool_choice="required", parallel_tool_calls=False, max_tokens=120, temperature=0)
    if not stream:
        ch = c.chat.completions.create(**kw).choices[0]
        assert ch.finish_reason == "tool_calls"
        name, args = ch.message.tool_calls[0].function.name, ch.message.tool_calls[0].function.arguments
    else:
        name, args, finish = "", "", None
        for chunk in c.chat.completions.create(stream=True, **kw):
            if not chunk.choices:
                continue
            for tc in chunk.choices[0].delta.tool_calls or []:
                name += tc.function.name or ""
                args += tc.function.arguments or ""
            finish = chunk.choices[0].finish_reason or finish
        assert finish == "tool_calls"
    assert name == "get_weather"
    jsonschema.validate(json.loads(args), weather)


def test_gemma_builtin_template_prompt(gemma_server):
    """The rendered prompt is Gemma's turn format (system text folded into the first user turn)."""
    r = requests.post(gemma_server.url + "/api/chat", json={
        "model": GEMMA.removesuffix(".gguf"), "stream": False, "options": {"num_predict": 1, "temperature": 0},
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]})
    assert r.status_code == 200, r.text
    n = r.json()["prompt_eval_count"]
    # <bos> <start_of_turn> user \n Be brief . \n\n Hi <end_of_turn> \n <start_of_turn> model \n
    tok = requests.post(gemma_server.url + "/tokenize", json={
        "model": GEMMA.removesuffix(".gguf"), "add_special": False, "parse_special": True,
        "content": "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n"})
    assert tok.status_code == 200, tok.text
    assert n == len(tok.json()["tokens"])


def test_openai_json_object(client):
    r = client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": COPY_ME}],
                                       response_format={"type": "json_object"}, max_tokens=MAX_TOKENS, temperature=0)
    assert r.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(r.choices[0].message.content), dict)


def test_ollama_format_schema_and_json(server, gemma_server):
    c = ollama.Client(host=server.url)
    schema = SCHEMAS[0]
    r = c.chat(model=MODEL_NAME, messages=[{"role": "user", "content": ask(schema)}], format=schema,
               options={"temperature": 0, "num_predict": MAX_TOKENS})
    jsonschema.validate(json.loads(r.message.content), schema)
    r = c.chat(model=MODEL_NAME, messages=[{"role": "user", "content": COPY_ME}], format="json",
               options={"temperature": 0, "num_predict": MAX_TOKENS})
    assert isinstance(json.loads(r.message.content), dict)
    text = "".join(part.response for part in ollama.Client(host=gemma_server.url).generate(
        model=GEMMA.removesuffix(".gguf"), prompt=ask(SCHEMAS[17]), format=SCHEMAS[17], stream=True,
        options={"temperature": 0, "num_predict": MAX_TOKENS}))
    jsonschema.validate(json.loads(text), SCHEMAS[17])


def test_native_grammar(server):
    r = requests.post(server.url + "/api/stream", json={
        "model": MODEL_NAME, "prompt": "Is water wet? Answer:", "grammar": 'root ::= ("yes" | "no") "."',
        "max_tokens": 10, "temperature": 0})
    assert r.status_code == 200, r.text
    events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
    assert "".join(e.get("token", "") for e in events) in ("yes.", "no.")


@pytest.mark.parametrize("body,needle", [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "patternProperties": {"^a": {}}}}}}, "unsupported keyword 'patternProperties'"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "number", "maximum": 3}}}}, "unsupported keyword 'maximum'"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#"}}}},
     "$ref cycle"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}}}}, "$ref cycle"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(10000)}}}}}, "10000 properties"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": 7}}}},
     "'type' must be"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": "nope"}}},
     "must be a JSON schema object"),
    ({"response_format": {"type": "xml"}}, "'response_format.type'"),
    ({"grammar": "root ::= [a-z"}, "unterminated character class"),
    ({"grammar": "root ::= undefined-rule"}, "never defined"),
])
def test_bad_grammar_is_400_and_server_stays_up(server, body, needle):
    body = dict(body, model=MODEL_NAME, messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    r = requests.post(server.url + "/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 400, r.text
    assert needle in r.json()["error"]["message"]
    assert requests.get(server.url + "/healthz", timeout=10).status_code == 200


def test_openai_client_raises_bad_request(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "hi"}], max_tokens=4,
                                       response_format={"type": "json_schema", "json_schema": {
                                           "name": "x", "schema": {"type": "string", "format": "hostname-idn"}}})
    assert "unsupported format 'hostname-idn'" in str(e.value)


def test_ollama_bad_format_is_400(server):
    r = requests.post(server.url + "/api/chat", json={"model": MODEL_NAME, "messages": [{"role": "user", "content": "x"}],
                                                      "format": {"not": {}}, "stream": False})
    assert r.status_code == 400 and "unsupported keyword 'not'" in r.text
