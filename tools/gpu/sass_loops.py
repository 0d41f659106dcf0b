#!/usr/bin/env python3
"""The loops of each kernel in `cuobjdump -sass` output, for comparing a kernel's inner loop before and
after a change without spending device time (docs/perf/README.md says how to get the SASS locally).

  python3 tools/gpu/sass_loops.py SASS.txt [SASS2.txt ...] [--kernel REGEX] [--with OPCODE] [--top N]
  python3 tools/gpu/sass_loops.py --self-test

A loop is the code from a backward branch's target to the branch. For every kernel (name matching
--kernel) this prints its instruction count and its N shortest loops that contain OPCODE (default HMMA:
the K loops of the mma.sync kernels), each with its length, its OPCODE count and its most frequent
opcodes. With several files, the same kernel's lines follow each other, so the files compare line by line.
Counts are static: a loop's instructions, not how often they run (that is Nsight Compute's job).
"""
import argparse
import collections
import re
import sys

from sass_hgmma_hazards import parse  # the SASS parser of the HGMMA hazard scan (same folder)

BRANCH_TARGET = re.compile(r"\bBRA\b.*?(0x[0-9a-f]+)")


def kernels_of(lines):
    """{kernel name: [(address, instruction text without its predicate)]} in file order; instructions
    outside a named function are left out."""
    kernels = {}
    for function, address, op, operands, _ in parse(lines):
        if function != "?":
            kernels.setdefault(function, []).append((address, f"{op} {operands}".strip()))
    return kernels


def opcode(text):
    """The opcode without modifiers; a leading predicate (@P0, @!PT) is skipped."""
    words = text.split()
    word = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return word.split(".")[0]


def loops_of(instructions):
    """Every backward branch's loop as a list of instructions, shortest first."""
    index_of = {address: i for i, (address, _) in enumerate(instructions)}
    loops = []
    for i, (address, text) in enumerate(instructions):
        if opcode(text) != "BRA":
            continue
        found = BRANCH_TARGET.search(text)
        if not found:
            continue
        target = int(found.group(1), 16)
        if target < address and target in index_of:
            loops.append(instructions[index_of[target]:i + 1])
    return sorted(loops, key=len)


def short_name(name):
    """fused_gemm1_kernel<Li1E> for a mangled template kernel (its last <length><identifier> before the
    template arguments, which stay mangled); the name itself otherwise."""
    best = None
    for found in re.finditer(r"(?=(\d+))", name):  # every start: "_N_16kernel" holds the length 6
        start = found.start() + len(found.group(1))
        end = start + int(found.group(1))
        candidate = name[start:end]
        if end < len(name) and name[end] == "I" and re.fullmatch(r"[A-Za-z_]\w*", candidate):
            best = (candidate, end)
    if best is None:
        return name
    arguments_end = name.find("EEv", best[1])
    return f"{best[0]}<{name[best[1] + 1:arguments_end if arguments_end > 0 else len(name)]}>"


def report(path, kernels, name_filter, with_opcode, top):
    lines = []
    for name, instructions in kernels.items():
        if name_filter and not re.search(name_filter, name):
            continue
        loops = [loop for loop in loops_of(instructions) if any(opcode(t) == with_opcode for _, t in loop)]
        parts = []
        for loop in loops[:top]:
            mix = collections.Counter(opcode(t) for _, t in loop)
            common = " ".join(f"{op} {n}" for op, n in mix.most_common(6))
            parts.append(f"[{len(loop)} instructions, {mix[with_opcode]} {with_opcode}: {common}]")
        lines.append((short_name(name), f"{path}: {short_name(name)}: {len(instructions)} instructions; "
                      f"loops with {with_opcode}: " + (" ".join(parts) if parts else "none")))
    return lines


SELF_TEST_SASS = """
\t\tFunction : _ZN6fp4moe12_GLOBAL__N_16kernelILi1EEEvNS_6ParamsE
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   LDS.128 R4, [R2] ;
        /*0020*/                   HMMA.16816.F32.BF16 R8, R4, R6, R8 ;
        /*0030*/                   LOP3.LUT R4, R4, 0x81c081c0, RZ, 0xc0, !PT ;
        /*0040*/                   HMMA.16816.F32.BF16 R8, R4, R6, R8 ;
        /*0050*/              @!P0 BRA 0x10 ;
        /*0060*/                   IADD3 R2, R2, 0x10, RZ ;
        /*0070*/               @P1 BRA 0x60 ;
        /*0080*/                   EXIT ;
"""


def self_test():
    kernels = kernels_of(SELF_TEST_SASS.splitlines())
    assert list(kernels) == ["_ZN6fp4moe12_GLOBAL__N_16kernelILi1EEEvNS_6ParamsE"], kernels
    instructions = next(iter(kernels.values()))
    assert len(instructions) == 9, instructions
    assert opcode("@!P0 BRA 0x10") == "BRA" and opcode("HMMA.16816.F32.BF16 R8, R4, R6, R8") == "HMMA"
    loops = loops_of(instructions)
    assert [len(loop) for loop in loops] == [2, 5], [len(loop) for loop in loops]
    lines = report("x", kernels, None, "HMMA", 3)
    assert short_name("_ZN6fp4moe57_GLOBAL__N__a11bfc91_24_moe_fused_decode_sm80_cu_94668b9b18fused_gemm1_kernelILi1EEE"
                      "vNS_12fused_decode11Gemm1ParamsE") == "fused_gemm1_kernel<Li1E>"
    assert short_name("plain_kernel") == "plain_kernel"
    assert lines == [("kernel<Li1E>", "x: kernel<Li1E>: 9 instructions; loops with HMMA: "
                      "[5 instructions, 2 HMMA: HMMA 2 LDS 1 LOP3 1 BRA 1]")], lines
    assert report("x", kernels, "nomatch", "HMMA", 3) == []
    print("sass_loops self-test: ok")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*")
    parser.add_argument("--kernel", default=None, help="regex on the (mangled) kernel name")
    parser.add_argument("--with", dest="with_opcode", default="HMMA", help="opcode a loop must contain")
    parser.add_argument("--top", type=int, default=3, help="loops per kernel, shortest first")
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        self_test()
        return 0
    if not args.files:
        parser.error("no SASS file given")
    rows = []
    for order, path in enumerate(args.files):
        try:
            with open(path) as handle:
                kernels = kernels_of(handle)
        except OSError as error:
            print(f"sass_loops: cannot read {path}: {error.strerror}", file=sys.stderr)
            return 2
        if not kernels:
            print(f"sass_loops: {path} holds no 'Function :' sections (is it cuobjdump -sass output?)", file=sys.stderr)
            return 2
        rows += [(name, order, line) for name, line in report(path, kernels, args.kernel, args.with_opcode, args.top)]
    for _, _, line in sorted(rows):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
