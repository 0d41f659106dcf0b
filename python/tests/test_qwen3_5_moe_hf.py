"""fp4moe.MoeLayer against Hugging Face transformers' Qwen3_5MoeSparseMoeBlock (transformers 5.x,
transformers.models.qwen3_5_moe), routed-experts part: the block's shared expert is zeroed (its
down_proj weight = 0, so the sigmoid-gated shared output is exactly 0), its experts hold exactly the
dequantized NVFP4 weights fp4moe runs, and fp4moe gets the block's own router logits.

Tolerances (docs/python.md):
  HF in float32 (exact dequantized weights, fp32 routing and matmuls, TF32 off): fp4moe differs by
  its two BF16 roundings (the SwiGLU output and the layer output, 2^-9 relative each) and fp32 vs
  HF's summation order: normalized error <= 4e-3 and every token row <= 1e-2 (measured ~2e-3 on the
  CPU oracle path, see test_moe_cpu.py).
  HF in bfloat16 (the block as deployed: weights rounded to BF16, BF16 activations, routing
  weights cast to BF16 before the combine): HF itself is ~2^-8 off per step, so normalized error
  <= 2e-2 and every row <= 5e-2.
Runs on the CPU oracle and on every CUDA serving backend of the build. Skips without torch or
transformers (with Qwen3.5-MoE); the CUDA cases also without a GPU, and a backend where its support
check says the GPU's architecture cannot run it.
"""

import numpy as np
import pytest

import fp4moe
import oracle
from conftest import cuda_backends, cuda_layer_or_skip

torch = pytest.importorskip("torch", reason="torch is not installed")
pytest.importorskip("transformers", reason="transformers is not installed")
try:
    from transformers.models.qwen3_5_moe.configuration_qwen3_5_moe import Qwen3_5MoeTextConfig
    from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import Qwen3_5MoeSparseMoeBlock
except ImportError as error:
    pytest.skip(f"this transformers has no Qwen3.5-MoE ({error})", allow_module_level=True)

H, I, E, K, T = 256, 128, 16, 4, 48


def make_block(seed):
    config = Qwen3_5MoeTextConfig(hidden_size=H, moe_intermediate_size=I, shared_expert_intermediate_size=I,
                                  num_experts=E, num_experts_per_tok=K, hidden_act="silu")
    try:
        config._experts_implementation = "eager"  # the plain per-expert loop, not grouped_mm
    except (AttributeError, ValueError):
        pass
    torch.manual_seed(seed)
    block = Qwen3_5MoeSparseMoeBlock(config).float()
    experts = []
    with torch.no_grad():
        block.gate.weight.normal_(0.0, 0.1)
        for p in block.shared_expert.parameters():
            p.normal_(0.0, 0.05)
        block.shared_expert_gate.weight.normal_(0.0, 0.05)
        block.shared_expert.down_proj.weight.zero_()  # routed experts only: the shared output is 0
        for e in range(E):
            tensors, parts = {}, {}
            for name, shape, scale in (("gate_proj", (I, H), 0.08), ("up_proj", (I, H), 0.05),
                                       ("down_proj", (H, I), 0.06)):
                w = (torch.randn(shape) * scale).numpy()
                packed, scales, scale2 = fp4moe.quantize_nvfp4(w)
                tensors.update({f"{name}.weight": packed, f"{name}.weight_scale": scales,
                                f"{name}.weight_scale_2": np.float32(scale2)})
                parts[name] = torch.from_numpy(oracle.nvfp4_dequantize(packed, scales, scale2))
            block.experts.gate_up_proj[e].copy_(torch.cat([parts["gate_proj"], parts["up_proj"]]))
            block.experts.down_proj[e].copy_(parts["down_proj"])
            experts.append(tensors)
    return block.eval(), experts


def devices():
    """(device, backend) pairs: the CPU oracle, and each CUDA serving backend where there is a GPU."""
    yield "cpu", None
    if torch.cuda.is_available() and fp4moe.build_info()["cuda"]:
        for backend in cuda_backends():
            yield "cuda", backend


def row_errors(got, want):
    d = np.sqrt(np.sum((got.astype(np.float64) - want) ** 2, axis=1))
    return d / np.maximum(np.sqrt(np.sum(want.astype(np.float64) ** 2, axis=1)), 1e-30)


@pytest.mark.parametrize("device,backend", list(devices()))
@pytest.mark.parametrize("hf_dtype", ["float32", "bfloat16"])
def test_matches_qwen3_5_moe_sparse_moe_block(device, backend, hf_dtype):
    torch.backends.cuda.matmul.allow_tf32 = False
    block, experts = make_block(seed=1)
    block = block.to(device=device, dtype=getattr(torch, hf_dtype))
    make = lambda: fp4moe.MoeLayer.from_modelopt(experts, top_k=K, device=device, max_tokens=T, backend=backend)
    layer = make() if device == "cpu" else cuda_layer_or_skip(make, backend)
    assert layer.backend_for(T) == (backend or fp4moe.HOST_BACKEND)
    hidden = torch.randn(2, T // 2, H).to(torch.bfloat16).to(device)  # BF16 values, as the model has
    with torch.no_grad():
        want = block(hidden.to(block.gate.weight.dtype)).reshape(T, H).float().cpu().numpy()
        # The block's router logits, as its Qwen3_5MoeTopKRouter computes them (a linear in the
        # block's dtype), widened to fp32 for fp4moe.
        flat = hidden.reshape(T, H).to(block.gate.weight.dtype)
        logits = torch.nn.functional.linear(flat, block.gate.weight).float()
    got = layer(hidden.reshape(T, H), logits).float().cpu().numpy()
    assert np.isfinite(got).all()
    norm, row = (4e-3, 1e-2) if hf_dtype == "float32" else (2e-2, 5e-2)
    err = oracle.normalized_error(got, want)
    assert err <= norm, f"normalized error {err:.2e} > {norm}"
    assert row_errors(got, want).max() <= row
    # And the comparison is sharp: HF's answer with the shared expert switched back on is far off.
    with torch.no_grad():
        block.shared_expert.down_proj.weight.normal_(0.0, 0.2)
        other = block(hidden.to(block.gate.weight.dtype)).reshape(T, H).float().cpu().numpy()
    assert oracle.normalized_error(got, other) > 10 * norm
