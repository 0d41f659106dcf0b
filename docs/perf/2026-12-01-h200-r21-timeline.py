#!/usr/bin/env python3
"""Summarizes the fused decode's launch timelines (docs/perf/2026-12-01-h200-r21.md): the stamp file that
FP4MOE_FD_TIMELINE=FILE makes `fp4moe bench moe` write in a build with -timeline.patch (applies to d6c82d2:
the kernels stamp 10 points per CTA, bench/moe_bench.cpp dumps them after the timing).
Usage: python3 2026-12-01-h200-r21-timeline.py FILE [LABEL]"""
import sys, collections
rows = collections.defaultdict(list)
N = 10
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) < 4 + N: continue
    T, k, c, sm = int(f[0]), int(f[1]), int(f[2]), int(f[3])
    rows[T].append((k, c, sm, [int(x) for x in f[4:4 + N]]))
names = {0: ['entry', 'pdl_wait', 'routed', 'sorted', 'item0', 'item1', 'item2+last', 'exit', 'step0'],
         1: ['entry', 'record', 'prologue', 'pdl_wait', 'units_done', 'exit', 'unit0(w0)', 'units(w0)']}
order = {0: [0, 1, 2, 3, 8, 4, 5, 6, 7], 1: [0, 1, 2, 3, 6, 7, 4, 5]}
label = sys.argv[2] if len(sys.argv) > 2 else ''
for T, rs in sorted(rows.items()):
    t0 = min(s[0] for k, c, sm, s in rs if k == 0)
    print(f"== T={T} {label}  CTAs: launch1 {sum(1 for r in rs if r[0]==0)}, launch2 {sum(1 for r in rs if r[0]==1)}")
    for k in (0, 1):
        for i in order[k]:
            nm = names[k][i]
            v = sorted((s[i] - t0) / 1000 for kk, c, sm, s in rs if kk == k and s[i])
            if not v: continue
            q = lambda p: v[min(len(v) - 1, int(p * len(v)))]
            print(f"  L{k+1} {nm:11s} n={len(v):4d} min {v[0]:6.2f} p10 {q(.1):6.2f} med {q(.5):6.2f} p90 {q(.9):6.2f} max {v[-1]:6.2f} us")
    l1 = [(c, sm, s) for k, c, sm, s in rs if k == 0]
    l2 = [(c, sm, s) for k, c, sm, s in rs if k == 1]
    last1 = max((s[7] - t0) / 1000 for c, sm, s in l1)
    print(f"  launch 1 last exit {last1:.2f} us; launch-2 CTAs entered before it: "
          f"{sum(1 for c, sm, s in l2 if (s[0] - t0) / 1000 < last1)} of {len(l2)}")
    # Launch 1 exits by item count (item stamps present).
    by_items = collections.defaultdict(list)
    for c, sm, s in l1:
        n = 0 if not s[4] else (1 if not s[5] else (2 if not s[6] else 3))
        by_items[n].append((s[7] - t0) / 1000)
    print("  L1 exit by items: " + ", ".join(f"{n}+ items n={len(v)} med {sorted(v)[len(v)//2]:.2f} max {max(v):.2f}"
                                          for n, v in sorted(by_items.items())))
    # Launch 2 entry against the launch-1 exits on the same SM: after the first, after the last.
    exits = collections.defaultdict(list)
    for c, sm, s in l1: exits[sm].append((s[7] - t0) / 1000)
    d_first, d_last = [], []
    for c, sm, s in l2:
        e = sorted(exits.get(sm, []))
        if not e: continue
        t = (s[0] - t0) / 1000
        d_first.append(t - e[0]); d_last.append(t - e[-1])
    if d_first:
        d_first.sort(); d_last.sort()
        m = lambda v: v[len(v) // 2]
        print(f"  L2 entry - first L1 exit on its SM: min {d_first[0]:.2f} med {m(d_first):.2f} max {d_first[-1]:.2f} us; "
              f"- last L1 exit: min {d_last[0]:.2f} med {m(d_last):.2f} max {d_last[-1]:.2f} us")
    # Bytes streamed: W13/W2 per phase are not known here; print the phase spans.
    ws = [(s[3] - t0) / 1000 for c, sm, s in l2]
    ud = [(s[4] - t0) / 1000 for c, sm, s in l2]
    print(f"  L2 pdl_wait max {max(ws):.2f} -> units_done max {max(ud):.2f} us")
    # Launch 1 per SM: CTAs, items (3 = three or more), last exit.
    per_sm = collections.defaultdict(lambda: [0, 0, 0.0])
    for c, sm, s in l1:
        n = 0 if not s[4] else (1 if not s[5] else (2 if not s[6] else 3))
        e = per_sm[sm]; e[0] += 1; e[1] += n; e[2] = max(e[2], (s[7] - t0) / 1000)
    hist = collections.defaultdict(list)
    for sm, (nc, ni, ex) in per_sm.items(): hist[(nc, ni)].append(ex)
    print("  L1 per SM (CTAs, items): " + "; ".join(
        f"({nc},{ni}) SMs {len(v)} last exit med {sorted(v)[len(v)//2]:.2f} max {max(v):.2f}" for (nc, ni), v in sorted(hist.items())))
    cta_sm = collections.defaultdict(list)
    for c, sm, s in l1: cta_sm[sm].append(c)
    pairs = sorted(tuple(sorted(v)) for v in cta_sm.values())
    print("  L1 CTAs of the first SMs: " + " ".join(str(p) for p in pairs[:6]))
