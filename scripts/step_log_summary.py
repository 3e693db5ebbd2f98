#!/usr/bin/env python3
"""Summarises an `rz serve --step-log` CSV (sched/step_log.hpp).

    scripts/step_log_summary.py STEPS.csv [--from-ms T0] [--to-ms T1] [--top N]

Prints, per kind of step (decodes only, planned ahead or not (the `ahead` column of logs that
have it); decodes with prompt chunks, by chunk-token range), the
count and the executor time, round trip and host gap before the step at p50/p90/p99, then the
steps that carry 8+ decodes and took more than 1.5x the executor p50 (what moves the streams'
inter-token p99 against issue 9's bar), by what they carried, then the N slowest steps (round
trip) with their shape. Where the time between two tokens of a stream goes is round trip + gap.
"""
import argparse
import csv
import sys


def pct(v, p):
    if not v:
        return float("nan")
    s = sorted(v)
    return s[min(len(s) - 1, int(p / 100.0 * len(s)))]


def kind(r):
    ahead = ", planned ahead" if r.get("ahead", 0) == 1 else ""
    if r["chunks"] == 0:
        return "decode only" + ahead
    t = r["chunk_tokens"]
    for hi in (16, 64, 128, 256, 512, 1024):
        if t <= hi:
            return f"chunks <= {hi} tokens{ahead}"
    return "chunks > 1024 tokens" + ahead


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--from-ms", type=float, default=None)
    ap.add_argument("--to-ms", type=float, default=None)
    ap.add_argument("--top", type=int, default=15)
    a = ap.parse_args()
    rows = []
    with open(a.csv) as f:
        for r in csv.DictReader(f):
            r = {k: (float(v) if "." in v else int(v)) for k, v in r.items()}
            if a.from_ms is not None and r["start_ms"] < a.from_ms:
                continue
            if a.to_ms is not None and r["start_ms"] > a.to_ms:
                continue
            rows.append(r)
    if not rows:
        print("no steps")
        return 0
    groups = {}
    for r in rows:
        groups.setdefault(kind(r), []).append(r)
    print(f"{len(rows)} steps over {(rows[-1]['start_ms'] - rows[0]['start_ms']) / 1e3:.1f} s")
    print("| kind | steps | decodes mean | exec p50/p90/p99 ms | round p50/p90/p99 ms | gap p50/p90/p99 ms |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    first = ["decode only", "decode only, planned ahead"]
    order = first + [k for k in sorted(groups) if k not in first]
    for k in order:
        g = groups.get(k)
        if not g:
            continue
        cells = []
        for col in ("exec_ms", "round_ms", "gap_ms"):
            v = [r[col] for r in g]
            cells.append(" / ".join(f"{pct(v, p):.2f}" for p in (50, 90, 99)))
        dec = sum(r["decodes"] for r in g) / len(g)
        print(f"| {k} | {len(g)} | {dec:.1f} | " + " | ".join(cells) + " |")
    p50 = pct([r["exec_ms"] for r in rows], 50)
    slow = [r for r in rows if r["decodes"] >= 8 and r["exec_ms"] > 1.5 * p50]
    deep = [r for r in slow if r["chunks"] > 0 and r["max_context"] > 2048]
    chunk = [r for r in slow if r["chunks"] > 0 and r["max_context"] <= 2048]
    print()
    print(f"steps with 8+ decodes over 1.5 x the exec p50 ({1.5 * p50:.2f} ms): {len(slow)} of "
          f"{len(rows)}: {len(deep)} with prompt chunks past context 2,048, {len(chunk)} with "
          f"other prompt chunks, {len(slow) - len(deep) - len(chunk)} decode only"
          + (f"; median {pct([r['exec_ms'] for r in slow], 50):.2f} ms, slowest "
             f"{max(r['exec_ms'] for r in slow):.2f}" if slow else ""))
    print()
    print(f"slowest {a.top} steps (round trip):")
    print("step,start_ms,exec_ms,round_ms,gap_ms,decodes,chunks,chunk_tokens,max_context")
    for r in sorted(rows, key=lambda r: -r["round_ms"])[: a.top]:
        print(",".join(str(r[k]) for k in ("step", "start_ms", "exec_ms", "round_ms", "gap_ms",
                                           "decodes", "chunks", "chunk_tokens", "max_context")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
