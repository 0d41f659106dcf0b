#!/usr/bin/env python3
"""Finds writes to the A-operand registers of an in-flight HGMMA in SASS (cuobjdump -sass output).

Why: wgmma with A from registers (the cuda.sm90.prefill register-weight kernel) requires that those
registers stay unchanged until the warpgroup waits on the group (WARPGROUP.DEPBAR). In round 2 of issue
6 ptxas merged register copies so that the next K block's decode wrote R152..R167 while an
`HGMMA ... R152` reading them was in flight: wrong results, dependent on the grid size, and no warning
(docs/perf/2026-11-30-h200-sm90-prefill-r2.md). This scan is the check that catches it; run it on every
sm_90a build (tools/gpu/check.sh does).

The scan follows each function's instructions in address order and models the wgmma groups: an
HGMMA whose A operand is a register quad reserves it in the open group; the HGMMA carrying `gsb0` closes
the group; `WARPGROUP.DEPBAR.LE gsb0, 0xN` retires all but the N most recent groups (wgmma.wait_group N).
Any instruction whose destination overlaps a reserved quad is reported. Loops: the groups in flight at
a backward branch are carried to its target and the function is rescanned until nothing changes, so
the group a loop iteration leaves running (double-buffered operands, wait_group 1) is checked against
the next iteration's first instructions. Forward branches are not followed (the straight-line path
covers them: every path through the kernels' K loops is straight-line apart from the back edge).

Usage: sass_hgmma_hazards.py SASS_FILE...   (exit 1 when a hazard is found, 2 on bad input)
       sass_hgmma_hazards.py --self-test
"""
import re
import sys

FUNCTION = re.compile(r"Function : (\S+)|\.text\.(\S+):")
INSTRUCTION = re.compile(r"/\*[0-9a-f]+\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Za-z0-9_.]*)\s*(.*?)\s*;")
REGISTER = re.compile(r"\bR(\d+)\b")


def destination_width(opcode):
    """Registers written by one destination operand of this opcode."""
    if ".128" in opcode:
        return 4
    if ".64" in opcode or ".WIDE" in opcode:
        return 2
    return 1


ADDRESS = re.compile(r"/\*([0-9a-f]+)\*/")
BRANCH_TARGET = re.compile(r"^(?:BRA|JMP)\b.*?0x([0-9a-f]+)")
WAIT = re.compile(r"gsb0\s*,\s*0x([0-9a-f]+)")


def parse(lines):
    """Yields (function, address, opcode, operands, line) per instruction (also sass_loops.py's parser)."""
    function = "?"
    for line in lines:
        f = FUNCTION.search(line)
        if f:
            function = f.group(1) or f.group(2)
            continue
        m = INSTRUCTION.search(line)
        a = ADDRESS.search(line)
        if m and a:
            yield function, int(a.group(1), 16), m.group(1), m.group(2), line.strip()


def scan_function(instructions):
    """Hazards of one function: [(address, line)]. instructions: [(address, opcode, operands, line)]."""
    carried = {}  # back-edge target address -> frozenset of in-flight groups arriving there
    for _ in range(8):  # to a fixed point: each pass may carry more groups around the loops
        groups, open_group, hazards, changed = [], set(), [], False
        for address, opcode, operands, line in instructions:
            for g in carried.get(address, ()):
                if g not in groups:
                    groups.append(g)
            if opcode.startswith("HGMMA"):
                fields = [f.strip() for f in operands.split(",")]  # D, A, B descriptor, C, ...
                a = REGISTER.fullmatch(fields[1]) if len(fields) > 1 else None
                if a:  # A from a register quad (an A in shared memory is a descriptor: nothing to guard)
                    open_group |= set(range(int(a.group(1)), int(a.group(1)) + 4))
                if "gsb0" in operands:
                    groups.append(frozenset(open_group))
                    open_group = set()
                continue
            if opcode.startswith("WARPGROUP.DEPBAR"):
                if open_group:  # HGMMAs without a gsb0 mark: count them as one group
                    groups.append(frozenset(open_group))
                    open_group = set()
                w = WAIT.search(operands)
                keep = int(w.group(1), 16) if w else 0
                groups = groups[len(groups) - keep:] if keep else []
                continue
            branch = BRANCH_TARGET.match(opcode + " " + operands)
            if branch and int(branch.group(1), 16) <= address:
                target = int(branch.group(1), 16)
                merged = carried.get(target, frozenset()) | frozenset(groups)
                if merged != carried.get(target, frozenset()):
                    carried[target], changed = merged, True
            in_flight = set(open_group).union(*groups) if groups else set(open_group)
            d = REGISTER.match(operands)
            if in_flight and d and set(range(int(d.group(1)), int(d.group(1)) + destination_width(opcode))) & in_flight:
                hazards.append((address, line))
        if not changed:
            return hazards
    return hazards


def scan(lines):
    """Returns (hgmma_count, hazards) where hazards are (function, instruction) pairs."""
    by_function = {}
    for function, address, opcode, operands, line in parse(lines):
        by_function.setdefault(function, []).append((address, opcode, operands, line))
    hgmma, hazards = 0, []
    for function, instructions in by_function.items():
        hgmma += sum(1 for i in instructions if i[1].startswith("HGMMA"))
        hazards += [(function, line) for _, line in scan_function(instructions)]
    return hgmma, hazards


def self_test():
    safe = [
        "Function : kernel_safe",
        "/*0100*/ HGMMA.64x128x16.F32.BF16 R24, R152, gdesc[UR4], R24 ;",
        "/*0110*/ HMUL2.BF16_V2 R160, R10, R11 ;",  # outside the in-flight quad R152..R155
        "/*0120*/ WARPGROUP.DEPBAR.LE gsb0, 0x0 ;",
        "/*0130*/ HMUL2.BF16_V2 R152, R10, R11 ;",  # after the wait: fine
    ]
    broken = [
        "Function : kernel_broken",
        "/*0100*/ HGMMA.64x128x16.F32.BF16 R24, R152, gdesc[UR4], R24 ;",
        "/*0110*/ @P0 LDS.128 R152, [R3] ;",  # rewrites R152..R155 while the HGMMA reads them
        "/*0120*/ WARPGROUP.DEPBAR.LE gsb0, 0x0 ;",
    ]
    smem_a = ["Function : k", "/*0100*/ HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24 ;", "/*0110*/ MOV R25, R1 ;"]
    # Double-buffered operands: wait_group 1 retires only the older group; R160 (the newer) stays busy.
    double = [
        "Function : kernel_double",
        "/*0100*/ HGMMA.64x128x16.F32.BF16 R24, R152, gdesc[UR4], R24, gsb0 ;",
        "/*0110*/ HGMMA.64x128x16.F32.BF16 R24, R160, gdesc[UR4], R24, gsb0 ;",
        "/*0120*/ WARPGROUP.DEPBAR.LE gsb0, 0x1 ;",
        "/*0130*/ HMUL2.BF16_V2 R152, R10, R11 ;",  # fine: the R152 group retired
        "/*0140*/ HMUL2.BF16_V2 R161, R10, R11 ;",  # hazard: the R160 group still runs
    ]
    # A loop whose iteration leaves a group running: the write at the loop top hits it.
    loop = [
        "Function : kernel_loop",
        "/*0100*/ HMUL2.BF16_V2 R153, R10, R11 ;",  # hazard on the 2nd iteration (R152 group in flight)
        "/*0110*/ HGMMA.64x128x16.F32.BF16 R24, R160, gdesc[UR4], R24, gsb0 ;",
        "/*0120*/ WARPGROUP.DEPBAR.LE gsb0, 0x0 ;",
        "/*0130*/ HGMMA.64x128x16.F32.BF16 R24, R152, gdesc[UR4], R24, gsb0 ;",
        "/*0140*/ @P0 BRA 0x100 ;",
    ]
    assert scan(safe) == (1, []), scan(safe)
    count, hazards = scan(broken)
    assert count == 1 and len(hazards) == 1 and "LDS.128 R152" in hazards[0][1], hazards
    assert scan(smem_a)[1] == [], "an A operand in shared memory reserves no registers"
    count, hazards = scan(double)
    assert count == 2 and [h[1] for h in hazards] == ["/*0140*/ HMUL2.BF16_V2 R161, R10, R11 ;"], hazards
    count, hazards = scan(loop)
    assert count == 2 and [h[1] for h in hazards] == ["/*0100*/ HMUL2.BF16_V2 R153, R10, R11 ;"], hazards
    print("self-test passed")
    return 0


def scan_files(paths, scan_lines, tool):
    """Sums scan_lines(lines) -> (count, findings) over the SASS files at `paths` (also the odd-descriptor
    scan's); None, after a message naming the file, when one cannot be read."""
    total, found = 0, []
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                count, findings = scan_lines(f)
        except OSError as e:
            print(f"{tool}: cannot read {path}: {e}", file=sys.stderr)
            return None
        total += count
        found += findings
    return total, found


def main(argv):
    if argv == ["--self-test"]:
        return self_test()
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    scanned = scan_files(argv, scan, "sass_hgmma_hazards")
    if scanned is None:
        return 2
    total, found = scanned
    for function, line in found[:20]:
        print(f"HAZARD in {function}: {line}")
    print(f"HGMMA instructions: {total}; writes to in-flight A registers: {len(found)}")
    if total == 0:
        print("sass_hgmma_hazards: no HGMMA found (wrong file?)", file=sys.stderr)
        return 2
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
