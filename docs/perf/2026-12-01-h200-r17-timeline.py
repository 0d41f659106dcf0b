#!/usr/bin/env python3
"""Summarizes the fused decode's launch timelines (docs/perf/2026-12-01-h200-r17.md): the stamp file that
FP4MOE_FD_TIMELINE=FILE makes `fp4moe bench moe` write in a build with -timeline.patch (applies to a3dd26c).
Usage: python3 2026-12-01-h200-r17-timeline.py FILE [LABEL]"""
import sys, collections, statistics as st
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) < 12: continue
    T, k, c, sm = int(f[0]), int(f[1]), int(f[2]), int(f[3])
    rows[(sys.argv[2] if len(sys.argv) > 2 else '', T)].append((k, c, sm, [int(x) for x in f[4:12]]))
names = {0: ['entry', 'pdl_wait', 'routed', 'sorted', 'item0', 'item1', 'item2+last', 'exit'],
         1: ['entry', 'record', 'prologue', 'pdl_wait', 'units_done', 'exit', '-', '-']}
for key, rs in rows.items():
    t0 = min(s[0] for k, c, sm, s in rs if k == 0)
    allv = sorted(set(v for k, c, sm, s in rs for v in s if v))
    diffs = [b - a for a, b in zip(allv, allv[1:]) if b > a]
    print(f"== T={key[1]} {key[0]}  CTAs: launch1 {sum(1 for r in rs if r[0]==0)}, launch2 {sum(1 for r in rs if r[0]==1)}; min stamp step {min(diffs) if diffs else 0} ns")
    for k in (0, 1):
        for i, nm in enumerate(names[k]):
            if nm == '-': continue
            v = sorted((s[i] - t0) / 1000 for kk, c, sm, s in rs if kk == k and s[i])
            if not v: continue
            q = lambda p: v[min(len(v) - 1, int(p * len(v)))]
            print(f"  L{k+1} {nm:11s} n={len(v):4d} min {v[0]:6.2f} p10 {q(.1):6.2f} med {q(.5):6.2f} p90 {q(.9):6.2f} max {v[-1]:6.2f} us")
    # launch-1 item counts: CTAs whose item2+last stamp exists
    l1 = [s for k, c, sm, s in rs if k == 0]
    ends = sorted((s[7] - t0) / 1000 for s in l1)
    l2 = [(c, sm, s) for k, c, sm, s in rs if k == 1]
    starts2 = sorted((s[0] - t0) / 1000 for c, sm, s in l2)
    last1 = ends[-1]
    print(f"  launch 1 last exit {last1:.2f} us; launch-2 CTAs entered before it: {sum(1 for x in starts2 if x < last1)} of {len(starts2)}")
