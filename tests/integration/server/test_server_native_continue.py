"""The native API's additions for the web UI: `continue_final_message` (Continue: the last assistant message is
continued, not answered) on /api/stream and /ws, its 400s, and /healthz's `auth` (false without keys)."""
import json

import requests
import websockets.sync.client as ws_client

COUNT = [{"role": "user", "content": "Count from 1 to 10, separated by commas."},
         {"role": "assistant", "content": "1, 2, 3, 4,"}]


def stream(url, body):
    r = requests.post(url + "/api/stream", json=body, timeout=60, stream=True)
    assert r.status_code == 200, r.text
    frames = [json.loads(l[5:]) for l in r.iter_lines(decode_unicode=True) if l.startswith("data:") and l[5:].strip() != "[DONE]"]
    return "".join(f.get("token", "") for f in frames if not f.get("complete")), frames[-1]


def test_continue_final_message(server):
    body = {"messages": COUNT, "continue_final_message": True, "max_tokens": 8, "temperature": 0}
    text, done = stream(server.url, body)
    assert done["complete"] and done["usage"]["completion_tokens"] >= 1
    # the reply goes on from "4," (the turn stays open): the next numbers, not a new answer from 1
    assert text.lstrip().startswith("5"), text
    # without it the same messages get a new assistant turn: the prompt is longer (the closed turn and a new header)
    _, closed = stream(server.url, dict(body, continue_final_message=False))
    assert closed["usage"]["prompt_tokens"] > done["usage"]["prompt_tokens"]
    # the same over /ws
    with ws_client.connect(server.url.replace("http", "ws") + "/ws") as ws:
        ws.send(json.dumps({"type": "inference", "payload": body}))
        got = ""
        while True:
            m = json.loads(ws.recv(timeout=60))
            if m["type"] == "inference" and not m["payload"]["complete"]:
                got += m["payload"]["token"]
            elif m["type"] == "inference":
                break
    assert got == text


def test_continue_final_message_errors(server):
    for body in ({"messages": COUNT[:1], "continue_final_message": True},  # last message is the user's
                 {"prompt": "1, 2,", "continue_final_message": True},  # no messages
                 {"messages": COUNT, "continue_final_message": "yes"}):  # not a boolean
        r = requests.post(server.url + "/api/stream", json=body, timeout=30)
        assert r.status_code == 400 and r.json()["error"]["code"] == "INVALID_REQUEST", (body, r.text)
    assert requests.get(server.url + "/healthz", timeout=5).json() == {"status": "ok", "auth": False}
