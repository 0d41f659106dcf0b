"""Framework plumbing: turn numpy / torch / other DLPack arrays into the host arrays the extension
takes, and results back into the caller's framework. torch is never imported here: a torch tensor
can only exist when the caller has imported torch already, so sys.modules tells."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np


def torch_module():
    """The torch module if the caller imported it, else None (never imports torch itself)."""
    return sys.modules.get("torch")


def is_torch(x: Any) -> bool:
    torch = torch_module()
    return torch is not None and isinstance(x, torch.Tensor)


def is_cuda_torch(x: Any) -> bool:
    return is_torch(x) and x.device.type == "cuda"


def _numpy_from(x: Any, what: str) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "__dlpack__"):
        device = x.__dlpack_device__()[0] if hasattr(x, "__dlpack_device__") else 1
        if device != 1:  # kDLCPU
            raise TypeError(f"{what}: a non-torch array on a device (DLPack device type {device}) is not supported "
                            "here; copy it to the host, or pass a torch tensor")
        return np.from_dlpack(x)
    if isinstance(x, (list, tuple)) or np.isscalar(x):
        return np.asarray(x)
    raise TypeError(f"{what}: expected a numpy array, a torch tensor or a DLPack array, got {type(x).__name__}")


def host_float32(x: Any, what: str) -> np.ndarray:
    """x as a C-contiguous float32 numpy array. float32, float16 and bfloat16 (torch or ml_dtypes)
    widen exactly; float64 is refused, since rounding it would make results depend on a conversion
    the caller did not ask for."""
    if is_torch(x):
        torch = torch_module()
        if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise TypeError(f"{what}: expected a float32, float16 or bfloat16 tensor, got {x.dtype}"
                            + (" (cast it to float32 first)" if x.dtype == torch.float64 else ""))
        return x.detach().to(device="cpu", dtype=torch.float32).contiguous().numpy()
    a = _numpy_from(x, what)
    if a.dtype == np.float32:
        return np.ascontiguousarray(a)
    if a.dtype == np.float16 or a.dtype.name == "bfloat16":
        return np.ascontiguousarray(a.astype(np.float32))
    raise TypeError(f"{what}: expected float32, float16 or bfloat16 values, got {a.dtype}"
                    + (" (cast it to float32 first: x.astype(numpy.float32))" if a.dtype == np.float64 else ""))


_BYTE_DTYPE_NAMES = ("uint8", "float8_e4m3fn", "float4_e2m1fn_x2")


def host_bytes(x: Any, what: str) -> np.ndarray:
    """x as a C-contiguous uint8 numpy array: uint8, or a one-byte float type holding codes
    (torch float8_e4m3fn / float4_e2m1fn_x2, ml_dtypes float8_e4m3fn), reinterpreted bit for bit."""
    if is_torch(x):
        torch = torch_module()
        name = str(x.dtype).replace("torch.", "")
        if name not in _BYTE_DTYPE_NAMES:
            raise TypeError(f"{what}: expected a uint8 (or float8_e4m3fn / float4_e2m1fn_x2) tensor, got {x.dtype}")
        t = x.detach().to("cpu").contiguous()
        if t.dtype != torch.uint8:
            t = t.view(torch.uint8)
        return t.numpy()
    a = _numpy_from(x, what)
    if a.dtype.name not in _BYTE_DTYPE_NAMES:
        raise TypeError(f"{what}: expected uint8 (or ml_dtypes float8_e4m3fn) codes, got {a.dtype}")
    return np.ascontiguousarray(a).view(np.uint8)


def host_scalars(x: Any, what: str, count: int) -> np.ndarray:
    """fp32 scalars (weight_scale_2, input_scale): a float, a 0-d / [1] / [count] array or tensor ->
    float32 [count] (a single value is used for every entry)."""
    if is_torch(x):
        x = x.detach().to(device="cpu", dtype=torch_module().float32).numpy()
    a = np.asarray(x)
    if a.dtype == np.float64 and a.size:
        as32 = a.astype(np.float32)
        if not np.array_equal(as32.astype(np.float64), a):
            raise TypeError(f"{what}: float64 scale values that are not float32 values: {a.ravel()[:4]}")
        a = as32
    if a.dtype != np.float32:
        raise TypeError(f"{what}: expected float32 scale(s), got {a.dtype}")
    a = a.reshape(-1)
    if a.size == 1 and count != 1:
        a = np.full(count, a[0], dtype=np.float32)
    if a.size != count:
        raise ValueError(f"{what}: expected {count} value(s), got {a.size}")
    return np.ascontiguousarray(a)


def like_input(result: np.ndarray, reference: Any, dtype=None):
    """A numpy result returned in the framework and on the device of `reference`."""
    if is_torch(reference):
        torch = torch_module()
        t = torch.from_numpy(np.ascontiguousarray(result))
        if dtype is not None:
            t = t.view(dtype)
        return t.to(reference.device) if reference.device.type != "cpu" else t
    return result
