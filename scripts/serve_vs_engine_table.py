#!/usr/bin/env python3
"""The tables of scripts/gpu_serve_vs_engine.sh, from the files it leaves in OUT: engine.json
(`rz bench --batches ...`), serve-B.json (rz-wsbench) and steps-B.csv (the server's step log).

    serve_vs_engine_table.py OUT STREAMS...

Two engine figures per B:
- decode only: B sequences decoding together (`rz bench`'s batched tokens/s, the figure the
  issue names);
- with its prefill: the same requests as the served ones (a 64-token prompt, then the generated
  tokens), B * gen / (prefill seconds of the B prompts + decode seconds): the engine doing the
  served work without the network or the actors. The difference between the two is the
  workload's prompt work, which every served request brings; what serving itself costs is the
  served figure against this one.
"""
import csv, json, os, sys
out, streams = sys.argv[1], [int(s) for s in sys.argv[2:]]
eng = json.load(open(os.path.join(out, "engine.json")))
by_b = {w["batch"]: w for w in eng["workloads"] if w["kind"] == "batched"}
print(f"serving vs engine: {eng['device']['name']}, {eng['model']['label']}, commit {eng.get('commit', '?')}")
print("| streams | engine tok/s (decode only) | engine step ms | engine tok/s with its prefill | served tok/s "
      "| served / engine | served / engine with its prefill | ITL p50 / p99 ms | ITL p50 / step |")
print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for b in streams:
    w = by_b.get(b)
    try:
        s = json.load(open(os.path.join(out, f"serve-{b}.json")))
    except Exception as e:
        print(f"| {b} | | | | rz-wsbench failed ({e}) | | | | |")
        continue
    e_tps = w["tokens_per_s"] if w and w.get("ok") else float("nan")
    step = w["step_ms"] if w and w.get("ok") else float("nan")
    ok = w and w.get("ok") and w.get("prefill_seconds") is not None
    with_prefill = (b * w["tokens"] / (w["prefill_seconds"] + w["seconds"]) if ok
                    else float("nan"))
    tps = s["output_throughput"]
    i = s["itl_ms"]
    print(f"| {b} | {e_tps:,.0f} | {step:.2f} | {with_prefill:,.0f} | {tps:,.0f} | "
          f"{tps / e_tps:.2f} | {tps / with_prefill:.2f} | "
          f"{i['p50']:.2f} / {i['p99']:.2f} | {i['p50'] / step:.2f} |")
print()
print("the served steps (step log): executor share of the wall time from the first step to the")
print("last, decode tokens and prompt tokens per step, decode-only steps' executor median")
print("| streams | steps | executor share | decodes / step | prompt tokens / step | decode-only exec p50 ms |")
print("| ---: | ---: | ---: | ---: | ---: | ---: |")
for b in streams:
    try:
        rows = [{k: float(v) for k, v in r.items()}
                for r in csv.DictReader(open(os.path.join(out, f"steps-{b}.csv")))]
    except Exception as e:
        print(f"| {b} | no step log ({e}) | | | | |")
        continue
    if len(rows) < 2:
        print(f"| {b} | {len(rows)} | | | | |")
        continue
    wall = rows[-1]["start_ms"] + rows[-1]["round_ms"] - rows[0]["start_ms"]
    share = sum(r["exec_ms"] for r in rows) / wall
    dec = sum(r["decodes"] for r in rows) / len(rows)
    ptok = sum(r["chunk_tokens"] for r in rows) / len(rows)
    only = sorted(r["exec_ms"] for r in rows if r["chunks"] == 0)
    p50 = f"{only[len(only) // 2]:.2f}" if only else "-"
    print(f"| {b} | {len(rows)} | {share:.3f} | {dec:.1f} | {ptok:.1f} | {p50} |")
