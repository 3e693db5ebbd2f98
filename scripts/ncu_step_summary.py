#!/usr/bin/env python3
"""Sums an Nsight Compute CSV (gpu__time_duration.sum per kernel) over one decode step.

    ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \\
        --launch-skip 9000 --launch-count 1000 rz bench --device cuda --model M --pp 0 \\
        --batches "" --tg 64 --reps 1 > ncu.csv
    scripts/ncu_step_summary.py ncu.csv

A step starts at the embedding gather kernel; the first complete step in the capture is summed:
kernels per step, total microseconds (ncu runs kernels one at a time, so this is the kernels'
own time without the gaps between them), then per kernel name: total, count, mean.
"""
import collections
import csv
import re
import sys

rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10 and r[0].isdigit()]
names = [r[4] for r in rows]
times = [float(r[-1].replace(",", "")) for r in rows]
starts = [i for i, n in enumerate(names) if "embedding_gather" in n]
if len(starts) < 2:
    sys.exit("fewer than two step starts (embedding_gather) in the capture")
a, b = starts[0], starts[1]
print(f"kernels per step {b - a}, kernel time {sum(times[a:b]) / 1000:.1f} us")
agg = collections.defaultdict(lambda: [0, 0.0])
for n, t in zip(names[a:b], times[a:b]):
    k = re.sub(r"\(.*", "", n)
    for junk in ("gemv_q8_detail::", "gemv_detail::", "void ", "(anonymous namespace)::", "<unnamed>::"):
        k = k.replace(junk, "")
    agg[k][0] += 1
    agg[k][1] += t
for k, (c, s) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
    print(f"{s / 1000:8.1f} us {c:4d} x {s / c / 1000:6.2f} us  {k[:100]}")
