"""The /ws protocol with the `websockets` client: streaming messages, stop mid-stream (KV blocks
freed), ping/pong (frames and messages), status, metrics, and bad frames (invalid UTF-8 -> 1007,
too large -> 1009, malformed JSON -> error message)."""
import json
import time

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from conftest import MODEL_NAME


def ws_url(server):
    return server.url.replace("http", "ws") + "/ws"


def recv(ws):
    return json.loads(ws.recv(timeout=60))


def test_stream_fields(server):
    with connect(ws_url(server)) as ws:
        ws.send(json.dumps({"type": "inference", "payload": {"model": MODEL_NAME, "prompt": "Hello", "max_tokens": 5,
                                                             "temperature": 0, "top_k": 1, "top_p": 1.0, "stream": True}}))
        msgs = []
        while True:
            m = recv(ws)
            msgs.append(m)
            if m["payload"]["complete"]:
                break
        toks = msgs[:-1]
        assert len(toks) == 5
        for m in toks:
            assert m["type"] == "inference"
            assert set(m["payload"]) >= {"token", "token_id", "complete", "tokens_per_sec"}
            assert isinstance(m["payload"]["token_id"], int) and m["payload"]["complete"] is False
        final = msgs[-1]["payload"]
        assert final["finish_reason"] == "length" and final["usage"]["completion_tokens"] == 5
        # a second request on the same connection, not streamed
        ws.send(json.dumps({"type": "inference", "payload": {"prompt": "Hello", "max_tokens": 5, "temperature": 0,
                                                             "stream": False}}))
        m = recv(ws)
        assert m["payload"]["complete"] is True
        assert m["payload"]["token"] == "".join(t["payload"]["token"] for t in toks)


def test_stop_mid_stream_frees_blocks(server):
    with connect(ws_url(server)) as ws:
        ws.send(json.dumps({"type": "inference", "payload": {"prompt": "Count to one thousand: 1, 2, 3,",
                                                             "max_tokens": 4000, "temperature": 0, "ignore_eos": True}}))
        for _ in range(3):
            assert recv(ws)["payload"]["complete"] is False
        ws.send(json.dumps({"type": "stop"}))
        while True:
            m = recv(ws)
            if m["payload"]["complete"]:
                break
        assert m["payload"]["finish_reason"] == "cancelled"
        assert m["payload"]["usage"]["completion_tokens"] < 4000
    deadline = time.time() + 10
    while server.metric("quarrel_kv_blocks_used", model=MODEL_NAME) != 0 and time.time() < deadline:
        time.sleep(0.05)
    assert server.metric("quarrel_kv_blocks_used", model=MODEL_NAME) == 0


def test_ping_status_metrics(server):
    with connect(ws_url(server)) as ws:
        ws.ping(b"abc").wait(10)  # protocol-level ping frame -> pong frame
        ws.send(json.dumps({"type": "ping", "payload": {"n": 1}}))
        assert recv(ws) == {"type": "pong", "payload": {"n": 1}}
        ws.send(json.dumps({"type": "status"}))
        m = recv(ws)
        assert m["type"] == "status" and m["payload"]["busy"] is False
        assert m["payload"]["models"][0]["name"] == MODEL_NAME
        ws.send(json.dumps({"type": "metrics"}))
        m = recv(ws)
        assert m["type"] == "metrics" and "quarrel_requests_total" in m["payload"]["prometheus"]
        ws.send(json.dumps({"type": "stop"}))
        assert recv(ws)["payload"]["busy"] is False


def test_bad_messages(server):
    with connect(ws_url(server)) as ws:
        ws.send("{not json")
        m = recv(ws)
        assert m["type"] == "error" and m["payload"]["code"] == "INVALID_REQUEST"
        ws.send(json.dumps({"type": "frobnicate"}))
        assert recv(ws)["payload"]["code"] == "INVALID_REQUEST"
        ws.send(json.dumps({"type": "inference", "payload": {"prompt": "x", "temperature": "hot"}}))
        assert "temperature" in recv(ws)["payload"]["message"]
        ws.send(json.dumps({"type": "inference", "payload": {"model": "missing", "prompt": "x"}}))
        assert recv(ws)["payload"]["code"] == "MODEL_NOT_FOUND"
    with connect(ws_url(server)) as ws:
        ws.send(b'{"type": "status", "x": "\xff\xfe"}'.decode("latin-1").encode("latin-1"))  # binary frame
        assert recv(ws)["type"] == "error"
    # invalid UTF-8 in a text frame: the client library refuses to send one, so write the frame by hand
    import socket, base64, os as _os
    host, port = server.url[7:].split(":")
    s = socket.create_connection((host, int(port)), timeout=10)
    key = base64.b64encode(_os.urandom(16)).decode()
    s.sendall((f"GET /ws HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    resp = s.recv(4096)
    assert b"101" in resp.split(b"\r\n")[0]
    payload = b'{"type":"status","x":"\xff"}'
    mask = b"\x01\x02\x03\x04"
    s.sendall(bytes([0x81, 0x80 | len(payload)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
    data = b""
    end = time.time() + 10
    while time.time() < end:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
        if b"\x88" in data:
            break
    assert b"UTF-8" in data and b"\x03\xef" in data  # error message, then close 1007
    s.close()


def test_too_large_frame(server):
    with connect(ws_url(server), max_size=None) as ws:
        ws.send("x" * (1 << 20 + 1) + " " * 10)
        with pytest.raises(ConnectionClosed) as e:
            while True:
                ws.recv(timeout=30)
        assert e.value.rcvd is not None and e.value.rcvd.code == 1009
