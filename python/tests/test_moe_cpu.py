"""fp4moe.MoeLayer on the host backend (cpu.reference.v1) against a numpy MoE (oracle.py):
softmax top-k (renormalized) routing, SwiGLU with gate rows first, dequantized NVFP4 weights.

Tolerance (documented in docs/python.md): the layer returns BF16 and computes gate / up / down in
fp32 with the SwiGLU output rounded to BF16 (W4A16) or quantized to NVFP4 (W4A4); the oracle sums in
fp64 and rounds the intermediate at the same point. What remains is one BF16 rounding of the output
(relative 2^-9) and the rare BF16 / E2M1 flip of an intermediate whose fp32 and fp64 values straddle
a rounding boundary. Asserted: normalized RMS error <= 4e-3 (about one BF16 half-ulp) and every
element within 2^-7 * max|reference|; the exact backend (same weights) must match bit for bit across
input forms.
"""

import numpy as np
import pytest

try:
    import ml_dtypes
except ImportError:  # optional here: only the bfloat16 / float8 input forms need it
    ml_dtypes = None

import fp4moe
import oracle
from conftest import torch_or_skip

F32 = np.float32
H, I, E, K, T = 128, 64, 6, 2, 9


def make_experts(rng, hidden=H, inter=I, experts=E):
    """Per-expert ModelOpt tensors (quantized by fp4moe) and their oracle dequantization."""
    tensors, dequant = {}, []
    for e in range(experts):
        d = {}
        for name, shape in (("gate_proj", (inter, hidden)), ("up_proj", (inter, hidden)), ("down_proj", (hidden, inter))):
            # Different magnitudes per projection: gate and up get different weight_scale_2.
            w = (rng.standard_normal(shape) * {"gate_proj": 0.08, "up_proj": 0.05, "down_proj": 0.06}[name]).astype(F32)
            packed, scales, scale2 = fp4moe.quantize_nvfp4(w)
            prefix = f"layers.3.mlp.experts.{e}.{name}."
            tensors[prefix + "weight"] = packed
            # As a checkpoint stores it (float8_e4m3fn), where ml_dtypes is there to say so.
            tensors[prefix + "weight_scale"] = scales.view(ml_dtypes.float8_e4m3fn) if ml_dtypes else scales
            tensors[prefix + "weight_scale_2"] = np.array(scale2, dtype=F32)
            tensors[prefix + "input_scale"] = np.array(rng.uniform(0.5, 2.0) / 2688.0, dtype=F32)
            d[name.split("_")[0]] = oracle.nvfp4_dequantize(packed, scales, scale2)
        gate_is = tensors[f"layers.3.mlp.experts.{e}.gate_proj.input_scale"]
        up_is = tensors[f"layers.3.mlp.experts.{e}.up_proj.input_scale"]
        d["w13_input_scale"] = F32(max(gate_is, up_is))
        d["w2_input_scale"] = F32(tensors[f"layers.3.mlp.experts.{e}.down_proj.input_scale"])
        dequant.append(d)
    return tensors, dequant


@pytest.fixture(scope="module")
def experts():
    return make_experts(np.random.default_rng(11))


def inputs(rng, tokens=T, experts=E):
    hidden = oracle.bf16_round(rng.standard_normal((tokens, H)).astype(F32))
    logits = (rng.standard_normal((tokens, experts)) * 2).astype(F32)
    return hidden, logits


def check_close(got, want, what):
    err = oracle.normalized_error(got, want)
    worst = float(np.max(np.abs(np.asarray(got, np.float64) - want)))
    assert err <= 4e-3, f"{what}: normalized error {err:.2e} > 4e-3"
    assert worst <= 2.0 ** -7 * float(np.max(np.abs(want))), f"{what}: max abs error {worst:.3e}"
    return err


@pytest.mark.parametrize("routing", ["softmax_topk_renorm", "softmax_topk", "topk_softmax"])
def test_cpu_reference_matches_numpy_moe(experts, routing):
    tensors, dequant = experts
    layer = fp4moe.MoeLayer.from_modelopt(tensors, "layers.3.mlp.experts.", top_k=K, routing=routing,
                                          device="cpu", max_tokens=64)
    assert layer.backends == [fp4moe.HOST_BACKEND] and layer.backend_source == "host"
    assert (layer.hidden_size, layer.intermediate_size, layer.num_experts) == (H, I, E)
    hidden, logits = inputs(np.random.default_rng(5))
    out = layer.forward(hidden, logits)
    assert out.dtype == np.float32 and out.shape == (T, H)
    assert np.array_equal(oracle.bf16_round(out), out), "the float32 result must hold BF16 values"
    check_close(out, oracle.moe(hidden, logits, dequant, K, routing), routing)


def test_cpu_reference_w4a4_matches_numpy_moe(experts):
    tensors, dequant = experts
    layer = fp4moe.MoeLayer.from_modelopt(tensors, "layers.3.mlp.experts.", top_k=K, activation="W4A4")
    hidden, logits = inputs(np.random.default_rng(6))
    check_close(layer(hidden, logits), oracle.moe(hidden, logits, dequant, K, activation="W4A4"), "W4A4")


def test_gate_and_up_keep_their_own_tensor_scales(experts):
    tensors, dequant = experts
    p = "layers.3.mlp.experts.0."
    assert tensors[p + "gate_proj.weight_scale_2"] != tensors[p + "up_proj.weight_scale_2"]
    # Swapping in the gate's scale for up (what some frameworks do) must change the result.
    changed = dict(tensors)
    for e in range(E):
        q = f"layers.3.mlp.experts.{e}."
        changed[q + "up_proj.weight_scale_2"] = tensors[q + "gate_proj.weight_scale_2"]
    hidden, logits = inputs(np.random.default_rng(8))
    right = fp4moe.MoeLayer.from_modelopt(tensors, "layers.3.mlp.experts.", top_k=K)(hidden, logits)
    wrong = fp4moe.MoeLayer.from_modelopt(changed, "layers.3.mlp.experts.", top_k=K)(hidden, logits)
    assert oracle.normalized_error(wrong, right) > 0.05


def test_stacked_per_expert_list_and_input_forms_agree_bitwise(experts):
    tensors, _ = experts
    prefix = "layers.3.mlp.experts."
    by_prefix = fp4moe.MoeLayer.from_modelopt(tensors, prefix, top_k=K)
    per_expert = [{k[len(f"{prefix}{e}."):]: v for k, v in tensors.items() if k.startswith(f"{prefix}{e}.")}
                  for e in range(E)]
    by_list = fp4moe.MoeLayer.from_modelopt(per_expert, top_k=K)
    get = lambda name: np.stack([tensors[f"{prefix}{e}.{name}"] for e in range(E)])
    stacked = fp4moe.MoeLayer(
        gate_up_weight=np.concatenate([get("gate_proj.weight"), get("up_proj.weight")], axis=1),
        gate_up_weight_scale=np.concatenate([get("gate_proj.weight_scale"), get("up_proj.weight_scale")], axis=1),
        gate_weight_scale_2=get("gate_proj.weight_scale_2"), up_weight_scale_2=get("up_proj.weight_scale_2"),
        down_weight=get("down_proj.weight"), down_weight_scale=get("down_proj.weight_scale"),
        down_weight_scale_2=get("down_proj.weight_scale_2"), top_k=K)
    hidden, logits = inputs(np.random.default_rng(9))
    want = by_prefix(hidden, logits)
    assert np.array_equal(by_list(hidden, logits), want)
    assert np.array_equal(stacked(hidden, logits), want)
    # ml_dtypes bfloat16 in -> bfloat16 out, same bits; deterministic across calls.
    if ml_dtypes:
        out_bf16 = by_prefix(hidden.astype(ml_dtypes.bfloat16), logits)
        assert out_bf16.dtype == ml_dtypes.bfloat16 and np.array_equal(out_bf16.astype(F32), want)
    assert np.array_equal(by_prefix(hidden, logits), want)
    # Zero tokens is a valid batch.
    assert by_prefix(hidden[:0], logits[:0]).shape == (0, H)


def test_layer_reports_bad_input_clearly(experts):
    tensors, _ = experts
    layer = fp4moe.MoeLayer.from_modelopt(tensors, "layers.3.mlp.experts.", top_k=K, max_tokens=4)
    hidden, logits = inputs(np.random.default_rng(10), tokens=4)
    with pytest.raises(fp4moe.Error, match="exceed max_tokens=4"):
        layer(np.concatenate([hidden, hidden]), np.concatenate([logits, logits]))
    with pytest.raises(fp4moe.Error, match="router_logits: expected shape"):
        layer(hidden, logits[:, :3])
    with pytest.raises(fp4moe.Error, match="hidden must be"):
        layer(hidden[:, :64], logits)
    with pytest.raises(TypeError, match="float64"):
        layer(hidden, logits.astype(np.float64))
    with pytest.raises(ValueError, match="W4A4 needs the activation input scales"):
        no_scales = {k: v for k, v in tensors.items() if not k.endswith("input_scale")}
        fp4moe.MoeLayer.from_modelopt(no_scales, "layers.3.mlp.experts.", top_k=K, activation="W4A4")
    with pytest.raises(KeyError, match="expert 2 has no 'down_proj.weight_scale'"):
        fp4moe.MoeLayer.from_modelopt({k: v for k, v in tensors.items()
                                       if k != "layers.3.mlp.experts.2.down_proj.weight_scale"},
                                      "layers.3.mlp.experts.", top_k=K)
    with pytest.raises(fp4moe.Error, match="unknown routing method"):
        fp4moe.MoeLayer.from_modelopt(tensors, "layers.3.mlp.experts.", top_k=K, routing="softmax")
    with pytest.raises(fp4moe.Error, match="runs on a CUDA device"):
        fp4moe.MoeLayer.from_modelopt(tensors, "layers.3.mlp.experts.", top_k=K, backend="cuda.sm80.pipeline.v1")
    if not fp4moe.build_info()["cuda"]:
        with pytest.raises(fp4moe.Error, match="without CUDA"):
            fp4moe.MoeLayer.from_modelopt(tensors, "layers.3.mlp.experts.", top_k=K, device="cuda:0")
    elif not fp4moe.devices():
        with pytest.raises(fp4moe.Error, match="CUDA device 0 is not available"):
            fp4moe.MoeLayer.from_modelopt(tensors, "layers.3.mlp.experts.", top_k=K, device="cuda:0")
    with pytest.raises(fp4moe.Error, match="does not exist|not available|without CUDA"):
        fp4moe.MoeLayer.from_modelopt(tensors, "layers.3.mlp.experts.", top_k=K, device="cuda:97")


def test_torch_cpu_tensors(experts):
    torch = torch_or_skip()
    tensors, dequant = experts
    as_torch = {k: torch.from_numpy(np.ascontiguousarray(v).view(np.uint8)).view(torch.float8_e4m3fn)
                if k.endswith(".weight_scale") else torch.from_numpy(np.asarray(v)) for k, v in tensors.items()}
    layer = fp4moe.MoeLayer.from_modelopt(as_torch, "layers.3.mlp.experts.", top_k=K)
    hidden, logits = inputs(np.random.default_rng(12))
    out = layer(torch.from_numpy(hidden).to(torch.bfloat16), torch.from_numpy(logits))
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16 and out.shape == (T, H)
    numpy_layer = fp4moe.MoeLayer.from_modelopt(tensors, "layers.3.mlp.experts.", top_k=K)
    assert np.array_equal(out.float().numpy(), numpy_layer(hidden, logits))
