"""tools/gpu/timeline_summary.py, the fused decode's timeline summarizer that the stamp patches'
scripts call: per-slot percentiles in us from launch 1's first entry, launch 1's last exit and its exits
by item count, launch 2's span, one block per token count."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools", "gpu"))
from timeline_summary import read_stamps, summarize  # noqa: E402

NAMES = {0: {0: "entry", 8: "item0", 9: "item1", 10: "item2+last", 11: "exit"},
         1: {0: "entry", 3: "pdl_wait", 4: "units_done", 5: "exit"}}
ORDER = {0: [0, 8, 9, 10, 11], 1: [0, 3, 4, 5]}


def line(tokens, launch, cta, stamps_ns):
    stamps = [0] * 16
    for slot, ns in stamps_ns.items():
        stamps[slot] = ns
    return f"{tokens} {launch} {cta} {cta % 2} " + " ".join(map(str, stamps))


def test_summary_of_two_ctas_per_launch(tmp_path, capsys):
    t0 = 1_000_000  # globaltimer ns
    lines = [
        # Launch 1: CTA 0 ends two items and exits at 10 us, CTA 1 three items and exits at 14 us.
        line(1, 0, 0, {0: t0, 8: t0 + 4000, 9: t0 + 9000, 11: t0 + 10000}),
        line(1, 0, 1, {0: t0 + 200, 8: t0 + 5000, 9: t0 + 9500, 10: t0 + 13000, 11: t0 + 14000}),
        # Launch 2: one CTA enters before launch 1's last exit, one after.
        line(1, 1, 0, {0: t0 + 11000, 3: t0 + 14500, 4: t0 + 20000, 5: t0 + 20500}),
        line(1, 1, 1, {0: t0 + 15000, 3: t0 + 15000, 4: t0 + 21000, 5: t0 + 21200}),
        "1 0 7 3 12",  # a short line: skipped
        line(8, 0, 0, {0: 5 * t0, 8: 5 * t0 + 1000, 11: 5 * t0 + 2000}),
    ]
    path = tmp_path / "stamps.txt"
    path.write_text("\n".join(lines) + "\n")
    assert sorted(read_stamps(path)) == [1, 8] and len(read_stamps(path)[1]) == 4
    summarize(path, "lab", NAMES, ORDER)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "== T=1 lab  CTAs: launch1 2, launch2 2"
    item2 = next(l for l in out if "item2+last" in l)  # only CTA 1 stamped it
    assert "n=   1" in item2 and "max  13.00 us" in item2
    exit1 = next(l for l in out if l.startswith("  L1 exit "))
    assert "min  10.00" in exit1 and "max  14.00" in exit1
    assert "  launch 1 last exit 14.00 us; launch-2 CTAs entered before it: 1 of 2" in out
    assert "  L1 exit by items: 2+ items n=1 med 10.00 max 10.00, 3+ items n=1 med 14.00 max 14.00" in out
    assert "  L2 pdl_wait min 14.50 max 15.00 -> units_done max 21.00 -> exit max 21.20 us" in out
    t8 = out.index("== T=8 lab  CTAs: launch1 1, launch2 0")
    assert "  L1 exit by items: 1+ items n=1 med 2.00 max 2.00" in out[t8:]
