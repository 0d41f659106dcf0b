"""tools/gpu/sass_regions.py, which sums Nsight Compute's per-instruction warp samples over regions of
a kernel's SASS: instructions executed about equally often form one region, each region's share is of
its own kernel's samples, each kernel's first line is its code footprint (what ran, in how many 128-byte
lines, the straight-line share, instruction-fetch stalls), and a source page without samples per
instruction is an error."""

import csv
import io
import os
import subprocess
import sys

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "gpu", "sass_regions.py")
HEAD = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed"]


def source_page(kernels):
    out = io.StringIO()
    w = csv.writer(out, quoting=csv.QUOTE_ALL)
    for name, rows in kernels:
        w.writerow(["Kernel Name", name])
        w.writerow(HEAD)
        for i, (source, samples, executed) in enumerate(rows):
            w.writerow([f"0x7f00000{i:05x}", source, samples, executed])
    return out.getvalue()


def run(path, *args):
    return subprocess.run([sys.executable, SCRIPT, str(path), *args], capture_output=True, text=True)


def test_regions_split_by_execution_count_and_share_per_kernel(tmp_path):
    loop = [("HGMMA.64x256x16.F32.BF16 R24, R152, gdesc[UR16], R24", 30, 1000), ("LDS R4, [R5]", 30, 1100)]
    tail = [("HGMMA.64x32x16.F32.BF16 R24, R152, gdesc[UR16], R24", 20, 500)]  # half as often: its own region
    epilogue = [("STG.E [R2.64], R7", 15, 40), ("@P0 STG.E [R4.64], R9", 5, 40)]
    page = source_page([("gemm1", loop + tail + epilogue), ("gemm2", [("EXIT", 10, 1)])])
    path = tmp_path / "sass.csv"
    path.write_text(page)
    result = run(path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("== gemm1: 100 samples")
    assert lines[1].strip().startswith("code 5 instructions")  # the footprint line (next test)
    regions = [l for l in lines[2:5]]
    assert "60.0 %" in regions[0] and "HGMMA.64x256x16.F32.BF16" in regions[0] and "2 instructions" in regions[0]
    assert "20.0 %" in regions[1] and "HGMMA.64x32x16.F32.BF16" in regions[1]
    assert "20.0 %" in regions[2] and "STG" in regions[2]
    assert lines[5].startswith("== gemm2: 10 samples") and "100.0 %" in lines[7]


def test_footprint_counts_code_that_ran_its_lines_and_fetch_stalls(tmp_path):
    # 12 instructions 16 bytes apart: the entry (once per warp: 4 warps), an 8-instruction loop run 10
    # times per warp, an epilogue instruction run once per warp, and 2 instructions that never ran.
    # "No instruction" stall samples: 1 at the entry, 2 per loop instruction, 3 in the epilogue.
    rows = [("S2R R0, SR_TID.X", 1, 4, 1)] + [("LOP3.LUT R1, R2, 0xf, RZ, 0xc0, !PT", 5, 40, 2)] * 8
    rows += [("STG.E [R2.64], R7", 2, 4, 3), ("BRA 0x0", 0, 0, 0), ("EXIT", 0, 0, 0)]
    out = io.StringIO()
    w = csv.writer(out, quoting=csv.QUOTE_ALL)
    w.writerow(["Kernel Name", "k"])
    w.writerow(HEAD + ["stall_no_inst"])
    for i, (source, samples, executed, no_inst) in enumerate(rows):
        w.writerow([f"0x7f0000{16 * i:06x}", source, samples, executed, no_inst])
    path = tmp_path / "sass.csv"
    path.write_text(out.getvalue())
    result = run(path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1].strip() == (
        "code 12 instructions, 10 ran (2 lines of 128 B), 2 at most as often as the entry; "
        "no-instruction stalls 20 of 43 samples, 4 in that code")


def test_a_page_without_sample_columns_is_an_error(tmp_path):
    path = tmp_path / "details.csv"
    path.write_text('"Kernel Name","k"\n"Address","Source"\n"0x1","EXIT"\n')
    result = run(path)
    assert result.returncode != 0 and "lacks the column" in result.stderr


def test_each_kernel_reads_its_own_columns(tmp_path):
    # Each kernel's source page has its own header: here the first kernel has two cache-policy columns the
    # second lacks, so its "no instruction" column sits two places later (r48: the script had read every
    # kernel with the last kernel's header and reported 0 fetch stalls for launch 1 of the fused decode).
    out = io.StringIO()
    w = csv.writer(out, quoting=csv.QUOTE_ALL)
    w.writerow(["Kernel Name", "with_policies"])
    w.writerow(HEAD + ["L2 Explicit Evict Policies", "L2 Explicit Hit Policy Evict First", "stall_no_inst"])
    w.writerow(["0x7f0000000000", "S2R R0, SR_TID.X", 9, 4, 100, 200, 7])
    w.writerow(["0x7f0000000010", "EXIT", 1, 4, 100, 200, 0])
    w.writerow(["Kernel Name", "without"])
    w.writerow(HEAD + ["stall_no_inst"])
    w.writerow(["0x7f0000100000", "S2R R0, SR_TID.X", 5, 4, 3])
    w.writerow(["0x7f0000100010", "EXIT", 5, 4, 0])
    path = tmp_path / "sass.csv"
    path.write_text(out.getvalue())
    result = run(path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("== with_policies: 10 samples")
    assert "no-instruction stalls 7 of 10 samples" in lines[1]
    footprint = [l for l in lines if "no-instruction stalls" in l]
    assert len(footprint) == 2 and "no-instruction stalls 3 of 10 samples" in footprint[1]
