#!/usr/bin/env python3
"""A page of another site must not drive a local rz: checked in headless Chromium (WebDriver).

Starts `rz serve --port 0` and a tiny page server on another port. Chromium resolves the made-up
name foreign.test to 127.0.0.1, so the page at http://foreign.test:OTHER/ is another site (a
non-loopback origin) whose script opens ws://127.0.0.1:PORT/v1/ws, as a hostile page would. The
upgrade must fail (rz answers 403; its rz_ws_origins_refused_total counts it), while the
server's own page at http://127.0.0.1:PORT/ still connects. A second rz started with
`--allowed-origins http://foreign.test:OTHER` lets the same page in (it gets a pong).

    python tests/net/page_origin_browser.py RZ_BIN MODEL

Exit 0 on success; 1 with a reason on stderr otherwise. Every wait is bounded.
"""
import http.server
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from page_browser import CHROMIUM, DRIVER, fail, start_driver, wait_for  # noqa: E402

FOREIGN_PAGE = """<!doctype html><meta charset="utf-8"><title>another site</title>
<script>
window.result = "pending";
const ws = new WebSocket("ws://127.0.0.1:%d/v1/ws");
ws.onopen = () => ws.send(JSON.stringify({type: "ping"}));
ws.onmessage = (ev) => { window.result = "message:" + ev.data; };
ws.onerror = () => { if (window.result === "pending") window.result = "error"; };
ws.onclose = (ev) => { if (window.result === "pending") window.result = "closed:" + ev.code; };
</script>"""


class PageServer:
    """Serves FOREIGN_PAGE for the rz port in `self.rz_port` on 127.0.0.1:port."""

    def __init__(self):
        self.rz_port = 0
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                body = (FOREIGN_PAGE % owner.rz_port).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


class Rz:
    def __init__(self, rz, model, extra):
        self.proc = subprocess.Popen([rz, "serve", "--model", model, "--port", "0",
                                      "--max-slots", "1", "--ctx", "256"] + extra,
                                     stderr=subprocess.PIPE, text=True)
        lines = queue.Queue()
        threading.Thread(target=lambda: [lines.put(l) for l in self.proc.stderr],
                         daemon=True).start()
        self.port, until = None, time.monotonic() + 60
        while self.port is None and time.monotonic() < until:
            try:
                line = lines.get(timeout=1)
            except queue.Empty:
                if self.proc.poll() is not None:
                    fail(f"rz serve exited with {self.proc.returncode} before listening")
                continue
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)/", line)
            if m:
                self.port = int(m.group(1))
        if self.port is None:
            self.stop()
            fail("rz serve did not print its port")

    def metric(self, name):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as r:
            body = r.read().decode()
        m = re.search(r"^" + re.escape(name) + r" (\S+)$", body, re.M)
        return float(m.group(1)) if m else None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def foreign_result(wd, pages):
    wd.call("POST", wd.s("/url"), {"url": f"http://foreign.test:{pages.port}/"})
    origin = wd.js("return location.origin")
    if origin != f"http://foreign.test:{pages.port}":
        fail(f"the foreign page loaded with origin {origin!r}")
    return wait_for(lambda: (lambda r: r if r != "pending" else None)(
        wd.js("return window.result")), 20, "the foreign page's WebSocket to open or fail")


def main():
    if len(sys.argv) != 3:
        fail("usage: page_origin_browser.py RZ_BIN MODEL")
    rz_bin, model = sys.argv[1:]
    for path, what in ((CHROMIUM, "chromium"), (DRIVER, "chromedriver")):
        if not os.access(path, os.X_OK):
            fail(f"{what} is missing ({path}): run scripts/setup.sh")
    pages = PageServer()
    servers, driver_proc = [], None
    try:
        rz = Rz(rz_bin, model, [])
        servers.append(rz)
        pages.rz_port = rz.port
        driver_proc, wd = start_driver()
        # Chromium's own start() with two more arguments: the made-up site name, and no
        # automatic https upgrade of its http page.
        caps = {"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--host-resolver-rules=MAP foreign.test 127.0.0.1",
                "--disable-features=HttpsUpgrades,HttpsFirstBalancedModeAutoEnable"]}}}}
        wd.sid = wd.call("POST", "/session", caps, timeout=60)["sessionId"]

        # 1. Another site's page: the upgrade is refused (403), so the socket never opens.
        result = foreign_result(wd, pages)
        if result.startswith("message:"):
            fail(f"the foreign page talked to rz: {result}")
        refused = rz.metric("rz_ws_origins_refused_total")
        if refused != 1:
            fail(f"rz_ws_origins_refused_total is {refused}, expected 1 (result {result})")
        # 2. The server's own page still connects.
        wd.call("POST", wd.s("/url"), {"url": f"http://127.0.0.1:{rz.port}/"})
        wait_for(lambda: wd.js("return document.getElementById('status').textContent") ==
                 "ready", 20, "the server's own page to connect (status 'ready')")
        if rz.metric("rz_ws_origins_refused_total") != 1:
            fail("the server's own page was refused")
        wd.call("POST", wd.s("/url"), {"url": "about:blank"})
        rz.stop()

        # 3. --allowed-origins lets the foreign page in.
        rz2 = Rz(rz_bin, model, ["--allowed-origins", f"http://foreign.test:{pages.port}"])
        servers.append(rz2)
        pages.rz_port = rz2.port
        result = foreign_result(wd, pages)
        if not (result.startswith("message:") and '"pong"' in result):
            fail(f"with --allowed-origins the foreign page got {result!r}, not a pong")
        wd.call("DELETE", wd.s(""))
        print(f"page_origin_browser: foreign page refused, own page connected, "
              f"allowed with --allowed-origins ({result})")
    finally:
        if driver_proc:
            driver_proc.terminate()
            driver_proc.wait(10)
        for s in servers:
            s.stop()
        pages.httpd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
