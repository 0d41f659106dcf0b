"""MoeLayer: the routed experts of one NVFP4 MoE layer, prepared once for a backend and run as
`forward(hidden, router_logits)`.

Numerics (architecture.md, "Numerics contract"): hidden [T, H] BF16, router logits [T, E] fp32,
output [T, H] BF16; routing on the logits (softmax_topk_renorm for Qwen3 / Qwen3.5), SwiGLU with
w13 = [gate; up] (gate rows first), NVFP4 weights dequantized exactly, fp32 accumulation, the
intermediate rounded to BF16 (W4A16) or quantized to NVFP4 with the checkpoint's input_scale (W4A4).

Where it runs (docs/python.md):
  device="cpu"      cpu.reference.v1, the fp64 oracle, on host arrays (numpy or CPU torch tensors).
  device="cuda[:N]" a CUDA backend on CUDA tensors, on the caller's stream: named with backend=ID,
                    or chosen per token count by the cached qualification verdict (`fp4moe qualify`
                    / fp4moe.qualify()), or the safe default cuda.sm80.pipeline.v1 when there is no
                    verdict; a warning says when the backend used is not qualified.
"""

from __future__ import annotations

import re
import warnings
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np

from . import _ext
from ._arrays import host_bytes, host_float32, host_scalars, is_torch, torch_module

__all__ = ["MoeLayer"]

Device = Union[str, int, Any]


def _device_ordinal(device: Device) -> int:
    """-1 for the host, else the CUDA ordinal. Accepts "cpu", "cuda", "cuda:N", N, torch.device."""
    if isinstance(device, int) and not isinstance(device, bool):
        if device < 0:
            raise ValueError(f"device: a CUDA ordinal must be >= 0, got {device}")
        return device
    text = str(device)
    if text == "cpu":
        return -1
    if text == "cuda":
        torch = torch_module()
        return int(torch.cuda.current_device()) if torch is not None and torch.cuda.is_available() else 0
    match = re.fullmatch(r"cuda:(\d+)", text)
    if match:
        return int(match.group(1))
    raise ValueError(f"device: expected 'cpu', 'cuda', 'cuda:N' or a CUDA ordinal, got {device!r}")


def _input_scales(gate, up, down, num_experts: int, activation: str):
    """(w13_input_scale, w2_input_scale) [E] each. w13 takes max(gate, up) per expert (the one
    activation scale GEMM1 can use; what vLLM and the C++ checkpoint loader do). W4A16 layers may
    omit them (W4A16_NVFP4 checkpoints have none): zeros, MoeWeights' "absent"."""
    given = [s is not None for s in (gate, up, down)]
    if not any(given):
        if activation.upper() == "W4A4":
            raise ValueError("W4A4 needs the activation input scales (gate_input_scale, up_input_scale, "
                             "down_input_scale): the checkpoint's input_scale tensors")
        absent = np.zeros(num_experts, dtype=np.float32)
        return absent, absent.copy()
    if not all(given):
        raise ValueError("input scales: give all of gate_input_scale, up_input_scale and down_input_scale, or none")
    g = host_scalars(gate, "gate_input_scale", num_experts)
    u = host_scalars(up, "up_input_scale", num_experts)
    d = host_scalars(down, "down_input_scale", num_experts)
    return np.maximum(g, u), d


class MoeLayer:
    """Routed experts of one NVFP4 MoE layer from stacked ModelOpt tensors (E experts, hidden H,
    expert intermediate I); see MoeLayer.from_modelopt for per-expert checkpoint tensors.

    gate_up_weight        uint8 [E, 2I, H/2]  packed E2M1, rows [0, I) gate_proj, [I, 2I) up_proj
    gate_up_weight_scale  E4M3 [E, 2I, H/16]  (uint8 codes or float8_e4m3fn), linear layout
    gate_weight_scale_2   fp32 [E]            gate_proj.weight_scale_2 (a scalar: same for all)
    up_weight_scale_2     fp32 [E]            up_proj.weight_scale_2 (kept apart from gate's)
    down_weight           uint8 [E, H, I/2]
    down_weight_scale     E4M3 [E, H, I/16]
    down_weight_scale_2   fp32 [E]
    gate/up/down_input_scale  fp32 [E] or None: the static activation scales (needed for W4A4)
    top_k, routing        routing: softmax_topk_renorm (Qwen3/3.5), softmax_topk, topk_softmax,
                          sigmoid_grouped_topk (with n_group, topk_group, routed_scaling_factor)
    activation            "W4A16" (BF16 activations) or "W4A4" (activations quantized to NVFP4)
    device                "cpu" (cpu.reference.v1) or "cuda" / "cuda:N"
    backend               None (cpu: cpu.reference.v1; cuda: the qualification verdict, else the
                          safe default) or an explicit backend id
    max_tokens            the largest token count forward() accepts; sizes the workspace, and is
                          part of the verdict key (use the same --max-tokens as `fp4moe qualify`)

    Arrays may be numpy arrays or torch tensors on any device: the weights are read on the host
    once and prepared (repacked, uploaded) for the backend here.
    """

    def __init__(self, *, gate_up_weight: Any, gate_up_weight_scale: Any, gate_weight_scale_2: Any,
                 up_weight_scale_2: Any, down_weight: Any, down_weight_scale: Any, down_weight_scale_2: Any,
                 top_k: int, gate_input_scale: Any = None, up_input_scale: Any = None,
                 down_input_scale: Any = None, routing: str = "softmax_topk_renorm", activation: str = "W4A16",
                 n_group: int = 1, topk_group: int = 1, routed_scaling_factor: float = 1.0,
                 backend: Optional[str] = None, device: Device = "cpu", max_tokens: int = 4096):
        w13 = host_bytes(gate_up_weight, "gate_up_weight")
        if w13.ndim != 3 or w13.shape[1] % 2:
            raise ValueError(f"gate_up_weight: expected [E, 2I, H/2], got shape {list(w13.shape)}")
        num_experts, inter, hidden = w13.shape[0], w13.shape[1] // 2, w13.shape[2] * 2
        w2 = host_bytes(down_weight, "down_weight")
        if w2.shape != (num_experts, hidden, inter // 2):
            raise ValueError(f"down_weight: expected [E={num_experts}, H={hidden}, I/2={inter // 2}] to match "
                             f"gate_up_weight, got shape {list(w2.shape)}")
        w13_input, w2_input = _input_scales(gate_input_scale, up_input_scale, down_input_scale, num_experts,
                                            activation)
        problem = _ext.ProblemArgs()
        problem.hidden, problem.inter, problem.num_experts, problem.top_k = hidden, inter, num_experts, int(top_k)
        problem.routing, problem.activation = routing, activation
        problem.n_group, problem.topk_group = int(n_group), int(topk_group)
        problem.routed_scaling_factor = float(routed_scaling_factor)
        self._device = _device_ordinal(device)
        self._core = _ext.MoeCore(
            problem, w13, host_bytes(gate_up_weight_scale, "gate_up_weight_scale"),
            host_scalars(gate_weight_scale_2, "gate_weight_scale_2", num_experts),
            host_scalars(up_weight_scale_2, "up_weight_scale_2", num_experts), w2,
            host_bytes(down_weight_scale, "down_weight_scale"),
            host_scalars(down_weight_scale_2, "down_weight_scale_2", num_experts), w13_input, w2_input,
            backend or "", self._device, int(max_tokens))
        for line in self._core.notices:
            warnings.warn(line, RuntimeWarning, stacklevel=2)
        self.hidden_size, self.intermediate_size, self.num_experts, self.top_k = hidden, inter, num_experts, int(top_k)

    @classmethod
    def from_modelopt(cls, tensors: Union[Mapping[str, Any], Sequence[Mapping[str, Any]]], prefix: str = "", *,
                      top_k: int, num_experts: Optional[int] = None, **options: Any) -> "MoeLayer":
        """A layer from ModelOpt per-expert tensors, as a ModelOpt NVFP4 checkpoint stores them:
        for expert e, `{prefix}{e}.{gate_proj,up_proj,down_proj}.{weight, weight_scale,
        weight_scale_2, input_scale}` (input_scale optional for W4A16), e.g. prefix
        "model.language_model.layers.0.mlp.experts.". `tensors` is a mapping (a state dict, a
        safetensors dict) or a sequence with one mapping per expert (keys without the
        "{prefix}{e}." part). num_experts: default, count experts 0, 1, ... present. `options` are
        MoeLayer's keyword arguments (routing, activation, device, backend, max_tokens, ...)."""
        if isinstance(tensors, Mapping):
            def get(e: int, name: str):
                return tensors.get(f"{prefix}{e}.{name}")
            if num_experts is None:
                num_experts = 0
                while f"{prefix}{num_experts}.gate_proj.weight" in tensors:
                    num_experts += 1
        else:
            experts = list(tensors)
            def get(e: int, name: str):
                return experts[e].get(name)
            if num_experts is None:
                num_experts = len(experts)
        if not num_experts:
            raise ValueError(f"from_modelopt: no experts found (looked for '{prefix}0.gate_proj.weight')")

        def need(e: int, name: str):
            value = get(e, name)
            if value is None:
                raise KeyError(f"from_modelopt: expert {e} has no '{name}' (prefix '{prefix}')")
            return value

        def stack_bytes(name: str):
            return np.stack([host_bytes(need(e, name), f"expert {e} {name}") for e in range(num_experts)])

        def stack_scalars(name: str, optional: bool = False):
            values = [get(e, name) for e in range(num_experts)]
            if optional and all(v is None for v in values):
                return None
            return np.concatenate([host_scalars(need(e, name), f"expert {e} {name}", 1) for e in range(num_experts)])

        gate_up = np.concatenate([stack_bytes("gate_proj.weight"), stack_bytes("up_proj.weight")], axis=1)
        gate_up_scale = np.concatenate([stack_bytes("gate_proj.weight_scale"), stack_bytes("up_proj.weight_scale")],
                                       axis=1)
        return cls(gate_up_weight=gate_up, gate_up_weight_scale=gate_up_scale,
                   gate_weight_scale_2=stack_scalars("gate_proj.weight_scale_2"),
                   up_weight_scale_2=stack_scalars("up_proj.weight_scale_2"),
                   down_weight=stack_bytes("down_proj.weight"), down_weight_scale=stack_bytes("down_proj.weight_scale"),
                   down_weight_scale_2=stack_scalars("down_proj.weight_scale_2"),
                   gate_input_scale=stack_scalars("gate_proj.input_scale", optional=True),
                   up_input_scale=stack_scalars("up_proj.input_scale", optional=True),
                   down_input_scale=stack_scalars("down_proj.input_scale", optional=True), top_k=top_k, **options)

    # --- what was prepared ---------------------------------------------------------------------
    @property
    def device(self) -> str:
        return "cpu" if self._device < 0 else f"cuda:{self._device}"

    @property
    def backends(self) -> list:
        """The backend ids prepared for this layer (several when the verdict picks per bucket)."""
        return list(self._core.backends)

    @property
    def backend_source(self) -> str:
        """How the backend was chosen: host, explicit, verdict or default."""
        return self._core.source

    @property
    def problem(self) -> str:
        return self._core.problem

    @property
    def max_tokens(self) -> int:
        return self._core.max_tokens

    @property
    def workspace_bytes(self) -> int:
        return self._core.workspace_bytes

    def backend_for(self, tokens: int) -> str:
        """The backend that runs a batch of `tokens` tokens."""
        return self._core.backend_for(int(tokens))

    # --- running -------------------------------------------------------------------------------
    def forward(self, hidden: Any, router_logits: Any, *, correction_bias: Any = None, stream: Optional[int] = None,
                out: Any = None) -> Any:
        """out [T, H] BF16 = MoE(hidden [T, H], router_logits [T, E] fp32).

        CUDA layer: torch CUDA tensors on the layer's device (hidden bfloat16; float32 is rounded to
        BF16 first; logits float32, bfloat16/float16 widen exactly). Runs on `stream` (a
        cudaStream_t as int), by default torch.cuda.current_stream().cuda_stream, without host
        synchronization; output and workspace come from torch's caching allocator (CUDA-graph
        capturable). Other DLPack CUDA arrays (CuPy, ...) also work: pass `stream` (CuPy's current
        stream is used by default); output and workspace are then cudaMalloc'ed by the extension
        and the output is a DLPack array (cupy.from_dlpack(out)).
        Host layer (cpu.reference.v1): numpy arrays (hidden float32 holding any values, rounded to
        BF16 first, result float32 holding BF16 values; or ml_dtypes.bfloat16 in and out) or CPU
        torch tensors (bfloat16 out). correction_bias: [E] fp32 for sigmoid_grouped_topk.
        out: optional preallocated output (same framework, device and dtype as the result)."""
        stream = getattr(stream, "cuda_stream", stream)  # a torch.cuda.Stream is fine too
        if self._device < 0:
            return self._forward_host(hidden, router_logits, correction_bias, out)
        return self._forward_cuda(hidden, router_logits, correction_bias, stream, out)

    __call__ = forward

    def _forward_host(self, hidden, router_logits, correction_bias, out):
        bias = None if correction_bias is None else host_float32(correction_bias, "correction_bias")
        if is_torch(hidden):
            torch = torch_module()
            if hidden.device.type != "cpu":
                raise ValueError(f"forward: this layer runs on the host (cpu.reference.v1) but hidden is on "
                                 f"{hidden.device}; build the layer with device='{hidden.device}'")
            h = hidden.detach()
            if h.dtype != torch.bfloat16:
                if h.dtype != torch.float32:
                    raise TypeError(f"forward: hidden must be bfloat16 or float32, got {h.dtype}")
                h = h.to(torch.bfloat16)
            h = h.contiguous()
            logits = host_float32(router_logits, "router_logits")
            result = torch.empty(h.shape, dtype=torch.bfloat16) if out is None else out
            self._core.run(h, logits, result, None, 0, bias)
            return result
        h = np.asarray(hidden) if not hasattr(hidden, "__dlpack__") or isinstance(hidden, np.ndarray) \
            else np.from_dlpack(hidden)
        logits = host_float32(router_logits, "router_logits")
        if h.dtype.name == "bfloat16":
            bits = np.ascontiguousarray(h).view(np.uint16)
            result_bits = np.empty(bits.shape, dtype=np.uint16) if out is None else out.view(np.uint16)
            self._core.run(bits, logits, result_bits, None, 0, bias)
            return result_bits.view(h.dtype) if out is None else out
        if h.dtype != np.float32:
            raise TypeError(f"forward: numpy hidden must be float32 or ml_dtypes.bfloat16, got {h.dtype}")
        bits = _ext.bf16_encode(np.ascontiguousarray(h))
        result_bits = np.empty(bits.shape, dtype=np.uint16)
        self._core.run(bits, logits, result_bits, None, 0, bias)
        result = _ext.bf16_decode(result_bits)
        if out is not None:
            out[...] = result
            return out
        return result

    def _forward_cuda(self, hidden, router_logits, correction_bias, stream, out):
        if is_torch(hidden):
            torch = torch_module()
            if hidden.device.type != "cuda" or hidden.device.index != self._device:
                raise ValueError(f"forward: hidden is on {hidden.device}, the layer on cuda:{self._device}")
            h = hidden.detach()
            if h.dtype != torch.bfloat16:
                if h.dtype != torch.float32:
                    raise TypeError(f"forward: hidden must be bfloat16 or float32, got {h.dtype}")
                h = h.to(torch.bfloat16)
            h = h.contiguous()
            logits = router_logits.detach()
            if logits.dtype != torch.float32:
                if logits.dtype not in (torch.bfloat16, torch.float16):
                    raise TypeError(f"forward: router_logits must be float32 (or bfloat16/float16), got {logits.dtype}")
                logits = logits.float()
            logits = logits.contiguous()
            bias = None if correction_bias is None else correction_bias.detach().float().contiguous()
            current = torch.cuda.current_stream(h.device)
            if stream is None:
                stream = current.cuda_stream
            result = torch.empty(h.shape, dtype=torch.bfloat16, device=h.device) if out is None else out
            workspace = None
            if self._core.workspace_bytes:
                workspace = torch.empty(self._core.workspace_bytes, dtype=torch.uint8, device=h.device)
                if int(stream) != current.cuda_stream:
                    # Why: the caching allocator ties the block to the current stream; keep it from
                    # being reused there while the kernels on `stream` still use it.
                    workspace.record_stream(torch.cuda.ExternalStream(int(stream), device=h.device))
            self._core.run(h, logits, result, workspace, int(stream), bias)
            return result
        if stream is None:
            if type(hidden).__module__.startswith("cupy"):
                import cupy  # the caller's framework, already imported
                stream = cupy.cuda.get_current_stream().ptr
            else:
                raise ValueError("forward: pass stream=<cudaStream_t as int> for non-torch CUDA arrays")
        tokens = int(hidden.shape[0])
        result = _ext.cuda_empty([tokens, self.hidden_size], "bfloat16", self._device) if out is None else out
        workspace = (_ext.cuda_empty([self._core.workspace_bytes], "uint8", self._device)
                     if self._core.workspace_bytes else None)
        self._core.run(hidden, router_logits, result, workspace, int(stream), correction_bias)
        if workspace is not None:
            # Why: cudaFree would otherwise release the workspace while the kernels may still run.
            self._last_workspace = workspace
        return result

    def __repr__(self) -> str:
        return (f"MoeLayer({self.problem}, device={self.device}, backends={self.backends}, "
                f"source={self.backend_source})")
