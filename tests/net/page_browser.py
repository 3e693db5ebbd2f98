#!/usr/bin/env python3
"""The browser page in headless Chromium, driven over the WebDriver HTTP protocol (stdlib only).

Starts `rz serve --port 0` on the given model, loads /, submits a prompt, and checks that the
answer streams in (the output grows over several polls) and that the page reaches its done
state; then saves a screenshot, stops the server with SIGTERM and checks it exits 0.

With --api-key KEY the server needs that key (`rz serve --api-key KEY`), and the page must first
say so (status "API key needed" and a message), refuse a key a browser cannot send and say that
the server refused a wrong one, then connect once KEY is typed into its password field (+Enter)
and stream the answer as above; the key is in sessionStorage, not localStorage nor the URL, and a
reload connects again with it without typing.

With --tls CERT KEY the server serves HTTPS and WSS with that certificate (`rz serve --tls-cert
CERT --tls-key KEY`, a self-signed one the browser is told to accept): the page is loaded over
https:// and must open its WebSocket over wss:// itself.

    python tests/net/page_browser.py RZ_BIN MODEL SCREENSHOT.png [--api-key KEY] [--tls CERT KEY]

Exit 0 on success; 1 with a reason on stderr otherwise (a missing chromium or chromedriver is a
failure: scripts/setup.sh installs them). Every wait is bounded.
"""
import base64
import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
ELEMENT_KEY = "element-6066-11e4-a52e-4f735466cecf"


def fail(msg):
    print("page_browser: " + msg, file=sys.stderr)
    sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class WebDriver:
    def __init__(self, port):
        self.base = f"http://127.0.0.1:{port}"
        self.sid = None

    def call(self, method, path, body=None, timeout=30):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read() or b"null")["value"]

    def start(self, accept_insecure_certs=False):
        caps = {"capabilities": {"alwaysMatch": {
            "browserName": "chrome", "acceptInsecureCerts": accept_insecure_certs,
            "goog:chromeOptions": {"binary": CHROMIUM, "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1200,820", "--force-device-scale-factor=1"]}}}}
        self.sid = self.call("POST", "/session", caps, timeout=60)["sessionId"]

    def s(self, path):
        return f"/session/{self.sid}{path}"

    def js(self, script, *args):
        return self.call("POST", self.s("/execute/sync"), {"script": script, "args": list(args)})

    def element(self, css):
        return self.call("POST", self.s("/element"), {"using": "css selector", "value": css})[ELEMENT_KEY]

    def type_into(self, css, text, clear=False):
        el = self.element(css)
        if clear:
            self.call("POST", self.s(f"/element/{el}/clear"), {})
        self.call("POST", self.s(f"/element/{el}/value"), {"text": text})


def start_driver():
    """Starts chromedriver on a free port; returns (its process, a WebDriver once it is ready)."""
    dport = free_port()
    proc = subprocess.Popen([DRIVER, f"--port={dport}"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    wd = WebDriver(dport)

    def driver_up():
        try:
            return wd.call("GET", "/status", timeout=2)["ready"]
        except OSError:
            return False
    wait_for(driver_up, 30, "chromedriver")
    return proc, wd


def wait_for(pred, seconds, what):
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    fail("timed out waiting for " + what)


ENTER = "\ue007"


def text_of(wd, element_id):
    return wd.js(f"return document.getElementById('{element_id}').textContent")


def wait_status(wd, want, seconds, what):
    wait_for(lambda: text_of(wd, "status") == want, seconds, f"{what} (status {want!r}); "
             f"status is {text_of(wd, 'status')!r}")


def key_message(wd):
    """The key notice's text, or None while it is hidden."""
    return wd.js("const m = document.getElementById('keymsg');"
                 "return m.hidden ? null : m.textContent;")


def generate(wd):
    """Sends a prompt and checks that the answer streams in; returns (tokens, visible steps, tps)."""
    # Greedy and a bounded length, so the run is repeatable.
    wd.js("document.getElementById('temperature').value = '0';"
          "document.getElementById('max_tokens').value = '120';")
    wd.type_into("#prompt", "Write a short poem about the sea.")
    wd.call("POST", wd.s(f"/element/{wd.element('#send')}/click"), {})

    # 120 tokens take a few seconds in a Release build; sanitizer builds run the model many
    # times slower and scale this bound (scripts/sanitize.sh sets RZ_TEST_TIME_SCALE).
    scale = float(os.environ.get("RZ_TEST_TIME_SCALE", "1"))
    lengths, status, until = [], "", time.monotonic() + 60 * scale
    while time.monotonic() < until:
        status, n = wd.js("const o = document.getElementById('output');"
                          "return [document.getElementById('status').textContent,"
                          "        o ? o.textContent.length : -1];")
        lengths.append(n)
        if status != "streaming":
            break
        time.sleep(0.03)
    if status != "done":
        fail(f"the page ended in status {status!r}, not 'done'")
    growth = sorted(set(n for n in lengths if n > 0))
    if len(growth) < 3:
        fail(f"the output did not grow while streaming: lengths seen {lengths}")
    if lengths != sorted(lengths):
        fail(f"the output shrank while streaming: {lengths}")
    final = text_of(wd, "output")
    tps = text_of(wd, "tps")
    ntok = int(text_of(wd, "ntok"))
    if not final.strip() or ntok < 2 or not re.match(r"^\d+(\.\d+)?$", tps):
        fail(f"no final answer/stats: text {final!r}, tokens {ntok}, tokens/s {tps!r}")
    return ntok, len(growth), tps


def ask_for_key(wd, key):
    """The page on a server that needs `key`: it asks for one, refuses what it cannot send, says
    a wrong one was refused, then connects with `key` (kept in sessionStorage only)."""
    wait_status(wd, "API key needed", 20, "the page to ask for an API key")
    msg = key_message(wd)
    if not msg or "needs an API key" not in msg:
        fail(f"no message asking for the key: {msg!r}")
    if wd.js("return document.getElementById('key').type") != "password":
        fail("the key field is not a password field")
    time.sleep(1.5)  # it waits for the key instead of retrying (the first retry is at 0.5 s)
    if text_of(wd, "status") != "API key needed":
        fail(f"the page went on after asking for the key: status {text_of(wd, 'status')!r}")

    wd.type_into("#key", "bad/key" + ENTER)  # '/' cannot be in a subprotocol token
    wait_status(wd, "API key not usable", 10, "the page to refuse a key it cannot send")
    if "characters" not in (key_message(wd) or ""):
        fail(f"no message about the key's characters: {key_message(wd)!r}")

    wd.type_into("#key", "wrong-key" + ENTER, clear=True)
    wait_status(wd, "API key refused", 20, "the page to say the server refused a wrong key")
    if "refused" not in (key_message(wd) or ""):
        fail(f"no message saying the key was refused: {key_message(wd)!r}")

    wd.type_into("#key", key + ENTER, clear=True)
    wait_status(wd, "ready", 20, "the page to connect with the key")
    if key_message(wd) is not None:
        fail(f"the key message is still shown: {key_message(wd)!r}")
    check_key_kept(wd, key)


def check_key_kept(wd, key):
    stored, local, href = wd.js(
        "const l = []; for (let i = 0; i < localStorage.length; i++) {"
        "  const k = localStorage.key(i); l.push(k + '=' + localStorage.getItem(k)); }"
        "return [sessionStorage.getItem('rz-api-key'), l.join(';'), location.href];")
    if stored != key:
        fail(f"the key is not in sessionStorage: {stored!r}")
    if key in local:
        fail("the key is in localStorage")
    if key in href:
        fail(f"the key is in the URL: {href}")


def main():
    args = sys.argv[1:]
    key, tls = None, None
    while len(args) > 3:
        if args[3] == "--api-key" and len(args) >= 5:
            key = args[4]
            args = args[:3] + args[5:]
        elif args[3] == "--tls" and len(args) >= 6:
            tls = (args[4], args[5])
            args = args[:3] + args[6:]
        else:
            break
    if len(args) != 3:
        fail("usage: page_browser.py RZ_BIN MODEL SCREENSHOT.png [--api-key KEY] [--tls CERT KEY]")
    rz, model, shot = args
    for path, what in ((CHROMIUM, "chromium"), (DRIVER, "chromedriver")):
        if not os.access(path, os.X_OK):
            fail(f"{what} is missing ({path}): run scripts/setup.sh")
    for path in (rz, model):
        if not os.path.exists(path):
            fail(f"{path} is missing (build rz; run scripts/setup.sh for the model)")

    extra = ["--api-key", key] if key else []
    if tls:
        extra += ["--tls-cert", tls[0], "--tls-key", tls[1]]
    scheme = "https" if tls else "http"
    server = subprocess.Popen([rz, "serve", "--model", model, "--port", "0", "--max-slots", "2",
                               "--ctx", "1024"] + extra, stderr=subprocess.PIPE, text=True)
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(l) for l in server.stderr], daemon=True).start()
    driver_proc = None
    try:
        port, until = None, time.monotonic() + 60
        while port is None and time.monotonic() < until:
            try:
                line = lines.get(timeout=1)
            except queue.Empty:
                if server.poll() is not None:
                    fail(f"rz serve exited with {server.returncode} before listening")
                continue
            m = re.search(scheme + r"://127\.0\.0\.1:(\d+)/", line)
            if m:
                port = int(m.group(1))
        if port is None:
            fail("rz serve did not print its port")

        driver_proc, wd = start_driver()
        wd.start(accept_insecure_certs=bool(tls))
        page = f"{scheme}://127.0.0.1:{port}/"
        wd.call("POST", wd.s("/url"), {"url": page})
        if key:
            ask_for_key(wd, key)
        else:
            wait_status(wd, "ready", 20, "the page to connect")
            if key_message(wd) is not None:
                fail(f"a key message on a server without keys: {key_message(wd)!r}")
        ntok, steps, tps = generate(wd)
        png = base64.b64decode(wd.call("GET", wd.s("/screenshot")))
        with open(shot, "wb") as f:
            f.write(png)
        if key:
            # A reload keeps the key (sessionStorage) and connects with it at once.
            wd.call("POST", wd.s("/url"), {"url": page})
            wait_status(wd, "ready", 20, "the reloaded page to connect with the kept key")
            if wd.js("return document.getElementById('key').value") != key:
                fail("the reloaded page does not show the kept key")
            check_key_kept(wd, key)
        if tls and wd.js("return location.protocol") != "https:":
            fail("the page was not loaded over https")
        wd.call("DELETE", wd.s(""))
        print("page_browser: " + ("over TLS (https, wss), " if tls else "") +
              ("asked for the key, then " if key else "") +
              f"streamed {ntok} tokens in {steps} visible steps ({tps} tokens/s); "
              f"screenshot {shot}")
    finally:
        if driver_proc:
            driver_proc.terminate()
            driver_proc.wait(10)
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
            try:
                code = server.wait(30)
            except subprocess.TimeoutExpired:
                server.kill()
                fail("rz serve did not exit within 30 s of SIGTERM")
            if code != 0:
                fail(f"rz serve exited with {code} after SIGTERM")
    return 0


if __name__ == "__main__":
    sys.exit(main())
