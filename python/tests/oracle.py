"""Independent numpy oracles for the fp4moe Python tests (they do not call fp4moe).

NVFP4: the ModelOpt formulas (nvfp4-format.md section 3.2), written step by step in numpy float32:
E4M3 values from the bit fields and round-to-nearest-even by search over the value grid (ties to
the even code), E2M1 by ModelOpt's own rule (searchsorted lower bound, plus one on the odd bounds
0.75 / 1.75 / 3.5). Where ml_dtypes (PyPI; CI installs it) is present, both roundings are
cross-checked against its float8_e4m3fn / float4_e2m1fn casts. MoE: softmax / top-k / renormalize
routing, SwiGLU with gate rows first, fp64 sums over the dequantized weights.
"""

import numpy as np

try:
    import ml_dtypes
except ImportError:  # the GPU machine may lack it; test_format.py needs it and skips without
    ml_dtypes = None

F32 = np.float32
E2M1 = ml_dtypes.float4_e2m1fn if ml_dtypes else None
E4M3 = ml_dtypes.float8_e4m3fn if ml_dtypes else None
BF16 = ml_dtypes.bfloat16 if ml_dtypes else None


def _e4m3_table():
    """float32 value of every E4M3fn code: S.EEEE.MMM, bias 7, subnormals at E=0, NaN at 0x7F/0xFF."""
    c = np.arange(256)
    sign = np.where(c >> 7, -1.0, 1.0)
    e, m = (c >> 3) & 0xF, c & 7
    value = np.where(e == 0, m * 2.0 ** -9, (1 + m / 8.0) * 2.0 ** (e - 7.0)) * sign
    value[[0x7F, 0xFF]] = np.nan
    return value.astype(F32)


E4M3_VALUES = _e4m3_table()


def e4m3_decode(codes):
    return E4M3_VALUES[np.asarray(codes, dtype=np.uint8)]


def e4m3_encode_positive(s):
    """RNE E4M3 codes of float32 s in [0, 448] (no NaN): nearest grid value, ties to the even code."""
    grid = E4M3_VALUES[:0x7F]  # codes 0x00..0x7E, increasing
    s = np.asarray(s, dtype=F32)
    hi = np.clip(np.searchsorted(grid, s, side="left"), 1, 0x7E)
    lo = hi - 1
    d_lo, d_hi = s.astype(np.float64) - grid[lo], grid[hi].astype(np.float64) - s
    codes = np.where(d_lo < d_hi, lo, np.where(d_hi < d_lo, hi, np.where(lo % 2 == 0, lo, hi)))
    codes = np.where(s >= grid[-1], 0x7E, codes).astype(np.uint8)
    if E4M3 is not None:
        assert np.array_equal(codes, s.astype(E4M3).view(np.uint8)), "oracle: E4M3 rounding disagrees with ml_dtypes"
    return codes
E2M1_BOUNDS = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], dtype=F32)
E2M1_VALUES = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=F32)


def e2m1_codes_modelopt(q):
    """ModelOpt's E2M1 rounding of float32 q (RNE, saturating); sign bit is (q < 0)."""
    a = np.abs(q)
    ordinal = np.searchsorted(E2M1_BOUNDS, a, side="left") + np.isin(a, E2M1_BOUNDS[[1, 3, 5]])
    return (((q < 0).astype(np.uint8) << 3) | np.minimum(ordinal, 7).astype(np.uint8)).astype(np.uint8)


def nvfp4_quantize(x, scale2=None):
    """(packed [R, C/2], scales [R, C/16] E4M3 codes, scale2 float32, dequantized float32 [R, C])."""
    x = np.ascontiguousarray(x, dtype=F32)
    rows, cols = x.shape
    blocks = x.reshape(rows, cols // 16, 16)
    if scale2 is None:
        amax = F32(np.max(np.abs(x))) if x.size else F32(0)
        scale2 = F32(amax / F32(6.0 * 448.0))
    scale2 = F32(scale2)
    block_amax = np.max(np.abs(blocks), axis=2)
    with np.errstate(divide="ignore", invalid="ignore"):
        s = (block_amax / F32(F32(6.0) * scale2)).astype(F32)
    s = np.where((s == 0) | (block_amax == 0), F32(1.0), s)
    s = np.clip(s, F32(2.0 ** -9), F32(448.0))
    sf = e4m3_encode_positive(s)
    d = (e4m3_decode(sf) * scale2).astype(F32)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = (blocks / d[..., None]).astype(F32)
    q = np.where((block_amax == 0)[..., None], F32(0), q)
    codes = e2m1_codes_modelopt(q)
    if E2M1 is not None:  # the same rounding by ml_dtypes (RNE + saturation), where the signs agree
        ml = q.astype(E2M1).view(np.uint8) & np.uint8(0xF)
        same = q != 0
        assert np.array_equal(codes[same], ml[same]), "oracle: ModelOpt and ml_dtypes E2M1 rounding disagree"
    codes = codes.reshape(rows, cols)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    deq = (E2M1_VALUES[codes].reshape(rows, cols // 16, 16) * d[..., None]).astype(F32).reshape(rows, cols)
    return packed, sf, scale2, deq


def nvfp4_dequantize(packed, scales, scale2):
    rows = packed.shape[0]
    codes = np.empty((rows, packed.shape[1] * 2), dtype=np.uint8)
    codes[:, 0::2] = packed & 0xF
    codes[:, 1::2] = packed >> 4
    d = (e4m3_decode(scales) * F32(scale2)).astype(F32)
    return (E2M1_VALUES[codes].reshape(rows, -1, 16) * d[..., None]).astype(F32).reshape(rows, -1)


def bf16_round(x):
    """Round float32 (finite) to BF16, nearest even: add 0x7FFF plus the lowest kept bit, truncate."""
    bits = np.ascontiguousarray(x, dtype=F32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return rounded.astype(np.uint32).view(F32)


def route(logits, top_k, method):
    """(ids [T, K], weights [T, K]) — ties to the lower expert index (stable sort)."""
    logits = np.asarray(logits, dtype=np.float64)
    order = np.argsort(-logits, axis=1, kind="stable")[:, :top_k]
    if method == "topk_softmax":
        sel = np.take_along_axis(logits, order, axis=1)
        w = np.exp(sel - sel.max(axis=1, keepdims=True))
        return order, w / w.sum(axis=1, keepdims=True)
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    w = np.take_along_axis(p, order, axis=1)
    if method == "softmax_topk_renorm":
        w = w / w.sum(axis=1, keepdims=True)
    elif method != "softmax_topk":
        raise ValueError(method)
    return order, w


def moe(hidden, logits, experts, top_k, method="softmax_topk_renorm", activation="W4A16"):
    """The routed-experts MoE in float64 over dequantized weights.

    experts: list of dicts with float32 'gate' [I, H], 'up' [I, H], 'down' [H, I] (dequantized) and,
    for W4A4, 'w13_input_scale' / 'w2_input_scale'. W4A16 rounds the SwiGLU output to BF16 (the one
    intermediate rounding of the contract); W4A4 quantize-dequantizes the expert input and the SwiGLU
    output with the static input scales (ModelOpt formulas).
    """
    ids, weights = route(logits, top_k, method)
    x_all = np.asarray(hidden, dtype=F32)
    out = np.zeros(x_all.shape, dtype=np.float64)
    for t in range(x_all.shape[0]):
        for k in range(top_k):
            e = experts[ids[t, k]]
            x = x_all[t:t + 1]
            if activation == "W4A4":
                x = nvfp4_quantize(x, e["w13_input_scale"])[3]
            x = x.astype(np.float64)
            g = x @ e["gate"].astype(np.float64).T
            u = x @ e["up"].astype(np.float64).T
            h = (g / (1.0 + np.exp(-g))) * u
            if activation == "W4A4":
                h = nvfp4_quantize(h.astype(F32), e["w2_input_scale"])[3]
            else:
                h = bf16_round(h)
            out[t] += weights[t, k] * (h.astype(np.float64) @ e["down"].astype(np.float64).T)[0]
    return out


def normalized_error(got, want):
    """rms(got - want) / rms(want)."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    return float(np.sqrt(np.mean((got - want) ** 2)) / max(np.sqrt(np.mean(want ** 2)), 1e-30))
