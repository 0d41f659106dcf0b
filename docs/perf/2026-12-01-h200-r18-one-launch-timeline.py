#!/usr/bin/env python3
"""Summarizes the one-launch fused decode's CTA timelines (docs/perf/2026-12-01-h200-r18.md): the stamp file that
FP4MOE_FD_TIMELINE=FILE makes `fp4moe bench moe` write in a build with -one-launch.patch and then
-one-launch-timeline.patch applied to 2a6e7d4. Stamps per CTA: entry, after griddepcontrol.wait, slot tables
sorted, own GEMM1 items done, row blocks done (row-block CTAs only), end. Times are us from the earliest entry.
Usage: python3 2026-12-01-h200-r18-one-launch-timeline.py FILE [ROW_BLOCK_CTAS (default 256)]"""
import sys, collections
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) < 11: continue
    rows[int(f[0])].append((int(f[1]), int(f[2]), [int(x) for x in f[3:11]]))
names = ['entry', 'pdl', 'sorted', 'items_done', 'rowblk_done', 'end']
for T, rs in sorted(rows.items()):
    t0 = min(s[0] for c, sm, s in rs)
    G = len(rs)
    print(f"== T={T} CTAs {G}")
    R = int(sys.argv[2]) if len(sys.argv) > 2 else 256
    for grp, sel in (("all", lambda c: True), ("rowblk", lambda c: c >= G - R), ("others", lambda c: c < G - R)):
        for i, nm in enumerate(names):
            v = sorted((s[i] - t0) / 1000 for c, sm, s in rs if sel(c) and s[i])
            if not v: continue
            q = lambda p: v[min(len(v) - 1, int(p * len(v)))]
            print(f"  {grp:6s} {nm:11s} n={len(v):4d} min {v[0]:6.2f} p10 {q(.1):6.2f} med {q(.5):6.2f} p90 {q(.9):6.2f} max {v[-1]:6.2f}")
