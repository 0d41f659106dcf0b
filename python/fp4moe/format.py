"""NVFP4 format functions: bit-identical to the C++ library (src/format), which they call.

NVFP4 = E2M1 values, one E4M3 block scale per 16 consecutive values along the last dimension, one
fp32 tensor scale (weight_scale_2 / input_scale, the decode direction: amax / (6 * 448)); the
formulas are ModelOpt's (docs: nvfp4-format.md section 3.2, docs/format.md).

Inputs: numpy arrays, torch tensors (CPU or CUDA) or other host DLPack arrays. Results come back
in the input's framework: numpy arrays for numpy (and other host) inputs, torch tensors on the
input's device for torch inputs. CUDA tensors are copied to the host, processed by the C++ library
there and the results copied back to the tensor's device: the GPU is not used for these functions,
and the copies synchronize with the current stream.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import numpy as np

from . import _ext
from ._arrays import host_bytes, host_float32, is_torch, like_input

__all__ = [
    "quantize_nvfp4", "dequantize_nvfp4", "e2m1_encode", "e2m1_decode", "e4m3_encode", "e4m3_decode",
    "swizzle_scales_128x4", "unswizzle_scales_128x4",
]


def quantize_nvfp4(x: Any, tensor_scale: Optional[float] = None) -> Tuple[Any, Any, float]:
    """NVFP4-quantize a 2-D [N, K] array (K a multiple of 16), ModelOpt-exact.

    x: float32, float16 or bfloat16 values (float16 / bfloat16 widen exactly; float64 is refused).
    tensor_scale: None derives weight_scale_2 = amax(x) / 2688; a float (finite, > 0) is used as is
    (a static activation input_scale, or a weight_scale_2 to reuse); blocks beyond 6 * 448 *
    tensor_scale saturate. NaN / Inf in x raise fp4moe.Error naming the element.

    Returns (packed uint8 [N, K/2] with element 2j in the low nibble, scales uint8 [N, K/16] E4M3
    codes in the linear layout, tensor_scale float). For a CUDA tensor x: computed on the host,
    packed and scales returned on x's device.
    """
    packed, scales, scale = _ext.quantize_nvfp4(host_float32(x, "quantize_nvfp4: x"),
                                                None if tensor_scale is None else float(tensor_scale))
    return like_input(packed, x), like_input(scales, x), float(scale)


def dequantize_nvfp4(packed: Any, scales: Any, tensor_scale: float) -> Any:
    """ModelOpt dequantization: e2m1(q) * fp32(fp32(scale) * tensor_scale), float32 [N, K].

    packed: uint8 [N, K/2] (torch float4_e2m1fn_x2 accepted); scales: uint8 [N, K/16] E4M3 codes
    (torch / ml_dtypes float8_e4m3fn accepted), linear layout. A torch `packed` gives a float32
    tensor on its device (CUDA: computed on the host, copied back)."""
    if is_torch(tensor_scale):
        tensor_scale = float(tensor_scale.detach().float().cpu().reshape(-1)[0])
    out = _ext.dequantize_nvfp4(host_bytes(packed, "dequantize_nvfp4: packed"),
                                host_bytes(scales, "dequantize_nvfp4: scales"), float(tensor_scale))
    return like_input(out, packed)


def e2m1_encode(x: Any) -> Any:
    """E2M1 codes (uint8, 0..15) of any-shape values: round to nearest even, saturating at +-6."""
    return like_input(_ext.e2m1_encode(host_float32(x, "e2m1_encode: x")), x)


def e2m1_decode(codes: Any) -> Any:
    """float32 values of E2M1 codes (uint8, each 0..15)."""
    return like_input(_ext.e2m1_decode(host_bytes(codes, "e2m1_decode: codes")), codes)


def e4m3_encode(x: Any) -> Any:
    """E4M3fn codes (uint8) of any-shape values: RNE, saturating at +-448 like __nv_fp8_e4m3."""
    return like_input(_ext.e4m3_encode(host_float32(x, "e4m3_encode: x")), x)


def e4m3_decode(codes: Any) -> Any:
    """float32 values of E4M3fn codes (0x7F / 0xFF are NaN)."""
    return like_input(_ext.e4m3_decode(host_bytes(codes, "e4m3_decode: codes")), codes)


def swizzle_scales_128x4(scales: Any) -> Any:
    """Linear [rows, K/16] E4M3 scales -> the 128x4 swizzled layout that Blackwell block-scaled MMA
    reads (CUTLASS / TRT-LLM), uint8 [roundup(rows, 128), roundup(K/16, 4)], zero padding."""
    return like_input(_ext.swizzle_scales_128x4(host_bytes(scales, "swizzle_scales_128x4: scales")), scales)


def unswizzle_scales_128x4(swizzled: Any, rows: int, kblocks: int) -> Any:
    """The 128x4 swizzled scales (any shape, roundup(rows,128) * roundup(kblocks,4) bytes) back to
    linear uint8 [rows, kblocks]."""
    flat = np.ascontiguousarray(host_bytes(swizzled, "unswizzle_scales_128x4: swizzled")).reshape(-1)
    return like_input(_ext.unswizzle_scales_128x4(flat, int(rows), int(kblocks)), swizzled)
