"""Anthropic Messages API (/v1/messages, /v1/messages/count_tokens) through the real `anthropic` client:
messages.create (greedy output equal to /v1/chat/completions on the same conversation), messages.stream and
the raw event sequence, a tool_use / tool_result round trip, stop_sequences, count_tokens, structured
output, Anthropic's error shape for bad input (the server stays up), feature metrics."""
import json

import anthropic
import jsonschema
import openai
import pytest
import requests

from conftest import MODEL_NAME

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [{"name": "get_weather", "description": "The weather of a city", "input_schema": WEATHER}]
GREEDY = {"temperature": 0}  # this client version has no sampling arguments: extra_body carries them


@pytest.fixture(scope="module")
def client(server):
    return anthropic.Anthropic(base_url=server.url, api_key="none", max_retries=0)


def chat_greedy(server, messages, n):
    c = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)
    r = c.chat.completions.create(model=MODEL_NAME, messages=messages, max_tokens=n, temperature=0)
    return r.choices[0].message.content


def test_create_equals_chat(client, server):
    m = client.messages.create(model=MODEL_NAME, max_tokens=12, system="Answer briefly.",
                               messages=[{"role": "user", "content": "What is the capital of France?"}], extra_body=GREEDY)
    assert m.type == "message" and m.role == "assistant" and m.id.startswith("msg_") and m.model == MODEL_NAME
    assert m.stop_reason in ("end_turn", "max_tokens") and m.stop_sequence is None
    assert len(m.content) == 1 and m.content[0].type == "text" and 0 < m.usage.output_tokens <= 12
    want = chat_greedy(server, [{"role": "system", "content": "Answer briefly."},
                                {"role": "user", "content": "What is the capital of France?"}], 12)
    assert m.content[0].text == want and want
    # count_tokens counts the same prompt
    n = client.messages.count_tokens(model=MODEL_NAME, system="Answer briefly.",
                                     messages=[{"role": "user", "content": "What is the capital of France?"}])
    assert n.input_tokens == m.usage.input_tokens


def test_stream(client, server):
    kw = dict(model=MODEL_NAME, max_tokens=10, messages=[{"role": "user", "content": [{"type": "text", "text": "Hello!"}]}],
              extra_body=GREEDY)
    whole = client.messages.create(**kw)
    with client.messages.stream(**kw) as st:
        text = "".join(st.text_stream)
        final = st.get_final_message()
    assert text == final.content[0].text == whole.content[0].text and text
    assert final.stop_reason == whole.stop_reason and final.usage.output_tokens == whole.usage.output_tokens
    types = [e.type for e in client.messages.create(stream=True, **kw)]
    assert types[0] == "message_start" and types[1] == "content_block_start" and types[-3:] == [
        "content_block_stop", "message_delta", "message_stop"]
    assert set(types[2:-3]) == {"content_block_delta"}
    raw = requests.post(server.url + "/v1/messages", json=dict(GREEDY, stream=True, model=MODEL_NAME, max_tokens=3,
                                                               messages=kw["messages"]), timeout=30).text
    assert raw.startswith("event: message_start\ndata: {") and "event: ping\n" in raw


def test_tool_use_round_trip(client):
    question = [{"role": "user", "content": "What is the weather in Paris?"}]
    m = client.messages.create(model=MODEL_NAME, max_tokens=40, tools=TOOLS, messages=question,
                               tool_choice={"type": "tool", "name": "get_weather"}, extra_body=GREEDY)
    assert m.stop_reason == "tool_use"
    uses = [b for b in m.content if b.type == "tool_use"]
    assert len(uses) == 1 and uses[0].name == "get_weather" and uses[0].id.startswith("toolu_")
    jsonschema.validate(uses[0].input, WEATHER)
    # the tool's result goes back in a user message; tool_choice none asks for the text answer
    turn = question + [{"role": "assistant", "content": m.content},
                       {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id,
                                                     "content": "sunny, 21 C"}]}]
    reply = client.messages.create(model=MODEL_NAME, max_tokens=16, tools=TOOLS, tool_choice={"type": "none"},
                                   messages=turn, extra_body=GREEDY)
    assert reply.content[0].type == "text" and reply.content[0].text and reply.stop_reason != "tool_use"
    n_with = client.messages.count_tokens(model=MODEL_NAME, messages=turn).input_tokens
    n_other = client.messages.count_tokens(model=MODEL_NAME, messages=turn[:2] + [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id, "content": "rain"}]}]).input_tokens
    assert n_with > n_other  # the result reaches the prompt
    # streamed, the call arrives as a tool_use block with its input as JSON
    with client.messages.stream(model=MODEL_NAME, max_tokens=40, tools=TOOLS, messages=question,
                                tool_choice={"type": "any"}, extra_body=GREEDY) as st:
        events = [e.type for e in st]
        final = st.get_final_message()
    assert final.stop_reason == "tool_use" and final.content[-1].type == "tool_use"
    jsonschema.validate(final.content[-1].input, WEATHER)
    assert "input_json" in events


def test_stop_sequences(client):
    m = client.messages.create(model=MODEL_NAME, max_tokens=40, stop_sequences=["."],
                               messages=[{"role": "user", "content": "Describe the sky in two sentences."}],
                               extra_body=GREEDY)
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == "." and "." not in m.content[0].text


def test_output_format_json_schema(client):
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
    m = client.messages.create(model=MODEL_NAME, max_tokens=30, messages=[{"role": "user", "content": "2 + 3?"}],
                               output_config={"format": {"type": "json_schema", "schema": schema}}, extra_body=GREEDY)
    jsonschema.validate(json.loads(m.content[0].text), schema)


@pytest.mark.parametrize("body, field", [
    ({"messages": [{"role": "user", "content": "x"}]}, "'max_tokens'"),
    ({"max_tokens": 4, "messages": []}, "'messages'"),
    ({"max_tokens": 4, "messages": [{"role": "system", "content": "x"}]}, "'messages[0].role'"),
    ({"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
     "'messages[0].content[0].type'"),
    ({"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "tool_use", "id": "a", "name": "f",
                                                                   "input": {}}]}]}, "'messages[0].content[0]'"),
    ({"max_tokens": 4, "temperature": 1.5, "messages": [{"role": "user", "content": "x"}]}, "'temperature'"),
    ({"max_tokens": 4, "tools": TOOLS, "tool_choice": {"type": "tool", "name": "nope"},
      "messages": [{"role": "user", "content": "x"}]}, "'tool_choice.name'"),
    ({"max_tokens": 4, "tool_choice": {"type": "any"}, "messages": [{"role": "user", "content": "x"}]}, "'tool_choice'"),
    ({"max_tokens": 4, "tools": [{"type": "web_search_20250305", "name": "web_search"}],
      "messages": [{"role": "user", "content": "x"}]}, "'tools[0].type'"),
])
def test_bad_input_is_a_clear_400(server, client, body, field):
    r = requests.post(server.url + "/v1/messages", json=dict(body, model=MODEL_NAME), timeout=30)
    assert r.status_code == 400, r.text
    j = r.json()
    assert j["type"] == "error" and j["error"]["type"] == "invalid_request_error" and field in j["error"]["message"]
    if "max_tokens" in body:  # (the client requires it, and takes sampling fields through extra_body)
        with pytest.raises(anthropic.BadRequestError):
            kw = {k: v for k, v in body.items() if k != "temperature"}
            client.messages.create(**kw, model=MODEL_NAME, extra_body={k: v for k, v in body.items() if k == "temperature"})
    assert requests.get(server.url + "/healthz", timeout=5).status_code == 200


def test_errors_and_metrics(server, client):
    with pytest.raises(anthropic.NotFoundError) as e:
        client.messages.create(model="no-such-model", max_tokens=2, messages=[{"role": "user", "content": "x"}])
    assert e.value.body["error"]["type"] == "not_found_error"
    r = requests.post(server.url + "/v1/messages/count_tokens", data=b"{\"messages\":", timeout=10)
    assert r.status_code == 400 and r.json()["type"] == "error"
    assert requests.get(server.url + "/v1/messages", timeout=5).status_code == 405
    before = server.metric("quarrel_requests_by_feature_total", feature="tools")
    client.messages.create(model=MODEL_NAME, max_tokens=2, tools=TOOLS, messages=[{"role": "user", "content": "x"}])
    assert server.metric("quarrel_requests_by_feature_total", feature="tools") == before + 1
    assert server.metric("quarrel_requests_total", model=MODEL_NAME, endpoint="/v1/messages/count_tokens", code="200") >= 1


def test_count_tokens_with_tools(client):
    """count_tokens renders the request as /v1/messages does: with the tools' description and a tool round trip."""
    turn = [{"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                               "input": {"city": "Paris"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}]}]
    n = client.messages.count_tokens(model=MODEL_NAME, tools=TOOLS, messages=turn).input_tokens
    m = client.messages.create(model=MODEL_NAME, max_tokens=1, tools=TOOLS, messages=turn)
    assert n == m.usage.input_tokens
    assert n > client.messages.count_tokens(model=MODEL_NAME, messages=turn).input_tokens  # the tools are in the prompt
