#!/usr/bin/env python3
"""A soak of `rz serve`: a mix of clients for a fixed time, every request accounted for.

    python tests/net/soak.py RZ_BIN MODEL [--minutes 30] [--clients 12] [--device cpu]
        [--slots 4] [--json FILE] [-- EXTRA_SERVE_ARGS...]

Starts `rz serve --port 0` and runs CLIENTS WebSocket clients (tests/net/hostile_clients.py's raw
client) for MINUTES. Each client loops over a random mix: streaming requests of a few to a few
hundred tokens (greedy or sampled, sometimes with stop strings, logprobs or n > 1), a cancel
sent mid-stream, a disconnect mid-stream (then a new connection), a generate that reuses a
running id (duplicate_id), an oversized frame (too_large), and a burst of more requests than the
connection may run at once (overloaded for the rest). It checks, for every request:

  - exactly one final frame (done or error) per choice, nothing after it;
  - token frames with contiguous indexes from 0; done's usage.completion_tokens equals the
    tokens received; an error only of the kinds the action expects;

and for the server: it never exits; its RSS, sampled every 30 s, does not grow in the second half
of the run beyond the first half's peak + 64 MB (the first minutes raise it once, as the KV
cache's pages are first written: on the CPU the cache is host memory); at the end /metrics shows
no active slot, no queued request, no KV block in use, and its open file handles are back to the
count before the clients started.

Prints a line every minute and a summary (requests started, finished, cancelled, errors by code,
lost: must be 0); exit 0 when nothing was lost or broken.
"""
import asyncio
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile_clients as hc  # noqa: E402  (the raw WebSocket client and the server wrapper)


class Stats:
    def __init__(self):
        self.started = self.done = self.cancelled = self.lost = 0
        self.errors, self.broken, self.finish = {}, [], {}

    def error(self, code):
        self.errors[code] = self.errors.get(code, 0) + 1


def check_stream(frames, n_choices, stats, allowed_errors, what):
    """frames: every frame of one request id. Returns whether it was well formed."""
    by_choice = {}
    for f in frames:
        by_choice.setdefault(f.get("choice", 0) if n_choices > 1 else 0, []).append(f)
    whole_error = [f for f in frames if f["type"] == "error" and "choice" not in f]
    if whole_error and n_choices > 1:  # refused as a whole: one error without a choice
        if len(frames) != 1:
            stats.broken.append(f"{what}: frames besides a whole-request error")
            return False
        stats.error(whole_error[0]["code"])
        return whole_error[0]["code"] in allowed_errors
    ok = True
    for c in range(n_choices):
        fs = by_choice.get(c, [])
        finals = [f for f in fs if f["type"] in ("done", "error")]
        if len(finals) != 1 or fs[-1] is not finals[0]:
            stats.broken.append(f"{what} choice {c}: {len(finals)} final frames")
            ok = False
            continue
        index = 0
        for f in fs[:-1]:
            if f["type"] != "token" or f["index"] != index:
                stats.broken.append(f"{what} choice {c}: index {f.get('index')} != {index}")
                ok = False
                break
            index += len(f["tokens"])
        last = finals[0]
        if last["type"] == "done":
            stats.finish[last["finish_reason"]] = stats.finish.get(last["finish_reason"], 0) + 1
            if last["finish_reason"] == "cancelled":
                stats.cancelled += 1
            else:
                stats.done += 1
            if last["usage"]["completion_tokens"] != index:
                stats.broken.append(f"{what}: usage {last['usage']['completion_tokens']} != {index}")
                ok = False
        else:
            stats.error(last["code"])
            if last["code"] not in allowed_errors:
                stats.broken.append(f"{what}: error {last['code']}: {last.get('message')}")
                ok = False
    return ok


class Client:
    def __init__(self, port, idx, stats, rng):
        self.port, self.idx, self.stats, self.rng = port, idx, stats, rng
        self.ws, self.seq = None, 0

    async def connect(self):
        if self.ws:
            self.ws.close()
        self.ws = await hc.Ws.connect(self.port)

    def next_id(self):
        self.seq += 1
        return f"c{self.idx}-{self.seq}"

    async def collect(self, ids, timeout=300):
        """Frames per id until each id's choices all ended."""
        frames = {i: [] for i in ids}
        need = dict(ids)  # id -> choices still open (or 1 for a whole-request error)
        while need:
            f = await self.ws.recv_json(timeout)
            i = f.get("id")
            if i not in frames:
                continue
            frames[i].append(f)
            if f["type"] in ("done", "error"):
                if f["type"] == "error" and "choice" not in f:
                    need.pop(i, None)
                else:
                    need[i] -= 1
                    if need[i] == 0:
                        need.pop(i)
        return frames

    def request(self, max_tokens=None, **kw):
        r = self.rng
        body = {"type": "generate", "id": self.next_id(),
                "prompt": r.choice(["Tell me a story about", "List some fruit:", "Why is the sky",
                                    "Write a poem on the sea."]) + " " * r.randint(0, 3),
                "max_tokens": max_tokens or r.choice([4, 16, 64, 200])}
        if r.random() < 0.5:
            body["temperature"] = 0
        else:
            body["seed"] = r.randint(0, 1 << 30)
        if r.random() < 0.2:
            body["stop"] = [r.choice([".", "\n", " the"])]
        if r.random() < 0.1:
            body["logprobs"] = r.randint(0, 5)
        body.update(kw)
        return body

    async def step(self):
        r, st = self.rng, self.stats
        action = r.choices(["stream", "n", "cancel", "disconnect", "duplicate", "oversized",
                            "burst"], weights=[40, 8, 12, 8, 8, 6, 6])[0]
        if action in ("stream", "n"):
            n = r.randint(2, 3) if action == "n" else 1
            b = self.request(n=n) if n > 1 else self.request()
            self.ws.send(json.dumps(b))
            st.started += n
            frames = await self.collect({b["id"]: n})
            check_stream(frames[b["id"]], n, st, {"overloaded"}, action)
        elif action == "cancel":
            b = self.request(max_tokens=300, ignore_eos=True)
            self.ws.send(json.dumps(b))
            st.started += 1
            f = await self.ws.recv_json()
            while f.get("id") != b["id"]:
                f = await self.ws.recv_json()
            first = [f]
            self.ws.send(json.dumps({"type": "cancel", "id": b["id"]}))
            frames = await self.collect({b["id"]: 1}) if f["type"] not in ("done", "error") else \
                {b["id"]: []}
            check_stream(first + frames[b["id"]], 1, st, {"overloaded"}, action)
            # A cancel that arrives after the end is answered unknown_id, read (and skipped) by
            # whatever reads next: collect() skips it by id, the oversized action by code.
        elif action == "disconnect":
            b = self.request(max_tokens=300, ignore_eos=True)
            self.ws.send(json.dumps(b))
            st.started += 1
            st.cancelled += 1  # ends at the server as cancelled (not seen here)
            await asyncio.sleep(r.uniform(0, 0.5))
            await self.connect()
        elif action == "duplicate":
            b = self.request(max_tokens=100, ignore_eos=True)
            self.ws.send(json.dumps(b))
            self.ws.send(json.dumps(b))  # the same id while the first runs
            st.started += 1
            fs, dup, runs = [], 0, 0
            while True:  # the first run's frames, and the answer to the second frame
                f = await self.ws.recv_json(300)
                if f.get("id") != b["id"]:
                    continue
                if f["type"] == "error" and f["code"] == "duplicate_id":
                    dup += 1
                    st.error("duplicate_id")
                else:
                    fs.append(f)
                    if f["type"] in ("done", "error"):
                        check_stream(fs, 1, st, {"overloaded"}, action)
                        fs, runs = [], runs + 1
                if dup + runs == 2:  # refused as a duplicate, or run twice (the first was over)
                    break
            if runs == 2:
                st.started += 1
        elif action == "oversized":
            self.ws.send(json.dumps({"type": "generate", "id": self.next_id(),
                                     "prompt": "x" * (1 << 20)}))
            f = await self.ws.recv_json()
            while f.get("code") == "unknown_id":  # a cancel that came after its request's end
                f = await self.ws.recv_json()
            if f.get("code") != "too_large":
                st.broken.append(f"oversized: {f}")
            st.error("too_large")
        else:  # burst: more than the connection's in-flight limit (16)
            bodies = [self.request(max_tokens=r.choice([1, 8])) for _ in range(24)]
            for b in bodies:
                self.ws.send(json.dumps(b))
            st.started += len(bodies)
            frames = await self.collect({b["id"]: 1 for b in bodies})
            for b in bodies:
                check_stream(frames[b["id"]], 1, st, {"overloaded"}, action)

    async def run(self, until):
        await self.connect()
        while time.monotonic() < until:
            try:
                await self.step()
            except Exception as e:  # noqa: BLE001 - a broken connection is a finding
                self.stats.broken.append(f"client {self.idx}: {e!r}")
                self.stats.lost += 1
                await asyncio.sleep(1)
                await self.connect()
        self.ws.close()


async def soak(srv, minutes, clients, seed):
    port = srv.port
    stats = Stats()
    fds0 = srv.fds()
    rng = random.Random(seed)
    start = time.monotonic()
    until = start + minutes * 60
    tasks = [asyncio.create_task(Client(port, i, stats, random.Random(rng.random())).run(until))
             for i in range(clients)]
    await asyncio.sleep(min(30, minutes * 30))
    rss0 = srv.rss_mb()
    samples = [(round(time.monotonic() - start), round(rss0))]
    next_print = time.monotonic() + 60
    while not all(t.done() for t in tasks):
        await asyncio.sleep(1)
        if srv.proc.poll() is not None:
            stats.broken.append(f"rz serve exited with {srv.proc.returncode}")
            break
        if time.monotonic() - start >= samples[-1][0] + 30:
            samples.append((round(time.monotonic() - start), round(srv.rss_mb())))
        if time.monotonic() >= next_print:
            next_print += 60
            print(f"soak: {(time.monotonic() - start) / 60:4.1f} min  started {stats.started}  "
                  f"done {stats.done}  cancelled {stats.cancelled}  errors {stats.errors}  "
                  f"RSS {samples[-1][1]} MB  broken {len(stats.broken)}", flush=True)
    await asyncio.gather(*tasks, return_exceptions=True)

    async def idle():
        m = await hc.metrics(port)
        return (m.get("rz_active_slots") == 0 and m.get("rz_queue_depth") == 0 and
                m.get("rz_kv_blocks_used") == 0)
    quiet = await hc.wait_for(idle, 30)
    fds_back = await hc.wait_for(lambda: _fds_back(srv, fds0), 30)
    half = len(samples) // 2
    first, second = [r for _, r in samples[:max(half, 1)]], [r for _, r in samples[half:]]
    if max(second) > max(first) + 64:
        stats.broken.append(f"RSS grew in the second half: {max(first)} -> {max(second)} MB")
    if not quiet:
        stats.broken.append("/metrics did not return to idle")
    if not fds_back:
        stats.broken.append(f"file handles {srv.fds()} did not return to {fds0}")
    return stats, samples, await hc.metrics(port)


async def _fds_back(srv, fds0):
    return srv.fds() <= fds0


def main():
    args = sys.argv[1:]
    extra = []
    if "--" in args:
        extra = args[args.index("--") + 1:]
        args = args[:args.index("--")]
    opts = {"--minutes": "30", "--clients": "12", "--device": "cpu", "--slots": "4",
            "--json": "", "--seed": "1"}
    pos = []
    i = 0
    while i < len(args):
        if args[i] in opts:
            opts[args[i]] = args[i + 1]
            i += 2
        else:
            pos.append(args[i])
            i += 1
    if len(pos) != 2:
        print(__doc__)
        return 2
    srv = hc.Server(pos[0], pos[1], device=opts["--device"], slots=opts["--slots"], extra=extra)
    t0 = time.time()
    try:
        stats, samples, m = asyncio.run(soak(srv, float(opts["--minutes"]),
                                             int(opts["--clients"]), int(opts["--seed"])))
    finally:
        code = srv.stop()
    if code != 0:
        stats.broken.append(f"rz serve exited with {code} after SIGTERM")
    summary = {"date": time.strftime("%Y-%m-%d %H:%M", time.gmtime(t0)) + " UTC",
               "minutes": float(opts["--minutes"]), "clients": int(opts["--clients"]),
               "device": opts["--device"], "slots": int(opts["--slots"]),
               "started": stats.started, "done": stats.done, "cancelled": stats.cancelled,
               "errors": stats.errors, "finish_reasons": stats.finish, "lost": stats.lost,
               "broken": stats.broken[:20], "rss_mb": samples,
               "server_requests_ended": {k: v for k, v in m.items()
                                         if k.startswith("rz_requests_ended_total")},
               "kv_blocks_total": m.get("rz_kv_blocks_total"),
               "prefix_cache_evictions": m.get("rz_prefix_cache_evictions_total")}
    print(json.dumps(summary, indent=1))
    if opts["--json"]:
        with open(opts["--json"], "w") as f:
            json.dump(summary, f, indent=1)
    ok = not stats.broken and stats.lost == 0
    print(f"soak: {'1 passed, 0 failed' if ok else '0 passed, 1 failed'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
