"""Helpers shared by the integration tests that start `quarrel serve` (server/, ui/): a uniquely named
module (several conftest.py files share one pytest session, so conftest modules are not importable)."""
import time

import requests


def wait_healthy(proc, url, logs, timeout=60):
    """Waits until GET url/healthz answers 200; raises with the server's log (logs(): str) if the
    process exits first or the time runs out."""
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"quarrel serve exited with {proc.returncode}:\n{logs()}")
        try:
            if requests.get(url + "/healthz", timeout=1).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"quarrel serve did not start:\n{logs()}")
