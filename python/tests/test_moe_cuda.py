"""MoeLayer on CUDA (torch tensors) against the same layer on cpu.reference.v1: the budgets of
src/qualify/tolerances.h (W4A16: normalized error <= 3e-3, every token row <= 1e-2; W4A4: 1e-2 and
5e-2), determinism, the caller's stream, CUDA-graph capture (each on every CUDA serving backend of the
build), and the verdict-driven backend choice. Skips without torch, a CUDA device or a CUDA build of
fp4moe; a backend skips where its support check says the GPU's architecture cannot run it."""

import numpy as np
import pytest

import fp4moe
import oracle
from conftest import cuda_backend_params, cuda_layer_or_skip, cuda_torch_or_skip

F32 = np.float32
H, I, E, K = 256, 256, 8, 2
BUDGET = {"W4A16": (3e-3, 1e-2), "W4A4": (1e-2, 5e-2)}


def stacked_weights(rng, h=H, i=I, e=E):
    def quantized(shape, scale):
        packed, scales, s2 = [], [], []
        for _ in range(e):
            p, s, t = fp4moe.quantize_nvfp4((rng.standard_normal(shape) * scale).astype(F32))
            packed.append(p), scales.append(s), s2.append(t)
        return np.stack(packed), np.stack(scales), np.array(s2, dtype=F32)
    gp, gs, g2 = quantized((i, h), 0.08)
    up, us, u2 = quantized((i, h), 0.05)
    dp, ds, d2 = quantized((h, i), 0.06)
    scales = lambda: rng.uniform(0.5, 2.0, e).astype(F32) / F32(2688.0)
    return dict(gate_up_weight=np.concatenate([gp, up], axis=1), gate_up_weight_scale=np.concatenate([gs, us], axis=1),
                gate_weight_scale_2=g2, up_weight_scale_2=u2, down_weight=dp, down_weight_scale=ds,
                down_weight_scale_2=d2, gate_input_scale=scales(), up_input_scale=scales(), down_input_scale=scales())


@pytest.fixture(scope="module")
def weights():
    return stacked_weights(np.random.default_rng(21))


def row_errors(got, want):
    d = np.sqrt(np.sum((got.astype(np.float64) - want) ** 2, axis=1))
    return d / np.maximum(np.sqrt(np.sum(want.astype(np.float64) ** 2, axis=1)), 1e-30)


@pytest.mark.parametrize("activation", ["W4A16", "W4A4"])
@pytest.mark.parametrize("backend", cuda_backend_params())
def test_backend_matches_cpu_reference(weights, backend, activation):
    torch = cuda_torch_or_skip()
    cuda = cuda_layer_or_skip(lambda: fp4moe.MoeLayer(**weights, top_k=K, activation=activation, device="cuda:0",
                                                      backend=backend, max_tokens=256), backend)
    host = fp4moe.MoeLayer(**weights, top_k=K, activation=activation, device="cpu", max_tokens=256)
    assert cuda.backends == [backend] and cuda.backend_source == "explicit"
    rng = np.random.default_rng(3)
    # 1 and 5 tokens take the fused decode's one-tile launch 2; 64, 65 (64 + 1) and 256 (4 x 64) its chunks.
    for tokens in (1, 5, 64, 65, 256):
        assert cuda.backend_for(tokens) == backend
        hidden = torch.from_numpy(rng.standard_normal((tokens, H)).astype(F32)).to("cuda", torch.bfloat16)
        logits = torch.from_numpy((rng.standard_normal((tokens, E)) * 2).astype(F32)).cuda()
        out = cuda(hidden, logits)
        assert out.device == hidden.device and out.dtype == torch.bfloat16 and out.shape == (tokens, H)
        got = out.float().cpu().numpy()
        want = host(hidden.cpu(), logits.cpu()).float().numpy()
        assert np.isfinite(got).all()
        norm, row = BUDGET[activation]
        assert oracle.normalized_error(got, want) <= norm, tokens
        assert row_errors(got, want).max() <= row, tokens
        # Deterministic: same inputs, same bits.
        assert torch.equal(cuda(hidden, logits), out)


@pytest.mark.parametrize("backend", cuda_backend_params())
def test_runs_on_the_callers_stream_and_captures_in_a_cuda_graph(weights, backend):
    torch = cuda_torch_or_skip()
    layer = cuda_layer_or_skip(lambda: fp4moe.MoeLayer(**weights, top_k=K, device="cuda", backend=backend,
                                                       max_tokens=64), backend)
    hidden = torch.randn(32, H, device="cuda", dtype=torch.bfloat16)
    logits = torch.randn(32, E, device="cuda", dtype=torch.float32)
    eager = layer(hidden, logits)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        on_side = layer(hidden, logits)  # default stream argument: torch's current stream (`side`)
        explicit = layer(hidden, logits, stream=side.cuda_stream)
    torch.cuda.current_stream().wait_stream(side)
    assert torch.equal(on_side, eager) and torch.equal(explicit, eager)
    # CUDA graph: capture (warm-up on a side stream first, as torch recommends), replay on new data.
    static_h, static_l = hidden.clone(), logits.clone()
    with torch.cuda.stream(side):
        layer(static_h, static_l)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = layer(static_h, static_l)
    new_h = torch.randn_like(hidden)
    static_h.copy_(new_h)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(static_out, layer(new_h, logits))


def test_errors_and_backend_choice(weights, tmp_path, monkeypatch):
    torch = cuda_torch_or_skip()
    monkeypatch.setenv("FP4MOE_CACHE_DIR", str(tmp_path))  # no verdict: the safe default, with a notice
    with pytest.warns(RuntimeWarning, match="no qualification verdict"):
        layer = fp4moe.MoeLayer(**weights, top_k=K, device="cuda", max_tokens=16)
    assert layer.backend_source == "default" and layer.backends == ["cuda.sm80.pipeline.v1"]
    hidden = torch.randn(4, H, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(fp4moe.Error, match="exceed max_tokens"):
        layer(torch.randn(17, H, device="cuda", dtype=torch.bfloat16), torch.randn(17, E, device="cuda"))
    with pytest.raises(ValueError, match="is on cpu"):
        layer(hidden.cpu(), torch.randn(4, E))
    with pytest.raises(fp4moe.Error, match="router_logits"):
        layer(hidden, torch.randn(4, E + 1, device="cuda"))
    with pytest.raises(fp4moe.Error, match="unknown MoE backend"):
        fp4moe.MoeLayer(**weights, top_k=K, device="cuda", backend="cuda.nope.v9", max_tokens=16)
    # A verdict written by `fp4moe qualify` for this shape is followed (tolerance: qualification time).
    verdict = fp4moe.qualify(preset="tiny", max_tokens=16, tokens=[1, 16], timeout=600)
    assert verdict["chosen"], verdict
    tiny = stacked_weights(np.random.default_rng(5), h=256, i=128, e=16)  # the `tiny` preset's MoE shape
    chosen = fp4moe.MoeLayer(**tiny, top_k=4, device="cuda", max_tokens=16)
    assert chosen.backend_source == "verdict"
    assert set(chosen.backends) == {b["backend"] for b in verdict["chosen"]}

