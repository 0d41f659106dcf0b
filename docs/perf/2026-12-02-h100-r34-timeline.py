#!/usr/bin/env python3
"""Summarizes the fused decode's launch timelines: the stamp file that FP4MOE_FD_TIMELINE=FILE makes
`fp4moe bench moe` write in a build with docs/perf/2026-12-02-h100-r34-timeline.patch (16 globaltimer
stamps of thread 0 per CTA and launch; the last run of the last graph replay). r26's summarizer with
r34's launch-1 slots (the early ring prime at one token, slot 4).
Usage: python3 2026-12-02-h100-r34-timeline.py FILE [LABEL]"""
import collections
import sys

N = 16
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) < 4 + N:
        continue
    T, k, c, sm = int(f[0]), int(f[1]), int(f[2]), int(f[3])
    rows[T].append((k, c, sm, [int(x) for x in f[4:4 + N]]))
# Launch 1: 2 and 3 are stamped inside the routing by the CTAs whose warp 0 routes a token; 4 only where
# the one-token early prime runs.
names = {0: {0: 'entry', 1: 'pdl_wait', 2: 'logits in', 3: 'top-k done', 4: 'early prime', 5: 'items listed',
             6: 'ring primed', 7: 'step0(w0)', 8: 'item0', 9: 'item1', 10: 'item2+last', 11: 'exit'},
         1: {0: 'entry', 1: 'record', 2: 'prologue', 3: 'pdl_wait', 6: 'unit0(w0)', 7: 'units(w0)', 4: 'units_done',
             5: 'exit'}}
order = {0: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], 1: [0, 1, 2, 3, 6, 7, 4, 5]}
EXIT1 = 11
label = sys.argv[2] if len(sys.argv) > 2 else ''
for T, rs in sorted(rows.items()):
    t0 = min(s[0] for k, c, sm, s in rs if k == 0)
    print(f"== T={T} {label}  CTAs: launch1 {sum(1 for r in rs if r[0] == 0)}, launch2 {sum(1 for r in rs if r[0] == 1)}")
    for k in (0, 1):
        for i in order[k]:
            v = sorted((s[i] - t0) / 1000 for kk, c, sm, s in rs if kk == k and s[i])
            if not v:
                continue
            q = lambda p: v[min(len(v) - 1, int(p * len(v)))]
            print(f"  L{k + 1} {names[k][i]:12s} n={len(v):4d} min {v[0]:6.2f} p10 {q(.1):6.2f} med {q(.5):6.2f} "
                  f"p90 {q(.9):6.2f} max {v[-1]:6.2f} us")
    l1 = [(c, sm, s) for k, c, sm, s in rs if k == 0]
    l2 = [(c, sm, s) for k, c, sm, s in rs if k == 1]
    last1 = max((s[EXIT1] - t0) / 1000 for c, sm, s in l1)
    print(f"  launch 1 last exit {last1:.2f} us; launch-2 CTAs entered before it: "
          f"{sum(1 for c, sm, s in l2 if (s[0] - t0) / 1000 < last1)} of {len(l2)}")
    items = lambda s: 0 if not s[8] else (1 if not s[9] else (2 if not s[10] else 3))
    by_items = collections.defaultdict(list)
    for c, sm, s in l1:
        by_items[items(s)].append((s[EXIT1] - t0) / 1000)
    print("  L1 exit by items: " + ", ".join(f"{n}+ items n={len(v)} med {sorted(v)[len(v) // 2]:.2f} max {max(v):.2f}"
                                          for n, v in sorted(by_items.items())))
    if l2:
        ws = [(s[3] - t0) / 1000 for c, sm, s in l2]
        ud = [(s[4] - t0) / 1000 for c, sm, s in l2 if s[4]]
        ex = [(s[5] - t0) / 1000 for c, sm, s in l2 if s[5]]
        if ud:
            print(f"  L2 pdl_wait min {min(ws):.2f} max {max(ws):.2f} -> units_done max {max(ud):.2f} -> exit max "
                  f"{max(ex):.2f} us")
