"""fp4moe: NVFP4 Mixture-of-Experts kernels that qualify themselves on your GPU (docs/python.md).

- NVFP4 format functions, bit-identical to the C++ library: quantize_nvfp4, dequantize_nvfp4,
  e2m1_encode / e2m1_decode, e4m3_encode / e4m3_decode, swizzle_scales_128x4 / unswizzle_scales_128x4.
- MoeLayer: the routed experts of one NVFP4 MoE layer, from ModelOpt per-expert or stacked tensors,
  run with forward(hidden, router_logits) on CUDA tensors (caller's stream) or on the CPU oracle.
- qualify(): the backend qualification verdict as a dict.

Arrays cross into C++ through DLPack (nanobind), so numpy, torch and other DLPack arrays work and
torch is optional.
"""

from . import _ext
from ._ext import Error
from .format import (dequantize_nvfp4, e2m1_decode, e2m1_encode, e4m3_decode, e4m3_encode, quantize_nvfp4,
                     swizzle_scales_128x4, unswizzle_scales_128x4)
from .moe import MoeLayer
from .qualify import QualificationUnavailable, executable, qualify

__version__ = _ext.build_info()["version"]

HOST_BACKEND = "cpu.reference.v1"


def build_info() -> dict:
    """version, git_commit, build_type, cuda_archs, compiler, build_id, cuda (bool)."""
    return dict(_ext.build_info())


def devices() -> list:
    """The CUDA devices this process sees (dicts: ordinal, name, sm, memory_bytes, ...)."""
    return list(_ext.devices())


def why_no_device() -> str:
    """Why devices() is empty ('' when it is not)."""
    return _ext.why_no_device()


def backend_ids() -> list:
    """The CUDA MoE backends of this build, most preferred first (the host oracle is HOST_BACKEND)."""
    return list(_ext.backend_ids())


__all__ = [
    "Error", "MoeLayer", "QualificationUnavailable", "HOST_BACKEND", "backend_ids", "build_info",
    "dequantize_nvfp4", "devices", "e2m1_decode", "e2m1_encode", "e4m3_decode", "e4m3_encode", "executable",
    "qualify", "quantize_nvfp4", "swizzle_scales_128x4", "unswizzle_scales_128x4", "why_no_device",
]
