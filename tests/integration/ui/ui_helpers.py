"""Helpers of the web UI tests (fixtures in conftest.py): the real `quarrel serve` on SmolLM2 (as tests/integration/server)
and Debian's headless `chromium` driven by selenium through `chromedriver`.

$QUARREL_BIN (default build/quarrel), $QUARREL_MODELS_DIR (default ~/.cache/quarrel/models),
$CHROMIUM (default /usr/bin/chromium), $CHROMEDRIVER (default /usr/bin/chromedriver).
Screenshots go to tests/artifacts/ (kept by CI as artifacts).
"""
import json
import os
import pathlib
import signal
import socket
import subprocess
import tempfile
import threading
import time

import pytest
import requests
from serve_util import wait_healthy
from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException, TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

ROOT = pathlib.Path(__file__).resolve().parents[3]
ARTIFACTS = ROOT / "tests" / "artifacts"
SMOLLM = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct.Q4_1"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One `quarrel serve` process on 127.0.0.1:port (a free one unless given)."""

    def __init__(self, binary, model, args=(), port=None):
        self.binary, self.model, self.args = binary, model, list(args)
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.NamedTemporaryFile(prefix="quarrel-ui-", suffix=".log", delete=False)
        self.proc = None
        self.start()

    def start(self, timeout=60):
        cmd = [self.binary, "serve", "--host", "127.0.0.1", "--port", str(self.port), "-t", "2", "-m", self.model,
               "--parallel", "2", *self.args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.log)
        wait_healthy(self.proc, self.url, self.logs, timeout)

    def kill(self):
        """SIGKILL: the server vanishes without closing its sockets cleanly."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def logs(self):
        with open(self.log.name, encoding="utf-8", errors="replace") as f:
            return f.read()

    def metric(self, name, **labels):
        lab = ",".join(f'{k}="{v}"' for k, v in labels.items())
        key = f"{name}{{{lab}}}" if lab else name
        for line in requests.get(self.url + "/metrics", timeout=10).text.splitlines():
            if line.startswith(key + " "):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        os.unlink(self.log.name)


class WsGate:
    """A TCP forwarder on 127.0.0.1:port to the server's port that can refuse WebSocket upgrades (403, as
    a proxy that blocks WebSocket does) while passing plain HTTP through; an upstream that is down closes
    the client's connection. block_ws switches the refusal; ws_upgrades counts the upgrades let through."""

    def __init__(self, upstream_port):
        self.upstream = upstream_port
        self.block_ws = False
        self.ws_upgrades = 0
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        up = None
        try:
            c.settimeout(30)
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 65536:
                chunk = c.recv(4096)
                if not chunk:
                    return
                head += chunk
            is_ws = b"upgrade: websocket" in head.lower()
            if is_ws and self.block_ws:
                c.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                return
            up = socket.create_connection(("127.0.0.1", self.upstream), timeout=5)
            if is_ws:
                self.ws_upgrades += 1
            up.sendall(head)
            c.settimeout(None)
            up.settimeout(None)
            t = threading.Thread(target=self._pump, args=(up, c), daemon=True)
            t.start()
            self._pump(c, up)
            t.join()
        except OSError:
            pass
        finally:
            for s in (c, up):
                if s:
                    s.close()

    @staticmethod
    def _pump(src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):  # one side ended: end both (the peer pump's recv/sendall fails)
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self):
        self.sock.close()


@pytest.fixture(scope="session")
def smollm():
    d = pathlib.Path(os.environ.get("QUARREL_MODELS_DIR", str(pathlib.Path.home() / ".cache/quarrel/models")))
    path = d / SMOLLM
    if not path.exists():
        pytest.fail(f"model {path} not found: run scripts/setup.sh (or set QUARREL_MODELS_DIR)")
    return str(path)


@pytest.fixture(scope="session")
def server(quarrel_bin, smollm):
    s = Server(quarrel_bin, smollm)
    yield s
    s.stop()


@pytest.fixture(scope="session")
def download_dir():
    with tempfile.TemporaryDirectory(prefix="quarrel-ui-dl-") as d:
        yield pathlib.Path(d)


@pytest.fixture(scope="session")
def browser(download_dir):
    chromium = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    chromedriver = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")
    for p in (chromium, chromedriver):
        if not os.path.exists(p):
            pytest.fail(f"{p} not found: run scripts/setup.sh (Debian chromium and chromium-driver)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1280,800",
              "--hide-scrollbars", "--force-device-scale-factor=1", "--disable-extensions", "--no-first-run",
              "--password-store=basic"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    opts.add_experimental_option("prefs", {"download.default_directory": str(download_dir),
                                           "download.prompt_for_download": False})
    drv = webdriver.Chrome(service=Service(chromedriver), options=opts)
    drv.set_window_size(1280, 800)
    drv.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(download_dir)})
    yield drv
    drv.quit()


# Resolves (the async script's callback) once #conn's data-state is one of arguments[0] and, when arguments[1]
# is not null, its data-transport equals it: at once when it already is, else on the attribute change.
WAIT_CONN = """
const [states, transport, done] = [arguments[0], arguments[1], arguments[arguments.length - 1]];
const el = document.getElementById('conn');
const ok = () => states.includes(el.dataset.state) && (transport === null || el.dataset.transport === transport);
if (ok()) return done(true);
const mo = new MutationObserver(() => { if (ok()) { mo.disconnect(); done(true); } });
mo.observe(el, {attributes: true, attributeFilter: ['data-state', 'data-transport']});
"""


class Page:
    """Helpers over the driver for one page of the UI."""

    def __init__(self, drv, url):
        self.d, self.url = drv, url

    def open(self, query="", clear=True):
        self.d.get(self.url + "/" + query)
        if clear:
            self.d.execute_script("localStorage.clear(); sessionStorage.clear();")
            self.d.get(self.url + "/" + query)
        self.wait_state("connected")

    def js(self, script, *args):
        return self.d.execute_script(script, *args)

    def el(self, css):
        return self.d.find_element(By.CSS_SELECTOR, css)

    def els(self, css):
        return self.d.find_elements(By.CSS_SELECTOR, css)

    def text(self, css):
        """The first match's text; None while there is none or the UI is re-rendering it (a stale reference)."""
        try:
            return self.el(css).text
        except (NoSuchElementException, StaleElementReferenceException):
            return None

    def state(self):
        return self.js("return document.getElementById('conn').dataset.state")

    def wait(self, fn, timeout=30, msg=""):
        return WebDriverWait(self.d, timeout, poll_frequency=0.02).until(lambda d: fn(), msg)

    def wait_state(self, *states, timeout=30):
        self.wait_conn(states, timeout=timeout)

    def wait_conn(self, states, transport=None, timeout=30):
        """Waits for the connection state (#conn data-state, one of states) and, when given, its transport
        (#conn data-transport: ws | sse), on the page's own events: a MutationObserver on #conn answers the
        moment the attributes change, so short-lived states are not missed between polls. On time-out the
        assertion carries the UI's recent transitions (quarrelUI.history())."""
        states = [states] if isinstance(states, str) else list(states)
        self.d.set_script_timeout(timeout)
        try:
            self.d.execute_async_script(WAIT_CONN, states, transport)
        except TimeoutException:
            raise AssertionError(f"connection never became {states}/{transport or 'any'} within {timeout} s: "
                                 f"now {self.state()}/{self.transport()}; history {self.history()}") from None

    def transport(self):
        return self.js("return document.getElementById('conn').dataset.transport")

    def history(self):
        return self.js("return window.quarrelUI && quarrelUI.history ? quarrelUI.history() : null")

    def set_settings(self, **values):
        """Sets settings through the settings dialog (typed into the fields), then closes it."""
        self.el("#settings-open").click()
        ids = {"max_tokens": "set-max-tokens", "system": "set-system"}
        for k, v in values.items():
            field = self.el("#" + ids[k])
            field.clear()
            field.send_keys(str(v))
        self.close_settings()

    def close_settings(self):
        """Closes the settings dialog with its Close button, clicked in the page (no pointer coordinates: the
        dialog's content may still be settling under load), and waits until it is closed."""
        self.js("document.getElementById('settings-close').click()")
        self.wait(lambda: not self.js("return document.getElementById('settings').open"), 10, "settings stay open")

    def send(self, text):
        box = self.el("#prompt")
        box.send_keys(text)
        self.el("#send").click()

    def assistant_texts(self):
        return [e.text for e in self.els("#messages .msg.assistant .content")]

    def console_errors(self):
        return [e for e in self.d.get_log("browser") if e["level"] == "SEVERE"]


@pytest.fixture
def page(browser, server):
    browser.set_window_size(1280, 800)
    browser.get_log("browser")  # drop earlier entries
    p = Page(browser, server.url)
    yield p
    browser.execute_script("window.stop && window.stop()")


def write_json(path, data):
    path.write_text(json.dumps(data), encoding="utf-8")
    return str(path)
