#!/usr/bin/env python3
"""Finds memory instructions whose 64-bit memory descriptor sits in an odd uniform register (SASS, as
`cuobjdump -sass` prints it).

Why: on SM80 and later every global access names a memory descriptor, `desc[URn]`, a 64-bit value in the
uniform register pair URn:URn+1, so n is even. CUDA 13.0's ptxas breaks that for `cp.async` with an L2
cache-policy operand (`createpolicy` + `cp.async...L2::cache_hint`) when it splits the shared address into
a lane register plus a uniform register: it emits `LDGSTS [R11+UR0+0xd00], desc[UR1][R2.64]`, whose
descriptor UR1 nothing sets; the kernel dies with cudaErrorIllegalInstruction and no warning at build
time (docs/perf/2026-12-06-h100-r35.md; the bug of triton-lang/triton#11660, fixed in ptxas 13.4). The
fused decode's weight copies carry such a policy since r36, in a form that avoids it
(copy_lane_stage in src/kernels/cuda/moe_fused_decode_sm80_steps.cuh); this scan is the check that the
form holds, for every architecture the library was built for.

Usage: sass_odd_descriptors.py SASS_FILE...                 (exit 1 when one is found, 2 on bad input)
       sass_odd_descriptors.py --cuobjdump CUOBJDUMP LIBRARY  (disassembles LIBRARY first)
       sass_odd_descriptors.py --self-test
"""
import re
import subprocess
import sys

from sass_hgmma_hazards import parse, scan_files  # the HGMMA hazard scan's SASS parser and file loop

DESCRIPTOR = re.compile(r"\bdesc\[UR(\d+)\]")


def scan(lines):
    """Returns (descriptor_uses, odd) where odd lists (function, instruction line) pairs."""
    uses, odd = 0, []
    for function, _, _, operands, line in parse(lines):
        for register in DESCRIPTOR.findall(operands):
            uses += 1
            if int(register) % 2:
                odd.append((function, line))
    return uses, odd


def self_test():
    clean = [
        "Function : kernel_clean",
        "/*4040*/ LDGSTS.E.BYPASS.128 [R11], desc[UR6][R6.64] ;",
        "/*4060*/ LDGSTS.E.BYPASS.128 [R11+0x200], desc[UR6][R6.64+0x200] ;",
        "/*4070*/ LDGSTS.E [R13], desc[UR6][R2.64] ;",
        "/*4080*/ @P0 LDG.E.128 R4, desc[UR4][R2.64] ;",
        "/*4090*/ LDS.128 R8, [R11+UR5] ;",  # an odd uniform register that is no descriptor
    ]
    broken = [
        "Function : kernel_broken",
        "/*4560*/ LDGSTS.E.BYPASS.128 [R11+UR0+0xd00], desc[UR1][R2.64] ;",  # as ptxas 13.0 emitted it
        "/*4570*/ LDGSTS.E [R7+0x10], desc[UR14][R4.64] ;",
        "Function : kernel_other",
        "/*0100*/ @!P1 STG.E desc[UR13][R2.64], R5 ;",
    ]
    assert scan(clean) == (4, []), scan(clean)
    uses, odd = scan(broken)
    assert uses == 3, uses
    assert [f for f, _ in odd] == ["kernel_broken", "kernel_other"], odd
    assert "desc[UR1]" in odd[0][1] and "desc[UR13]" in odd[1][1], odd
    assert scan(["no SASS here"]) == (0, [])
    print("self-test passed")
    return 0


def report(uses, odd):
    for function, line in odd[:20]:
        print(f"ODD DESCRIPTOR in {function}: {line}")
    print(f"memory descriptors: {uses}; in odd uniform registers: {len(odd)}")
    if uses == 0:
        print("sass_odd_descriptors: no desc[UR] operand found (wrong file, or not SM80+ SASS?)", file=sys.stderr)
        return 2
    return 1 if odd else 0


def main(argv):
    if argv == ["--self-test"]:
        return self_test()
    if len(argv) == 3 and argv[0] == "--cuobjdump":
        try:
            sass = subprocess.run([argv[1], "-sass", argv[2]], check=True, capture_output=True, text=True).stdout
        except (OSError, subprocess.CalledProcessError) as e:
            detail = getattr(e, "stderr", "") or ""
            print(f"sass_odd_descriptors: cannot disassemble {argv[2]} with {argv[1]}: {e} {detail}", file=sys.stderr)
            return 2
        return report(*scan(sass.splitlines()))
    if not argv or argv[0].startswith("--"):
        print(__doc__, file=sys.stderr)
        return 2
    scanned = scan_files(argv, scan, "sass_odd_descriptors")
    return 2 if scanned is None else report(*scanned)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
