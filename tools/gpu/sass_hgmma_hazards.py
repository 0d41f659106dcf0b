#!/usr/bin/env python3
"""Finds writes to the A-operand registers of an in-flight HGMMA in SASS (cuobjdump -sass output).

Why: wgmma with A from registers (the cuda.sm90.prefill register-weight kernel) requires that those
registers stay unchanged until the warpgroup waits on the group (WARPGROUP.DEPBAR). In round 2 of issue
6 ptxas merged register copies so that the next K block's decode wrote R152..R167 while an
`HGMMA ... R152` reading them was in flight: wrong results, dependent on the grid size, and no warning
(docs/perf/2026-11-30-h200-sm90-prefill-r2.md). This scan is the check that catches it; run it on every
sm_90a build (tools/gpu/check.sh does).

The scan is linear per function: after an HGMMA whose A operand is a register quad, any instruction
whose destination register overlaps that quad before the next WARPGROUP.DEPBAR is reported. Branches
are not followed, so the loop's back edge is covered by the next iteration's straight-line code.

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


def scan(lines):
    """Returns (hgmma_count, hazards) where hazards are (function, instruction) pairs."""
    function, in_flight, hgmma, hazards = "?", set(), 0, []
    for line in lines:
        f = FUNCTION.search(line)
        if f:
            function, in_flight = f.group(1) or f.group(2), set()
            continue
        m = INSTRUCTION.search(line)
        if not m:
            continue
        opcode, operands = m.group(1), m.group(2)
        if opcode.startswith("HGMMA"):
            hgmma += 1
            fields = [f.strip() for f in operands.split(",")]  # D, A, B descriptor, C, ...
            a = REGISTER.fullmatch(fields[1]) if len(fields) > 1 else None
            if a:  # A from a register quad (an A in shared memory is a descriptor: nothing to guard)
                in_flight |= set(range(int(a.group(1)), int(a.group(1)) + 4))
            continue
        if opcode.startswith("WARPGROUP.DEPBAR"):
            in_flight = set()
            continue
        if not in_flight:
            continue
        d = REGISTER.match(operands)
        if d and set(range(int(d.group(1)), int(d.group(1)) + destination_width(opcode))) & in_flight:
            hazards.append((function, line.strip()))
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
    assert scan(safe) == (1, []), scan(safe)
    count, hazards = scan(broken)
    assert count == 1 and len(hazards) == 1 and "LDS.128 R152" in hazards[0][1], hazards
    assert scan(smem_a)[1] == [], "an A operand in shared memory reserves no registers"
    print("self-test passed")
    return 0


def main(argv):
    if argv == ["--self-test"]:
        return self_test()
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    total, found = 0, []
    for path in argv:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                count, hazards = scan(f)
        except OSError as e:
            print(f"sass_hgmma_hazards: cannot read {path}: {e}", file=sys.stderr)
            return 2
        total += count
        found += hazards
    for function, line in found[:20]:
        print(f"HAZARD in {function}: {line}")
    print(f"HGMMA instructions: {total}; writes to in-flight A registers: {len(found)}")
    if total == 0:
        print("sass_hgmma_hazards: no HGMMA found (wrong file?)", file=sys.stderr)
        return 2
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
