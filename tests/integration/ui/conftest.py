"""Fixtures of the web UI tests: the real `quarrel serve` on SmolLM2 and Debian's headless chromium
driven by selenium (defined in ui_helpers.py, a uniquely named module: several conftest modules
share one pytest session under tests/integration)."""
from ui_helpers import browser, download_dir, page, server, smollm  # noqa: F401
