#!/usr/bin/env python3
"""Summarizes the fused decode's launch timelines: the stamp file that FP4MOE_FD_TIMELINE=FILE makes
`fp4moe bench moe` write in a build with a timeline diagnostic patch (tools/gpu/timeline.sh; each line:
tokens, launch 0|1, CTA, SM, then the patch's globaltimer stamps of the CTA's thread 0, at least 16, 0
where not stamped).
A patch's summarizer (docs/perf/*-timeline.py) names its stamp slots and calls summarize(); the
per-slot percentiles, launch 1's last exit, its exits by item count and launch 2's span are the same
for every patch. Records before r34 carry their own copies of this code.
Usage (from a patch's summarizer): summarize(FILE, LABEL, names, order)"""
import collections

STAMPS = 16  # the fewest a patch writes (r37's probe patch writes 18)


def read_stamps(path):
    """{tokens: [(launch, cta, sm, stamps)]} from a stamp file; short lines are skipped."""
    rows = collections.defaultdict(list)
    for line in open(path):
        f = line.split()
        if len(f) < 4 + STAMPS:
            continue
        rows[int(f[0])].append((int(f[1]), int(f[2]), int(f[3]), [int(x) for x in f[4:]]))
    return rows


def summarize(path, label, names, order, exit1=11, item_slots=(8, 9, 10), wait2=3, done2=4, exit2=5):
    """Prints, per token count, each named slot's percentiles over the CTAs (us from launch 1's first
    entry), then launch 1's last exit, its exits by item count (item_slots: the ends of items 0, 1 and
    2+) and launch 2's span. names / order: {launch: {slot: name}} and {launch: [slots in print order]}."""
    for T, rs in sorted(read_stamps(path).items()):
        t0 = min(s[0] for k, c, sm, s in rs if k == 0)
        print(f"== T={T} {label}  CTAs: launch1 {sum(1 for r in rs if r[0] == 0)}, launch2 {sum(1 for r in rs if r[0] == 1)}")
        for k in (0, 1):
            for i in order[k]:
                v = sorted((s[i] - t0) / 1000 for kk, c, sm, s in rs if kk == k and i < len(s) and s[i])
                if not v:
                    continue
                q = lambda p: v[min(len(v) - 1, int(p * len(v)))]
                print(f"  L{k + 1} {names[k][i]:12s} n={len(v):4d} min {v[0]:6.2f} p10 {q(.1):6.2f} med {q(.5):6.2f} "
                      f"p90 {q(.9):6.2f} max {v[-1]:6.2f} us")
        l1 = [(c, sm, s) for k, c, sm, s in rs if k == 0]
        l2 = [(c, sm, s) for k, c, sm, s in rs if k == 1]
        last1 = max((s[exit1] - t0) / 1000 for c, sm, s in l1)
        print(f"  launch 1 last exit {last1:.2f} us; launch-2 CTAs entered before it: "
              f"{sum(1 for c, sm, s in l2 if (s[0] - t0) / 1000 < last1)} of {len(l2)}")
        items = lambda s: next((n for n, slot in enumerate(item_slots) if not s[slot]), len(item_slots))
        by_items = collections.defaultdict(list)
        for c, sm, s in l1:
            by_items[items(s)].append((s[exit1] - t0) / 1000)
        print("  L1 exit by items: " + ", ".join(f"{n}+ items n={len(v)} med {sorted(v)[len(v) // 2]:.2f} max {max(v):.2f}"
                                              for n, v in sorted(by_items.items())))
        if l2:
            ws = [(s[wait2] - t0) / 1000 for c, sm, s in l2]
            ud = [(s[done2] - t0) / 1000 for c, sm, s in l2 if s[done2]]
            ex = [(s[exit2] - t0) / 1000 for c, sm, s in l2 if s[exit2]]
            if ud:
                print(f"  L2 pdl_wait min {min(ws):.2f} max {max(ws):.2f} -> units_done max {max(ud):.2f} -> exit max "
                      f"{max(ex):.2f} us")
