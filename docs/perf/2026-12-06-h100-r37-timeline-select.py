#!/usr/bin/env python3
"""Summarizes the fused decode's launch timelines made with docs/perf/2026-12-06-h100-r37-timeline-select.patch:
r36's stamps (docs/perf/2026-12-06-h100-r36-timeline-prime.py) plus one in the routing: 15 select_top_k
entered, before its logits loads (between pdl_wait and "logits in").
Usage: python3 2026-12-06-h100-r37-timeline-select.py FILE [LABEL]"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "gpu"))
from timeline_summary import summarize  # noqa: E402

NAMES = {0: {0: 'entry', 1: 'pdl_wait', 15: 'select entry', 2: 'logits in', 3: 'top-k done',
             14: 'route returned', 12: 'barrier passed', 13: 'first item known', 4: 'early prime',
             5: 'items listed', 6: 'ring primed', 7: 'step0(w0)', 8: 'item0', 9: 'item1', 10: 'item2+last',
             11: 'exit'},
         1: {0: 'entry', 1: 'record', 2: 'prologue', 3: 'pdl_wait', 6: 'unit0(w0)', 7: 'units(w0)', 4: 'units_done',
             5: 'exit'}}
ORDER = {0: [0, 1, 15, 2, 3, 14, 12, 13, 4, 5, 6, 7, 8, 9, 10, 11], 1: [0, 1, 2, 3, 6, 7, 4, 5]}

if __name__ == "__main__":
    summarize(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else '', NAMES, ORDER)
