"""Issue 32 (hardening): the key store's file mode, GET /v1/models/{id}, per-key token limits on every
HTTP route, per-message limits and key validity on /ws, the /ws Origin check and the Host check."""
import json
import os
import stat
import time

import openai
import pytest
import requests

from conftest import MODEL_NAME
from test_server_keys import keys


def test_key_store_mode_0600(quarrel_bin, tmp_path):
    db = str(tmp_path / "keys.db")
    old = os.umask(0o022)
    try:
        keys(quarrel_bin, db, "create", "--name", "a")
        assert stat.S_IMODE(os.stat(db).st_mode) == 0o600
        os.chmod(db, 0o644)  # a store loosened by hand is tightened on the next write
        keys(quarrel_bin, db, "create", "--name", "b")
        assert stat.S_IMODE(os.stat(db).st_mode) == 0o600
    finally:
        os.umask(old)


def test_openai_models_retrieve(server):
    c = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0)
    m = c.models.retrieve(MODEL_NAME)
    assert m.id == MODEL_NAME and m.object == "model" and m.owned_by == "quarrel"
    assert m.id in [x.id for x in c.models.list().data]
    with pytest.raises(openai.NotFoundError):
        c.models.retrieve("no-such-model")
    r = requests.get(server.url + "/v1/models/no-such-model", timeout=5)
    e = r.json()["error"]
    assert r.status_code == 404 and e["code"] == "MODEL_NOT_FOUND" and e["type"] == "not_found_error"
    assert "no-such-model" in e["message"] and "param" in e
    assert requests.post(server.url + "/v1/models/" + MODEL_NAME, timeout=5).status_code == 405
