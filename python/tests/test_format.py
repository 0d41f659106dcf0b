"""fp4moe's NVFP4 format functions (the C++ library through the binding) against independent
numpy + ml_dtypes oracles (oracle.py): bit for bit, including ties, saturation, subnormal scales,
all-zero blocks and the packing order."""

import numpy as np
import pytest

ml_dtypes = pytest.importorskip("ml_dtypes", reason="the format oracle needs ml_dtypes (pip install ml_dtypes)")

import fp4moe
import oracle
from conftest import cuda_torch_or_skip, torch_or_skip

F32 = np.float32


def sweep(rng):
    """Every E2M1 / E4M3 value and midpoint, +-1 ulp around them, specials, random magnitudes."""
    grids = [np.unique(np.arange(16, dtype=np.uint8).view(oracle.E2M1).astype(F32)),
             np.unique(np.arange(256, dtype=np.uint8).view(oracle.E4M3).astype(F32))]
    parts = []
    for grid in grids:
        grid = grid[np.isfinite(grid) & (grid >= 0)]
        points = np.concatenate([grid, (grid[:-1] + grid[1:]) / F32(2)]).astype(F32)
        bits = points.view(np.uint32)
        parts += [points, (bits + np.uint32(1)).view(F32), (np.maximum(bits, np.uint32(1)) - np.uint32(1)).view(F32)]
    parts.append(np.array([0.0, 2.0 ** -10, 1.5 * 2.0 ** -10, 447.0, 448.0, 464.0, 465.0, 480.0, 1e6, 3e38, np.inf],
                          dtype=F32))
    parts.append((rng.standard_normal(20000) * np.exp(rng.uniform(-12, 8, 20000))).astype(F32))
    x = np.concatenate(parts).astype(F32)
    return np.concatenate([x, -x])


def test_element_decode_tables_match_ml_dtypes():
    codes = np.arange(16, dtype=np.uint8)
    assert np.array_equal(fp4moe.e2m1_decode(codes).view(np.uint32), codes.view(oracle.E2M1).astype(F32).view(np.uint32))
    codes = np.arange(256, dtype=np.uint8)
    got, want = fp4moe.e4m3_decode(codes), codes.view(oracle.E4M3).astype(F32)
    finite = ~np.isnan(want)
    assert np.array_equal(got[finite].view(np.uint32), want[finite].view(np.uint32))
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.isnan(got).sum() == 2


def test_element_encoders_match_ml_dtypes():
    x = sweep(np.random.default_rng(1))
    assert np.array_equal(fp4moe.e2m1_encode(x), x.astype(oracle.E2M1).view(np.uint8) & 0xF)
    # ml_dtypes' E4M3 cast does not saturate; fp4moe's is satfinite (like __nv_fp8_e4m3): clip first.
    assert np.array_equal(fp4moe.e4m3_encode(x), np.clip(x, -448, 448).astype(oracle.E4M3).view(np.uint8))
    assert np.array_equal(fp4moe._ext.bf16_encode(x[np.isfinite(x)]), x[np.isfinite(x)].astype(oracle.BF16).view(np.uint16))
    # Shapes are kept.
    assert fp4moe.e2m1_encode(x[:24].reshape(2, 3, 4)).shape == (2, 3, 4)


def test_e2m1_decode_refuses_codes_above_15():
    with pytest.raises(fp4moe.Error, match="element 1 is 0x10"):
        fp4moe.e2m1_decode(np.array([3, 16], dtype=np.uint8))


def matrices(rng):
    normal = lambda r, c, s=1.0: (rng.standard_normal((r, c)) * s).astype(F32)
    yield "random normal", normal(64, 256), None
    yield "bf16 weights", oracle.bf16_round(normal(96, 512, 0.02)), None
    yield "log-normal blocks", (normal(48, 256).reshape(48, 16, 16) *
                                np.exp(rng.standard_normal((48, 16, 1)) * 1.5)).reshape(48, 256).astype(F32), None
    yield "huge dynamic range", (normal(32, 128).reshape(32, 8, 16) *
                                 10.0 ** rng.uniform(-30, 30, (32, 8, 1))).reshape(32, 128).astype(F32), None
    x = normal(8, 128)
    x.reshape(8, 8, 16)[rng.random((8, 8)) < 0.4] = 0.0
    yield "all-zero blocks", x, None
    yield "all-zero tensor", np.zeros((4, 64), dtype=F32), None
    grid = np.concatenate([oracle.E2M1_BOUNDS, oracle.E2M1_VALUES[:8]]).astype(F32)
    x = rng.choice(np.concatenate([grid, -grid]), size=(16, 64)).astype(F32)
    x[:, 0::16] = 6.0
    x[0, 17] = 2688.0  # scale2 = 1: every element sits exactly on an E2M1 value or midpoint
    yield "exact E2M1 ties", x, None
    yield "tiny tensor (subnormal block scales)", normal(4, 32, 1e-34), None
    for calib in (10.0, 0.37):  # static activation scales: values beyond the calibrated amax saturate
        yield f"given input_scale={calib}/2688", oracle.bf16_round(normal(32, 128, calib * 0.6)), F32(calib / 2688.0)


@pytest.mark.parametrize("case", list(range(10)))
def test_quantize_dequantize_match_modelopt_formulas(case):
    name, x, scale2 = list(matrices(np.random.default_rng(7)))[case]
    packed, scales, tensor_scale = fp4moe.quantize_nvfp4(x, scale2)
    want_packed, want_scales, want_scale2, want_deq = oracle.nvfp4_quantize(x, scale2)
    assert packed.dtype == np.uint8 and packed.shape == (x.shape[0], x.shape[1] // 2), name
    assert scales.dtype == np.uint8 and scales.shape == (x.shape[0], x.shape[1] // 16), name
    assert np.array_equal(packed, want_packed), name
    assert np.array_equal(scales, want_scales), name
    assert np.float32(tensor_scale).view(np.uint32) == want_scale2.view(np.uint32), name
    deq = fp4moe.dequantize_nvfp4(packed, scales, tensor_scale)
    assert np.array_equal(deq.view(np.uint32), want_deq.view(np.uint32)), name
    # Dequantization from independent bytes (the oracle's) agrees too.
    assert np.array_equal(deq, oracle.nvfp4_dequantize(want_packed, want_scales, want_scale2)), name


def test_packing_puts_the_even_element_in_the_low_nibble():
    x = np.zeros((1, 16), dtype=F32)
    x[0, :4] = [0.5, 6.0, -1.0, 2.0]  # amax 6: scale2 = 6/2688, block scale 448 (0x7E), so d = 1
    packed, scales, scale2 = fp4moe.quantize_nvfp4(x)
    assert packed[0, 0] == (0x7 << 4) | 0x1 and packed[0, 1] == (0x4 << 4) | 0xA
    assert scales[0, 0] == 0x7E and scale2 == np.float32(6.0) / np.float32(2688.0)


def test_dtypes_and_layouts_accepted():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((8, 64)).astype(F32)
    packed, scales, scale2 = fp4moe.quantize_nvfp4(x)
    # bfloat16 / float16 widen exactly: same result as the float32 of the same values.
    xb = x.astype(ml_dtypes.bfloat16)
    assert np.array_equal(fp4moe.quantize_nvfp4(xb)[0], fp4moe.quantize_nvfp4(xb.astype(F32))[0])
    # ml_dtypes float8_e4m3fn scales are read as codes.
    assert np.array_equal(fp4moe.dequantize_nvfp4(packed, scales.view(ml_dtypes.float8_e4m3fn), scale2),
                          fp4moe.dequantize_nvfp4(packed, scales, scale2))
    # Non-contiguous input is copied, not misread.
    wide = rng.standard_normal((8, 128)).astype(F32)
    assert np.array_equal(fp4moe.quantize_nvfp4(wide[:, ::2])[0], fp4moe.quantize_nvfp4(wide[:, ::2].copy())[0])


def test_bad_input_raises_clear_errors():
    x = np.ones((2, 32), dtype=F32)
    with pytest.raises(TypeError, match="float64"):
        fp4moe.quantize_nvfp4(x.astype(np.float64))
    with pytest.raises(fp4moe.Error, match="multiple of 16"):
        fp4moe.quantize_nvfp4(np.ones((2, 24), dtype=F32))
    with pytest.raises(fp4moe.Error, match="2-D"):
        fp4moe.quantize_nvfp4(np.ones(32, dtype=F32))
    bad = x.copy()
    bad[1, 7] = np.nan
    with pytest.raises(fp4moe.Error, match=r"\[1, 7\]"):
        fp4moe.quantize_nvfp4(bad)
    with pytest.raises(fp4moe.Error, match="tensor_scale"):
        fp4moe.quantize_nvfp4(x, -1.0)
    packed, scales, s = fp4moe.quantize_nvfp4(x)
    with pytest.raises(fp4moe.Error, match="scales"):
        fp4moe.dequantize_nvfp4(packed, scales[:, :1], s)
    assert issubclass(fp4moe.Error, ValueError)


def swizzle_reference(linear, rows, kblocks):
    """nvfp4-format.md 6.1 as a reshape/permute: [Rp, Kbp] -> (Rp/128, 4, 32, Kbp/4, 4) -> (0, 3, 2, 1, 4)."""
    rp, kp = -(-rows // 128) * 128, -(-kblocks // 4) * 4
    padded = np.zeros((rp, kp), dtype=np.uint8)
    padded[:rows, :kblocks] = linear
    return np.ascontiguousarray(padded.reshape(rp // 128, 4, 32, kp // 4, 4).transpose(0, 3, 2, 1, 4)).reshape(rp, kp)


@pytest.mark.parametrize("rows,kblocks", [(200, 6), (1, 1), (128, 4), (129, 5), (300, 17)])
def test_swizzle_128x4_matches_reshape_permute_form(rows, kblocks):
    linear = np.random.default_rng(rows).integers(1, 256, size=(rows, kblocks), dtype=np.uint8)
    swizzled = fp4moe.swizzle_scales_128x4(linear)
    assert np.array_equal(swizzled, swizzle_reference(linear, rows, kblocks))
    assert np.array_equal(fp4moe.unswizzle_scales_128x4(swizzled, rows, kblocks), linear)


def test_torch_cpu_tensors_round_trip_in_torch():
    torch = torch_or_skip()
    x = torch.randn(16, 64, dtype=torch.bfloat16)
    packed, scales, scale2 = fp4moe.quantize_nvfp4(x)
    assert isinstance(packed, torch.Tensor) and packed.dtype == torch.uint8 and packed.shape == (16, 32)
    want = oracle.nvfp4_quantize(x.float().numpy())
    assert np.array_equal(packed.numpy(), want[0]) and np.array_equal(scales.numpy(), want[1])
    deq = fp4moe.dequantize_nvfp4(packed, scales.view(torch.float8_e4m3fn), scale2)
    assert isinstance(deq, torch.Tensor) and np.array_equal(deq.numpy(), want[3])


def test_torch_cuda_tensors_come_back_on_their_device():
    torch = cuda_torch_or_skip()
    x = torch.randn(16, 64, device="cuda", dtype=torch.bfloat16)
    packed, scales, scale2 = fp4moe.quantize_nvfp4(x)
    assert packed.device == x.device and scales.device == x.device
    want = oracle.nvfp4_quantize(x.float().cpu().numpy())
    assert np.array_equal(packed.cpu().numpy(), want[0]) and np.array_equal(scales.cpu().numpy(), want[1])
    deq = fp4moe.dequantize_nvfp4(packed, scales, scale2)
    assert deq.device == x.device and np.array_equal(deq.cpu().numpy(), want[3])
