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
