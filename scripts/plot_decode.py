#!/usr/bin/env python3
"""Plots decode throughput against batch size: rz and llama.cpp per model, with rz's ceiling.

    python3 scripts/plot_decode.py [--out decode.png] [--title TEXT] FILE_OR_DIR ...

Inputs are JSON files, or directories whose rz-*.json and llamacpp-*.json are read (what
scripts/gpu_side_by_side.sh leaves in $OUT):
  - rz bench's JSON (`rz bench --json` / `--json-out`, "tool": "rz bench"; layout in
    apps/bench/bench_json.hpp): its batched workloads give rz's S_TG (generated tokens/s over all
    sequences) at each B, and with the bandwidth limit it was measured against, the ceiling
    B / (bytes a step reads / bandwidth);
  - llama.cpp's figures as gpu_side_by_side.sh writes them ("tool": "llama.cpp"; "workloads":
    [{"name": "B=16", "kind": "batched", "batch": 16, "tokens_per_s": ...}, ...]).
Files are matched by model label ("model": {"label": ...}); one panel per label, tokens/s against
B on log axes, rz / llama.cpp written above rz's points where both have the same B. Needs
matplotlib (not needed by the build or the tests).
"""
import argparse
import glob
import json
import math
import os
import sys


def load(paths):
    """(rz runs, llama.cpp runs), each a list of (path, parsed JSON)."""
    files = []
    for p in paths:
        if os.path.isdir(p):
            files += sorted(glob.glob(os.path.join(p, "rz-*.json")))
            files += sorted(glob.glob(os.path.join(p, "llamacpp-*.json")))
        else:
            files.append(p)
    rz, ref = [], []
    for f in files:
        with open(f) as fh:
            d = json.load(fh)
        tool = d.get("tool")
        if tool == "rz bench":
            rz.append((f, d))
        elif tool == "llama.cpp":
            ref.append((f, d))
        else:
            raise SystemExit(f"plot_decode: {f}: not rz bench or llama.cpp JSON (tool {tool!r})")
    return rz, ref


def label_of(d):
    return (d.get("model") or {}).get("label") or "?"


def batched(d):
    """Sorted [(B, tokens/s, workload)] of the measured batched workloads."""
    out = []
    for w in d.get("workloads", []):
        if w.get("kind") != "batched" or w.get("tokens_per_s") is None:
            continue
        if w.get("ok") is False:
            continue
        out.append((int(w["batch"]), float(w["tokens_per_s"]), w))
    return sorted(out, key=lambda x: x[0])


def ceiling(d):
    """[(B, ceiling tokens/s)] and the bandwidth (bytes/s), from rz bench's JSON."""
    bw = (d.get("limits") or {}).get("bandwidth_bytes_per_s")
    pts = []
    for b, _, w in batched(d):
        bytes_per_step = w.get("bytes_per_step")
        if bw and bytes_per_step:
            pts.append((b, b / (bytes_per_step / bw)))
        elif w.get("ceiling_tokens_per_s"):
            pts.append((b, float(w["ceiling_tokens_per_s"])))
    return pts, bw


def rate(bytes_per_s):
    return f"{bytes_per_s / 1e12:.2f} TB/s" if bytes_per_s >= 1e12 else f"{bytes_per_s / 1e9:.1f} GB/s"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("inputs", nargs="+", help="rz bench / llama.cpp JSON files or directories")
    ap.add_argument("--out", default="decode.png", help="PNG to write (default decode.png)")
    ap.add_argument("--title", default="Decode throughput (S_TG) against batch size")
    args = ap.parse_args()

    rz, ref = load(args.inputs)
    if not rz:
        raise SystemExit("plot_decode: no rz bench JSON among the inputs")
    labels = []
    for _, d in rz:
        if label_of(d) not in labels:
            labels.append(label_of(d))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(labels)
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 4.5 * rows), squeeze=False)
    for i, label in enumerate(labels):
        ax = axes[i // cols][i % cols]
        mine = [(f, d) for f, d in rz if label_of(d) == label]
        theirs = [(f, d) for f, d in ref if label_of(d) == label]
        devices = sorted({(d.get("device") or {}).get("name", "?") for _, d in mine})
        ref_by_b = {}
        for f, d in theirs:
            pts = batched(d)
            if not pts:
                continue
            version = d.get("version")
            name = f"llama.cpp {version}" if version else "llama.cpp"
            if len(theirs) > 1:
                name += f" ({os.path.basename(f)})"
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "s--", color="tab:gray", label=name)
            for b, v, _ in pts:
                ref_by_b.setdefault(b, v)
        for j, (f, d) in enumerate(mine):
            pts = batched(d)
            if not pts:
                continue
            name = "rz"
            if d.get("commit"):
                name += f" {d['commit']}"
            if len(mine) > 1:
                name += f" ({os.path.basename(f)})"
            color = f"C{j}"
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color=color, label=name)
            for b, v, _ in pts:
                if b in ref_by_b and ref_by_b[b] > 0:
                    ax.annotate(f"{v / ref_by_b[b]:.2f}x", (b, v), textcoords="offset points",
                                xytext=(0, 7), ha="center", fontsize=8, color=color)
            cpts, bw = ceiling(d)
            if cpts:
                ax.plot([p[0] for p in cpts], [p[1] for p in cpts], ":", color=color,
                        label=f"rz ceiling at {rate(bw)}: B / (bytes per step / bandwidth)"
                        if bw else "rz ceiling (rz bench)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        bs = sorted({p[0] for _, d in mine + theirs for p in batched(d)})
        if bs:
            ax.set_xticks(bs)
            ax.set_xticklabels([str(b) for b in bs])
        ax.set_xlabel("batch size B (sequences decoded together)")
        ax.set_ylabel("generated tokens/s (all sequences)")
        ax.set_title(f"{label} on {', '.join(devices)}", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    for k in range(n, rows * cols):
        axes[k // cols][k % cols].axis("off")
    fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"plot_decode: {args.out} ({n} model{'s' if n != 1 else ''}: {', '.join(labels)})")


if __name__ == "__main__":
    sys.exit(main())
