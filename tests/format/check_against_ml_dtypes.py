#!/usr/bin/env python3
"""Check fp4moe's format layer against an independent implementation: numpy + ml_dtypes (PyPI).

Drives tests/format/format_probe (the C++ code under test) and compares, bit for bit:
  1. E2M1 / E4M3 decode tables and a dense sweep of float32 encodes against ml_dtypes
     float4_e2m1fn / float8_e4m3fn (ties at every midpoint, subnormals, +-0, saturation, Inf).
  2. BF16 rounding (float_to_bf16) against ml_dtypes.bfloat16 on the same sweep.
  3. NVFP4 quantize/dequantize of random and edge-case matrices against the ModelOpt formulas of
     nvfp4-format.md 3.2, written here from the formulas with numpy float32 arithmetic step by step.
  4. The 128x4 scale swizzle against the reshape/permute tensor form (nvfp4-format.md 6.1).

Known, documented differences (docs/format.md), excluded from the bitwise comparisons:
  * NaN -> E2M1: fp4moe gives +-6 by the sign bit (0x7 / 0xF, CUTLASS's choice); ml_dtypes gives
    0x8 (its quiet_NaN, i.e. -0). NVFP4 has no NaN code, so this is implementation-defined; the
    NVFP4 quantizer refuses NaN input anyway. Checked separately: fp4moe's NaN codes are asserted.
  * E4M3: ml_dtypes' cast does not saturate (|x| > 464 -> NaN), fp4moe's encoder is satfinite like
    the CUDA __nv_fp8_e4m3 constructor; the oracle clamps to +-448 first, which models satfinite
    exactly (NaN passes through the clamp and is compared as NaN codes).
  * BF16 NaN payloads are not compared bitwise; both sides must be NaN with the same sign.

Usage: check_against_ml_dtypes.py --probe PATH/TO/format_probe
Exits 1 with a clear message when numpy or ml_dtypes is missing (CI installs them with pip).
"""

import argparse
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import ml_dtypes
except ImportError as error:  # a missing oracle is a failure, never a pass
    print(f"FAIL: the format oracle needs numpy and ml_dtypes ({error}). "
          "Install them with: python3 -m pip install numpy ml_dtypes", file=sys.stderr)
    sys.exit(1)

F32 = np.float32
E2M1 = ml_dtypes.float4_e2m1fn
E4M3 = ml_dtypes.float8_e4m3fn
BF16 = ml_dtypes.bfloat16

failures = []


def check(ok, what):
    if ok:
        print(f"ok    {what}")
    else:
        print(f"FAIL  {what}")
        failures.append(what)


class Probe:
    def __init__(self, path, workdir):
        self.path = path
        self.workdir = workdir
        self.counter = 0

    def file(self, suffix):
        self.counter += 1
        return os.path.join(self.workdir, f"f{self.counter}{suffix}")

    def run(self, *args):
        result = subprocess.run([self.path, *map(str, args)], capture_output=True, text=True)
        return result

    def must(self, *args):
        result = self.run(*args)
        if result.returncode != 0:
            raise RuntimeError(f"format_probe {' '.join(map(str, args))} failed: {result.stderr.strip()}")

    def encode(self, command, x, out_dtype):
        src, dst = self.file(".f32"), self.file(".out")
        np.asarray(x, dtype=F32).tofile(src)
        self.must(command, src, dst)
        return np.fromfile(dst, dtype=out_dtype)

    def decode(self, command):
        dst = self.file(".f32")
        self.must(command, dst)
        return np.fromfile(dst, dtype=F32)

    def quantize(self, x, scale2=None):
        rows, cols = x.shape
        src, prefix = self.file(".f32"), self.file("")
        np.ascontiguousarray(x, dtype=F32).tofile(src)
        scale_arg = "auto" if scale2 is None else f"{int(np.array(scale2, dtype=F32).view(np.uint32)):08x}"
        self.must("quantize", src, rows, cols, scale_arg, prefix)
        return dict(packed=np.fromfile(prefix + ".packed", dtype=np.uint8),
                    scales=np.fromfile(prefix + ".scales", dtype=np.uint8),
                    scale2=np.fromfile(prefix + ".scale2", dtype=F32)[0],
                    deq=np.fromfile(prefix + ".deq", dtype=F32))

    def layout(self, command, data, rows, kblocks):
        src, dst = self.file(".u8"), self.file(".u8")
        np.asarray(data, dtype=np.uint8).tofile(src)
        self.must(command, src, rows, kblocks, dst)
        return np.fromfile(dst, dtype=np.uint8)


def bits32(values):
    return np.asarray(values, dtype=F32).view(np.uint32)


def from_bits(bits):
    return np.asarray(bits, dtype=np.uint32).view(F32)


def mismatch_report(x, got, want, limit=8):
    bad = np.nonzero(got != want)[0]
    lines = [f"    x={x[i]!r} (0x{int(bits32(x[i])):08x}) fp4moe=0x{int(got[i]):x} oracle=0x{int(want[i]):x}"
             for i in bad[:limit]]
    return f"{len(bad)} mismatches\n" + "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# 1-2. Element codes
# ---------------------------------------------------------------------------------------------

def representable(dtype):
    """All finite non-negative values of a small float dtype, sorted (from its bit patterns)."""
    codes = np.arange(256 if dtype is not E2M1 else 16, dtype=np.uint8)
    values = codes.view(dtype).astype(F32)
    values = values[np.isfinite(values) & (values >= 0) & ~np.signbit(values)]
    return np.unique(values)


def sweep_values(rng):
    parts = []
    # Every float32 whose low 8 mantissa bits are zero, for exponents 2^-24 .. 2^10: covers every
    # E2M1 / E4M3 midpoint exactly (they need at most 5 significant bits) and dense steps between.
    exponents = np.arange(127 - 24, 127 + 11, dtype=np.uint32)
    mantissas = np.arange(0, 1 << 23, 1 << 8, dtype=np.uint32)
    parts.append(from_bits((exponents[:, None] << 23 | mantissas[None, :]).ravel()))
    # Midpoints of both grids, and 1 and 2 ulps either side of every midpoint and every value.
    for dtype in (E2M1, E4M3):
        grid = representable(dtype)
        points = np.concatenate([grid, (grid[:-1] + grid[1:]) / F32(2)]).astype(F32)
        near = [points]
        for step in (1, 2):
            near.append(from_bits(bits32(points) + np.uint32(step)))
            near.append(from_bits(np.maximum(bits32(points), np.uint32(step)) - np.uint32(step)))
        parts.append(np.concatenate(near))
    # Named boundaries.
    specials = [0.0, 2.0 ** -10, 1.5 * 2.0 ** -10, 2.0 ** -9, 2.0 ** -6, 7.5 * 2.0 ** -9, 0.25, 5.0, 6.0, 7.0, 8.0,
                416.0, 432.0, 447.0, 448.0, 449.0, 464.0, 465.0, 479.0, 480.0, 481.0, 512.0, 1e6, 1e30,
                3.4028235e38, np.inf, 1e-45, 1e-40, 1.17549435e-38]
    parts.append(np.array(specials, dtype=F32))
    # Subnormal float32 inputs and random bit patterns over the whole range (NaNs removed below).
    parts.append(from_bits(rng.integers(1, 1 << 23, size=20000, dtype=np.uint32)))
    parts.append(from_bits(rng.integers(0, 1 << 31, size=400000, dtype=np.uint32)))
    positive = np.concatenate(parts).astype(F32)
    positive = positive[~np.isnan(positive)]
    return np.concatenate([positive, -positive])


def check_codes(probe, rng):
    # Decode tables: every code, compared by bit pattern (so -0.0 and NaN positions count).
    e2m1_table = np.arange(16, dtype=np.uint8).view(E2M1).astype(F32)
    check(np.array_equal(bits32(probe.decode("e2m1_decode")), bits32(e2m1_table)), "E2M1 decode: all 16 codes")
    e4m3_table = np.arange(256, dtype=np.uint8).view(E4M3).astype(F32)
    got = probe.decode("e4m3_decode")
    finite = ~np.isnan(e4m3_table)
    check(np.array_equal(bits32(got[finite]), bits32(e4m3_table[finite])) and
          np.array_equal(np.isnan(got), np.isnan(e4m3_table)) and int(np.isnan(got).sum()) == 2,
          "E4M3 decode: all 256 codes (NaN exactly at 0x7F and 0xFF)")

    x = sweep_values(rng)
    print(f"      sweep: {x.size} float32 values")

    # E2M1: ml_dtypes rounds RNE and saturates at 6 (its "infinity" is 6), like fp4moe.
    got = probe.encode("e2m1_encode", x, np.uint8)
    want = x.astype(E2M1).view(np.uint8) & np.uint8(0xF)
    ok = np.array_equal(got, want)
    check(ok, "E2M1 encode == ml_dtypes float4_e2m1fn on the sweep" + ("" if ok else ": " + mismatch_report(x, got, want)))

    # E4M3: ml_dtypes does not saturate; clamping to +-448 first models satfinite.
    got = probe.encode("e4m3_encode", x, np.uint8)
    want = np.clip(x, F32(-448), F32(448)).astype(E4M3).view(np.uint8)
    ok = np.array_equal(got, want)
    check(ok, "E4M3 satfinite encode == ml_dtypes float8_e4m3fn(clip(x, +-448)) on the sweep" +
          ("" if ok else ": " + mismatch_report(x, got, want)))
    # Without the clamp ml_dtypes gives NaN above 464: make sure the sweep actually crosses that.
    check(bool(np.isnan(x[np.abs(x) > 465].astype(E4M3).astype(F32)).all()) and (np.abs(x) > 465).any(),
          "sweep covers the non-saturating region where the clamp matters")

    # BF16: RNE; NaN compared as NaN with the same sign.
    got = probe.encode("bf16_encode", x, np.uint16)
    want = x.astype(BF16).view(np.uint16)
    ok = np.array_equal(got, want)
    check(ok, "BF16 encode == ml_dtypes bfloat16 on the sweep" + ("" if ok else ": " + mismatch_report(x, got, want)))

    # NaN inputs: the documented fp4moe choices, and the ml_dtypes behaviour they differ from.
    nans = from_bits(np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF812345], dtype=np.uint32))
    sign = np.signbit(nans)
    got = probe.encode("e2m1_encode", nans, np.uint8)
    check(np.array_equal(got, np.where(sign, 0xF, 0x7)), "NaN -> E2M1 gives +-6 by sign (fp4moe choice)")
    with np.errstate(invalid="ignore"):
        ml = nans.astype(E2M1).view(np.uint8) & np.uint8(0xF)
    print(f"      (ml_dtypes gives NaN -> E2M1 codes {[hex(int(c)) for c in ml]}; excluded from the comparison)")
    got = probe.encode("e4m3_encode", nans, np.uint8)
    check(np.array_equal(got, np.where(sign, 0xFF, 0x7F)), "NaN -> E4M3 gives 0x7F / 0xFF by sign")
    got = probe.encode("bf16_encode", nans, np.uint16)
    check(bool(np.isnan(got.view(BF16).astype(F32)).all()) and np.array_equal((got >> 15).astype(bool), sign),
          "NaN -> BF16 stays NaN with its sign")


# ---------------------------------------------------------------------------------------------
# 3. NVFP4, from the ModelOpt formulas (nvfp4-format.md 3.2), numpy float32 step by step
# ---------------------------------------------------------------------------------------------

E2M1_BOUNDS = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], dtype=F32)
E2M1_VALUES = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=F32)


def oracle_nvfp4(x, scale2=None):
    """ModelOpt NVFP4 quantize + dequantize of a float32 [rows, cols] matrix.

    fp4moe decisions (docs/format.md) where ModelOpt is undefined: an all-zero tensor has
    scale2 = 0 and 0/0 block scales become 1.0 like ModelOpt's zero rule; an all-zero block keeps
    codes 0. A given scale2 (static activation scale) is used as is.
    """
    x = np.ascontiguousarray(x, dtype=F32)
    rows, cols = x.shape
    blocks = x.reshape(rows, cols // 16, 16)
    if scale2 is None:
        amax = F32(np.max(np.abs(x))) if x.size else F32(0)
        scale2 = F32(amax / F32(6.0 * 448.0))                  # weight_scale_2 = amax / 2688
    scale2 = F32(scale2)
    block_amax = np.max(np.abs(blocks), axis=2)               # fp32
    t = F32(F32(6.0) * scale2)                                 # 6 * weight_scale_2, rounded to fp32
    with np.errstate(divide="ignore", invalid="ignore"):
        s = (block_amax / t).astype(F32)                       # s_b = amax_b / (6 * scale_2)
    s = np.where((s == 0) | (block_amax == 0), F32(1.0), s)   # zero scale -> 1.0 (and 0/0 -> 1.0)
    s = np.clip(s, F32(2.0 ** -9), F32(448.0))                 # clamp to [2^-9, 448]
    sf = s.astype(E4M3)                                        # RNE to E4M3 (in range: no overflow)
    d = (sf.astype(F32) * scale2).astype(F32)                  # fp32(scale) * scale_2
    with np.errstate(divide="ignore", invalid="ignore"):
        q = (blocks / d[..., None]).astype(F32)                # true division
    # E2M1 via ml_dtypes (RNE, saturating); ModelOpt's sign is (q < 0), so -0.0 gets code 0.
    codes = q.astype(E2M1).view(np.uint8) & np.uint8(0xF)
    codes = np.where(q == 0, np.uint8(0), codes)
    codes = np.where((block_amax == 0)[..., None], np.uint8(0), codes).astype(np.uint8)
    # Cross-check with ModelOpt's own e2m1 rule: searchsorted (lower bound) + 1 on [0.75, 1.75, 3.5].
    a = np.abs(q)
    ordinal = np.searchsorted(E2M1_BOUNDS, a, side="left") + np.isin(a, E2M1_BOUNDS[[1, 3, 5]])
    modelopt_codes = ((q < 0).astype(np.uint8) << 3) | ordinal.astype(np.uint8)
    nonzero_blocks = np.broadcast_to((block_amax != 0)[..., None], codes.shape)
    assert np.array_equal(codes[nonzero_blocks], modelopt_codes[nonzero_blocks]), "oracle: e2m1 rules disagree"
    codes = codes.reshape(rows, cols)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)   # even element in the low nibble
    deq = (E2M1_VALUES[codes].reshape(rows, cols // 16, 16) * d[..., None]).astype(F32)
    return dict(packed=packed.ravel(), scales=sf.view(np.uint8).ravel(), scale2=scale2, deq=deq.ravel())


def compare_nvfp4(probe, name, x, scale2=None):
    got = probe.quantize(x, scale2)
    want = oracle_nvfp4(x, scale2)
    problems = []
    for key in ("packed", "scales"):
        if not np.array_equal(got[key], want[key]):
            bad = np.nonzero(got[key] != want[key])[0]
            problems.append(f"{key}: {bad.size} differ, first at {bad[0]}: fp4moe 0x{int(got[key][bad[0]]):02x} "
                            f"oracle 0x{int(want[key][bad[0]]):02x}")
    if bits32(got["scale2"]) != bits32(want["scale2"]):
        problems.append(f"scale2: fp4moe {got['scale2']!r} oracle {want['scale2']!r}")
    if not np.array_equal(bits32(got["deq"]), bits32(want["deq"])):
        bad = np.nonzero(bits32(got["deq"]) != bits32(want["deq"]))[0]
        problems.append(f"dequantized: {bad.size} differ, first at {bad[0]}: {got['deq'][bad[0]]!r} vs "
                        f"{want['deq'][bad[0]]!r}")
    check(not problems, f"NVFP4 {name} {list(x.shape)}" + ("" if not problems else ": " + "; ".join(problems)))
    return want


def bf16_values(x):
    return np.asarray(x, dtype=F32).astype(BF16).astype(F32)


def check_nvfp4(probe, rng):
    normal = lambda r, c, s=1.0: (rng.standard_normal((r, c)) * s).astype(F32)

    compare_nvfp4(probe, "random normal", normal(64, 256))
    compare_nvfp4(probe, "random bf16 weights", bf16_values(normal(96, 512, 0.02)))
    # Log-normal block magnitudes, as trained weights have.
    factors = np.exp(rng.standard_normal((48, 16, 1)) * 1.5)
    compare_nvfp4(probe, "log-normal blocks", (normal(48, 256).reshape(48, 16, 16) * factors).reshape(48, 256).astype(F32))
    # Huge dynamic range: block magnitudes from 1e-30 to 1e30 (tiny blocks clamp to 2^-9, some underflow to s = 0).
    factors = (10.0 ** rng.uniform(-30, 30, size=(32, 8, 1)))
    compare_nvfp4(probe, "huge dynamic range", (normal(32, 128).reshape(32, 8, 16) * factors).reshape(32, 128).astype(F32))
    # Blocks far below the tensor amax: one big element, everything else tiny.
    x = normal(16, 64, 1e-6)
    x[3, 5] = 1000.0
    compare_nvfp4(probe, "blocks far below the tensor amax", x)
    # All-zero tensor, and all-zero blocks inside a non-zero tensor.
    compare_nvfp4(probe, "all-zero tensor", np.zeros((4, 64), dtype=F32))
    x = normal(8, 128)
    x.reshape(8, 8, 16)[rng.random((8, 8)) < 0.4] = 0.0
    compare_nvfp4(probe, "all-zero blocks", x)
    # -0.0 and tiny negatives (ModelOpt sign rule x < 0).
    x = normal(4, 64)
    x[rng.random(x.shape) < 0.3] = -0.0
    x[rng.random(x.shape) < 0.1] = F32(-1e-9)
    compare_nvfp4(probe, "negative zeros and tiny negatives", x)
    # Exact ties: scale_2 = 1 (one block holds 2688), a block of amax 6 gives s = 1, and every element
    # sits on an E2M1 midpoint or value. Plus block amaxes that put s exactly on E4M3 midpoints.
    grid = np.concatenate([E2M1_BOUNDS, E2M1_VALUES[:8]]).astype(F32)
    x = rng.choice(np.concatenate([grid, -grid]), size=(16, 64)).astype(F32)
    x[:, 0::16] = F32(6.0)
    x[0, 17] = F32(2688.0)
    compare_nvfp4(probe, "exact E2M1 ties", x)
    # Ties again with non-power-of-two block scales, so that x / d is exact but x * (1/d) is not:
    # scale_2 = 1/8, block scale sf in {1.125, 1.375, ...}, elements = (midpoint or value) * sf / 8.
    sf_values = np.array([1.125, 1.375, 1.625, 1.875, 3.5, 0.6875, 208.0], dtype=F32)
    x = np.zeros((sf_values.size, 64), dtype=F32)
    for row, sf in enumerate(sf_values):
        d = F32(sf * F32(0.125))
        x[row] = rng.choice(np.concatenate([grid, -grid]), size=64).astype(F32) * d
        x[row, 0::16] = F32(6.0) * d                            # block amax 6d: s = 6d / 0.75 = sf exactly
    compare_nvfp4(probe, "exact E2M1 ties, non-power-of-two scales", x, scale2=F32(0.125))
    e4m3_grid = representable(E4M3)
    mids = ((e4m3_grid[:-1] + e4m3_grid[1:]) / F32(2)).astype(F32)
    x = np.zeros((mids.size // 4 + 1, 64), dtype=F32)
    blocks = x.reshape(-1, 16)
    blocks[:mids.size, 0] = mids * F32(6.0)                     # s = 6 * mid / 6 = mid exactly (scale_2 = 1)
    blocks[-1, 0] = F32(2688.0)
    compare_nvfp4(probe, "exact E4M3 scale ties", x)
    # Operation order of the block scale: ModelOpt computes amax_b / fp32(6 * scale_2). With a
    # non-power-of-two scale_2, block amaxes placed on (and 1 ulp around) E4M3 midpoints of s make
    # amax_b / 6 / scale_2 round to a different code in many blocks; the oracle follows ModelOpt.
    differing, total = 0, 0
    for scale2 in rng.uniform(1e-4, 1e-1, size=12).astype(F32):
        t = F32(F32(6.0) * scale2)
        amaxes = (mids[mids > 2.0 ** -9] * t).astype(F32)
        amaxes = np.concatenate([amaxes, np.nextafter(amaxes, F32(np.inf)), np.nextafter(amaxes, F32(0))]).astype(F32)
        x = (rng.uniform(-1, 1, size=(amaxes.size, 16)) * amaxes[:, None]).astype(F32)
        x[:, 3] = amaxes
        other_order = np.clip((amaxes / F32(6.0) / scale2).astype(F32), F32(2.0 ** -9), F32(448)).astype(E4M3)
        modelopt_order = np.clip((amaxes / t).astype(F32), F32(2.0 ** -9), F32(448)).astype(E4M3)
        differing += int(np.sum(other_order.view(np.uint8) != modelopt_order.view(np.uint8)))
        total += amaxes.size
        compare_nvfp4(probe, f"E4M3 scale ties under ModelOpt's operation order, scale_2={scale2}", x, scale2=scale2)
    check(differing > 20, f"the order-sensitive cases are real: {differing} of {total} blocks differ between orders")
    # Extreme magnitudes: amax near float max, and a tensor whose d = fp32(scale) * scale_2 is subnormal.
    compare_nvfp4(probe, "near float max", (normal(4, 32) * F32(1e37)).astype(F32))
    compare_nvfp4(probe, "tiny tensor (subnormal d)", (normal(4, 32) * F32(1e-34)).astype(F32))
    # Activations with a static input scale: values above the calibrated amax saturate (example E).
    for calib in (F32(10.0), F32(0.37)):
        input_scale = F32(calib / F32(2688.0))
        compare_nvfp4(probe, f"activations, input_scale={calib}/2688", bf16_values(normal(32, 128, float(calib) * 0.6)),
                      scale2=input_scale)

    # NaN / Inf input: a clear error naming the element.
    x = normal(2, 32)
    x[1, 7] = np.nan
    src, prefix = probe.file(".f32"), probe.file("")
    x.tofile(src)
    result = probe.run("quantize", src, 2, 32, "auto", prefix)
    check(result.returncode == 2 and "[1, 7]" in result.stderr, f"NaN input refused, naming [1, 7]: {result.stderr.strip()!r}")


# ---------------------------------------------------------------------------------------------
# 4. 128x4 scale swizzle vs the reshape/permute form
# ---------------------------------------------------------------------------------------------

def swizzle_reference(linear, rows, kblocks):
    padded_rows, padded_kblocks = -(-rows // 128) * 128, -(-kblocks // 4) * 4
    padded = np.zeros((padded_rows, padded_kblocks), dtype=np.uint8)
    padded[:rows, :kblocks] = linear.reshape(rows, kblocks)
    # [Rp, Kbp] -> (Rp/128, 4, 32, Kbp/4, 4) -> permute to (Rp/128, Kbp/4, 32, 4, 4)
    tiles = padded.reshape(padded_rows // 128, 4, 32, padded_kblocks // 4, 4)
    return np.ascontiguousarray(tiles.transpose(0, 3, 2, 1, 4)).ravel()


def check_layout(probe, rng):
    for rows, kblocks in [(200, 6), (1, 1), (128, 4), (129, 5), (300, 17), (256, 8), (77, 2)]:
        linear = rng.integers(1, 256, size=rows * kblocks, dtype=np.uint8)
        want = swizzle_reference(linear, rows, kblocks)
        got = probe.layout("swizzle", linear, rows, kblocks)
        back = probe.layout("unswizzle", got, rows, kblocks)
        check(np.array_equal(got, want) and np.array_equal(back, linear),
              f"128x4 swizzle [{rows}, {kblocks}] == reshape/permute form, and unswizzle restores it")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--probe", required=True, help="path to the format_probe executable")
    parser.add_argument("--seed", type=int, default=20251130)
    args = parser.parse_args()
    print(f"numpy {np.__version__}, ml_dtypes {ml_dtypes.__version__}")
    rng = np.random.default_rng(args.seed)
    with tempfile.TemporaryDirectory(prefix="fp4moe_format_") as workdir:
        probe = Probe(os.path.abspath(args.probe), workdir)
        check_codes(probe, rng)
        check_nvfp4(probe, rng)
        check_layout(probe, rng)
    if failures:
        print(f"\n{len(failures)} check(s) FAILED", file=sys.stderr)
        return 1
    print("\nall format oracle checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
