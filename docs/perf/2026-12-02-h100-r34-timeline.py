#!/usr/bin/env python3
"""Summarizes the fused decode's launch timelines: the stamp file that FP4MOE_FD_TIMELINE=FILE makes
`fp4moe bench moe` write in a build with docs/perf/2026-12-02-h100-r34-timeline.patch (16 globaltimer
stamps of thread 0 per CTA and launch; the last run of the last graph replay). This file names the
patch's stamp slots; tools/gpu/timeline_summary.py prints the summary.
Usage: python3 2026-12-02-h100-r34-timeline.py FILE [LABEL]"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "gpu"))
from timeline_summary import summarize  # noqa: E402

# Launch 1: 2 and 3 are stamped inside the routing by the CTAs whose warp 0 routes a token; 4 only where
# the one-token early prime runs.
NAMES = {0: {0: 'entry', 1: 'pdl_wait', 2: 'logits in', 3: 'top-k done', 4: 'early prime', 5: 'items listed',
             6: 'ring primed', 7: 'step0(w0)', 8: 'item0', 9: 'item1', 10: 'item2+last', 11: 'exit'},
         1: {0: 'entry', 1: 'record', 2: 'prologue', 3: 'pdl_wait', 6: 'unit0(w0)', 7: 'units(w0)', 4: 'units_done',
             5: 'exit'}}
ORDER = {0: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], 1: [0, 1, 2, 3, 6, 7, 4, 5]}

if __name__ == "__main__":
    summarize(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else '', NAMES, ORDER)
