"""OpenAI Responses API (/v1/responses) through the real `openai` client: plain and streamed responses, the
instructions / input items / previous_response_id conversation (greedy output equal to /v1/chat/completions
on the same conversation), the bounded store (retrieve, delete, store false), function tools (forced call
round trip), text.format json_schema, clear 4xx errors, feature metrics."""
import json

import jsonschema
import openai
import pytest
import requests

from conftest import MODEL_NAME

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [{"type": "function", "name": "get_weather", "description": "The weather of a city", "parameters": WEATHER}]


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)


def chat_greedy(client, messages, n):
    r = client.chat.completions.create(model=MODEL_NAME, messages=messages, max_tokens=n, temperature=0)
    return r.choices[0].message.content


def test_create_equals_chat(client):
    r = client.responses.create(model=MODEL_NAME, instructions="Answer briefly.", input="What is the capital of France?",
                                max_output_tokens=12, temperature=0)
    assert r.object == "response" and r.id.startswith("resp_") and r.status in ("completed", "incomplete")
    assert r.model == MODEL_NAME and r.instructions == "Answer briefly." and r.output[0].type == "message"
    assert 0 < r.usage.output_tokens <= 12 and r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    want = chat_greedy(client, [{"role": "system", "content": "Answer briefly."},
                                {"role": "user", "content": "What is the capital of France?"}], 12)
    assert r.output_text == want and want
    if r.status == "incomplete":
        assert r.incomplete_details.reason == "max_output_tokens" and r.usage.output_tokens == 12


def test_stream_events(client):
    kw = dict(model=MODEL_NAME, input=[{"role": "user", "content": [{"type": "input_text", "text": "Name a color."}]}],
              max_output_tokens=10, temperature=0)
    whole = client.responses.create(**kw)
    events = list(client.responses.create(stream=True, **kw))
    types = [e.type for e in events]
    assert types[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert types[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed" if whole.status == "completed" else "response.incomplete"]
    seq = [e.sequence_number for e in events]
    assert seq == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response
    assert deltas == final.output_text == whole.output_text and deltas
    assert events[0].response.status == "in_progress" and final.usage.output_tokens == whole.usage.output_tokens


def test_previous_response_id_and_store(client, server):
    r1 = client.responses.create(model=MODEL_NAME, input="My name is Ada.", max_output_tokens=8, temperature=0)
    r2 = client.responses.create(model=MODEL_NAME, input="What is my name?", previous_response_id=r1.id,
                                 max_output_tokens=8, temperature=0)
    assert r2.previous_response_id == r1.id
    want = chat_greedy(client, [{"role": "user", "content": "My name is Ada."},
                                {"role": "assistant", "content": r1.output_text},
                                {"role": "user", "content": "What is my name?"}], 8)
    assert r2.output_text == want
    assert r2.usage.input_tokens > r1.usage.input_tokens + r1.usage.output_tokens
    # retrieve, delete, then 404
    got = client.responses.retrieve(r1.id)
    assert got.id == r1.id and got.output_text == r1.output_text
    client.responses.delete(r1.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r1.id)
    with pytest.raises(openai.NotFoundError) as e:
        client.responses.create(model=MODEL_NAME, input="x", previous_response_id=r1.id, max_output_tokens=2)
    assert e.value.body["code"] == "RESPONSE_NOT_FOUND" and r1.id in e.value.body["message"]
    r3 = client.responses.create(model=MODEL_NAME, input="Hi", store=False, max_output_tokens=2)
    assert r3.store is False
    assert requests.get(server.url + "/v1/responses/" + r3.id, timeout=10).status_code == 404
    assert requests.delete(server.url + "/v1/responses/" + r3.id, timeout=10).status_code == 404


def test_forced_function_call_round_trip(client):
    r = client.responses.create(model=MODEL_NAME, input="What is the weather in Paris?", tools=TOOLS,
                                tool_choice={"type": "function", "name": "get_weather"}, max_output_tokens=40,
                                temperature=0)
    calls = [o for o in r.output if o.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather" and calls[0].call_id.startswith("call_")
    args = json.loads(calls[0].arguments)
    jsonschema.validate(args, WEATHER)
    # the result goes back as a function_call_output item of the next turn
    r2 = client.responses.create(model=MODEL_NAME, previous_response_id=r.id, tools=TOOLS, tool_choice="none",
                                 input=[{"type": "function_call_output", "call_id": calls[0].call_id,
                                         "output": "sunny, 21 C"}], max_output_tokens=16, temperature=0)
    assert r2.output[0].type == "message" and r2.output_text
    plain = client.responses.create(model=MODEL_NAME, input="What is the weather in Paris?", max_output_tokens=1)
    assert r2.usage.input_tokens > plain.usage.input_tokens + r.usage.output_tokens  # the call and its result
    # the same conversation given whole as items gives the same reply
    r3 = client.responses.create(model=MODEL_NAME, tools=TOOLS, tool_choice="none", max_output_tokens=16, temperature=0,
                                 input=[{"role": "user", "content": "What is the weather in Paris?"},
                                        {"type": "function_call", "call_id": calls[0].call_id, "name": "get_weather",
                                         "arguments": calls[0].arguments},
                                        {"type": "function_call_output", "call_id": calls[0].call_id,
                                         "output": "sunny, 21 C"}])
    assert r3.output_text == r2.output_text


def test_forced_call_streams_arguments(client):
    events = list(client.responses.create(model=MODEL_NAME, input="Weather in Rome?", tools=TOOLS, tool_choice="required",
                                          max_output_tokens=40, temperature=0, stream=True))
    types = [e.type for e in events]
    assert "response.function_call_arguments.done" in types and types[-1] == "response.completed"
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    jsonschema.validate(json.loads(done.arguments), WEATHER)
    assert events[-1].response.output[-1].arguments == done.arguments


def test_text_format_json_schema(client):
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
    r = client.responses.create(model=MODEL_NAME, input="What is 2 + 3? Reply in JSON.", max_output_tokens=30,
                                temperature=0, text={"format": {"type": "json_schema", "name": "a", "schema": schema}})
    jsonschema.validate(json.loads(r.output_text), schema)
    assert r.text.format.type == "json_schema"


@pytest.mark.parametrize("body, field", [
    ({}, "'input' is required"),
    ({"input": []}, "'input' must be"),
    ({"input": [{"role": "robot", "content": "x"}]}, "'input[0].role'"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "'input[0].content[0].type'"),
    ({"input": [{"type": "reasoning"}]}, "'input[0].type'"),
    ({"input": "x", "max_output_tokens": 0}, "'max_output_tokens'"),
    ({"input": "x", "temperature": 3}, "'temperature'"),
    ({"input": "x", "tools": [{"type": "web_search"}]}, "'tools[0].type'"),
    ({"input": "x", "tools": TOOLS, "tool_choice": {"type": "function", "name": "nope"}}, "'tool_choice.name'"),
    ({"input": "x", "tool_choice": "required"}, "'tool_choice'"),
    ({"input": "x", "text": {"format": {"type": "json_schema", "schema": {"type": "object", "frob": 1}}}},
     "'text.format.schema'"),
    ({"input": "x", "metadata": {"a": 1}}, "'metadata.a'"),
])
def test_bad_input_is_a_clear_400(server, body, field):
    r = requests.post(server.url + "/v1/responses", json=dict(body, model=MODEL_NAME), timeout=30)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "INVALID_REQUEST" and err["type"] == "invalid_request_error" and field in err["message"]
    assert requests.post(server.url + "/v1/responses", data=b"{", timeout=10).status_code == 400
    assert requests.get(server.url + "/healthz", timeout=5).status_code == 200


def test_routes_methods_and_metrics(server, client):
    assert requests.get(server.url + "/v1/responses", timeout=5).status_code == 405
    r = requests.put(server.url + "/v1/responses/resp_x", timeout=5)
    assert r.status_code == 405 and "DELETE" in r.headers["Allow"]
    prev = server.metric("quarrel_requests_by_feature_total", feature="previous_response_id")
    tools = server.metric("quarrel_requests_by_feature_total", feature="tool_choice_required")
    r = client.responses.create(model=MODEL_NAME, input="Hi", max_output_tokens=2)
    client.responses.create(model=MODEL_NAME, input="Hi", max_output_tokens=30, previous_response_id=r.id, tools=TOOLS,
                            tool_choice="required")
    assert server.metric("quarrel_requests_by_feature_total", feature="previous_response_id") == prev + 1
    assert server.metric("quarrel_requests_by_feature_total", feature="tool_choice_required") == tools + 1
    assert server.metric("quarrel_requests_total", model=MODEL_NAME, endpoint="/v1/responses", code="200") >= 2
