#!/usr/bin/env python3
"""Where a kernel's warps spend their time, by region of its SASS (Nsight Compute warp-state samples).

  ncu --section SourceCounters -k regex:NAME -o REPORT ...
  ncu -i REPORT.ncu-rep --page source --csv --print-source sass > SASS.csv
  python3 tools/gpu/sass_regions.py SASS.csv [MIN_SHARE (default 0.004)]

A region is a run of consecutive instructions executed about equally often (within 1.5x), e.g. one K
loop, an epilogue, a producer loop. For each profiled kernel in the CSV this prints every region holding
at least MIN_SHARE of the kernel's samples: its address range, instruction count, how often its middle
instruction ran, its share of the samples, and the notable opcodes in it (HGMMA shapes, barriers, TMA and
bulk copies, global stores). Samples are warp time: a region that all consumer warps sit in at once is
that share of the consumers' time (divide by the consumer warps' share of the CTA's warps).

Each kernel's first line after its name is its code footprint: the SASS instructions it has, how many
ran at all (and in how many 128-byte lines), how many ran at most as often as the kernel's entry
instruction (once per warp: straight-line code such as a prologue, or a loop that only a few of the
warps run), and its "no instruction" stall samples (instruction fetch), in all code and in that code. At
one token a kernel runs briefly, so code each SM fetches cold can dominate (docs/perf/2026-11-30-h200-r9.md).
"""
import csv
import sys

TAGS = ("HGMMA", "STG", "UCGABAR", "TRYWAIT", "DEPBAR", "UTMALDG", "UBLKCP", "LDGSTS", "STS", "LDG", "EXIT", "BAR")


def kernels_of(path):
    """Each profiled kernel's name, its header (column name -> index: each kernel's source page has its own
    columns, e.g. L2 cache-policy ones only where its code sets a policy) and its instruction rows."""
    kernels, head = [], None
    for row in csv.reader(open(path)):
        if not row:
            continue
        if row[0] == "Kernel Name":
            kernels.append({"name": row[1], "rows": [], "head": None})
        elif row[0] == "Address":
            head = {name: i for i, name in enumerate(row)}
            if kernels:
                kernels[-1]["head"] = head
        elif kernels and row[0].startswith("0x"):
            kernels[-1]["rows"].append(row)
    if head is None or not kernels:
        sys.exit(f"{path}: no kernel with a source page (ncu --page source --csv --print-source sass)")
    for kernel in kernels:
        for column in ("Source", "Warp Stall Sampling (All Samples)", "Instructions Executed"):
            if kernel["rows"] and column not in (kernel["head"] or {}):
                sys.exit(f"{path}: this ncu's source page lacks the column {column!r} ({kernel['name'][:60]})")
    return kernels


def footprint(rows, head, samples, executed):
    """One line: the kernel's code, what of it ran, and its instruction-fetch stalls (see above)."""
    column = head.get("stall_no_inst")
    fetch = lambda r: int(r[column]) if column is not None and r[column] not in ("", "-") else 0
    warps = executed(rows[0])
    ran = [r for r in rows if executed(r) > 0]
    lines = {(int(r[0], 16) - int(rows[0][0], 16)) // 128 for r in ran}
    once = [r for r in ran if executed(r) <= warps]  # at most as often as the entry instruction
    return (f"code {len(rows)} instructions, {len(ran)} ran ({len(lines)} lines of 128 B), {len(once)} at most as often as the "
            f"entry; no-instruction stalls {sum(fetch(r) for r in rows)} of {sum(samples(r) for r in rows)} samples, "
            f"{sum(fetch(r) for r in once)} in that code")


def main(path, min_share):
    for kernel in kernels_of(path):
        rows, head = kernel["rows"], kernel["head"]
        samples = lambda r: int(r[head["Warp Stall Sampling (All Samples)"]] or 0)
        executed = lambda r: int(r[head["Instructions Executed"]] or 0)
        total = sum(samples(r) for r in rows)
        print(f"== {kernel['name'][:110]}: {total} samples")
        if not rows or total == 0:
            continue
        print("  " + footprint(rows, head, samples, executed))
        regions, current = [], [rows[0]]
        for r in rows[1:]:
            a, b = executed(current[-1]), executed(r)
            if (a == 0) != (b == 0) or (a and b and max(a, b) / min(a, b) > 1.5):
                regions.append(current)
                current = [r]
            else:
                current.append(r)
        regions.append(current)
        for region in regions:
            share = sum(samples(r) for r in region) / total
            if share < min_share:
                continue
            tags = set()
            for r in region:
                source = r[head["Source"]].strip()
                opcode = source.split()[1] if source.startswith("@") else source.split()[0]
                tags.update(t for t in TAGS if t in source)
                if opcode.startswith("HGMMA"):
                    tags.add(opcode)
            print(f"  {region[0][0][-5:]}-{region[-1][0][-5:]}  {len(region):5} instructions  "
                  f"executed {executed(region[len(region) // 2]):10}  {100 * share:5.1f} %  {' '.join(sorted(tags))}")


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    main(sys.argv[1], float(sys.argv[2]) if len(sys.argv) == 3 else 0.004)
