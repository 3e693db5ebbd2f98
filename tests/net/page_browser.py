#!/usr/bin/env python3
"""The browser page in headless Chromium, driven over the WebDriver HTTP protocol (stdlib only).

Starts `rz serve --port 0` on the given model, loads /, submits a prompt, and checks that the
answer streams in (the output grows over several polls) and that the page reaches its done
state; then saves a screenshot, stops the server with SIGTERM and checks it exits 0.

    python tests/net/page_browser.py RZ_BIN MODEL SCREENSHOT.png

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

    def start(self):
        caps = {"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
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


def main():
    if len(sys.argv) != 4:
        fail("usage: page_browser.py RZ_BIN MODEL SCREENSHOT.png")
    rz, model, shot = sys.argv[1:]
    for path, what in ((CHROMIUM, "chromium"), (DRIVER, "chromedriver")):
        if not os.access(path, os.X_OK):
            fail(f"{what} is missing ({path}): run scripts/setup.sh")
    for path in (rz, model):
        if not os.path.exists(path):
            fail(f"{path} is missing (build rz; run scripts/setup.sh for the model)")

    server = subprocess.Popen([rz, "serve", "--model", model, "--port", "0", "--max-slots", "2",
                               "--ctx", "1024"], stderr=subprocess.PIPE, text=True)
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
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)/", line)
            if m:
                port = int(m.group(1))
        if port is None:
            fail("rz serve did not print its port")

        driver_proc, wd = start_driver()
        wd.start()
        wd.call("POST", wd.s("/url"), {"url": f"http://127.0.0.1:{port}/"})
        wait_for(lambda: wd.js("return document.getElementById('status').textContent") == "ready",
                 20, "the page to connect (status 'ready')")
        # Greedy and a bounded length, so the run is repeatable.
        wd.js("document.getElementById('temperature').value = '0';"
              "document.getElementById('max_tokens').value = '120';")
        wd.call("POST", wd.s(f"/element/{wd.element('#prompt')}/value"),
                {"text": "Write a short poem about the sea."})
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
        final = wd.js("return document.getElementById('output').textContent")
        tps = wd.js("return document.getElementById('tps').textContent")
        ntok = int(wd.js("return document.getElementById('ntok').textContent"))
        if not final.strip() or ntok < 2 or not re.match(r"^\d+(\.\d+)?$", tps):
            fail(f"no final answer/stats: text {final!r}, tokens {ntok}, tokens/s {tps!r}")
        png = base64.b64decode(wd.call("GET", wd.s("/screenshot")))
        with open(shot, "wb") as f:
            f.write(png)
        wd.call("DELETE", wd.s(""))
        print(f"page_browser: streamed {ntok} tokens in {len(growth)} visible steps "
              f"({tps} tokens/s); screenshot {shot}")
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
