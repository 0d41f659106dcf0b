#!/usr/bin/env python3
"""Summarizes the fused decode's launch timelines made with docs/perf/2026-12-07-h100-r46-timeline-probe.patch
(r41's probes rebased onto r45's round-q early prime): in launch 1's early-prime hook, 13 = round q's winner
known (warp 0), 12 = past the early-item barrier, 4 = warp 0's early copies issued; then top-k done (3) and
the routing's return (14). Needs 18 stamp slots (the patch's kFdStamps).
Usage: python3 THIS.py FILE [LABEL]"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "gpu"))
from timeline_summary import summarize  # noqa: E402

NAMES = {0: {0: 'entry', 1: 'pdl_wait', 15: 'select entry', 16: 'first line', 17: 'other line', 2: 'logits in',
             13: 'round q winner', 12: 'barrier passed', 4: 'early prime', 3: 'top-k done', 14: 'route returned',
             5: 'items listed', 6: 'ring primed', 7: 'step0(w0)', 8: 'item0', 9: 'item1', 10: 'item2+last',
             11: 'exit'},
         1: {0: 'entry', 1: 'record', 2: 'prologue', 3: 'pdl_wait', 6: 'unit0(w0)', 7: 'units(w0)', 4: 'units_done',
             5: 'exit'}}
ORDER = {0: [0, 1, 15, 16, 17, 2, 13, 12, 4, 3, 14, 5, 6, 7, 8, 9, 10, 11], 1: [0, 1, 2, 3, 6, 7, 4, 5]}

if __name__ == "__main__":
    summarize(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else '', NAMES, ORDER)
