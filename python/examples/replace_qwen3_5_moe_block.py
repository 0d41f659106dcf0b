#!/usr/bin/env python3
"""fp4moe's MoE layer standing in for the routed experts of Hugging Face transformers'
Qwen3_5MoeSparseMoeBlock (transformers 5.x, transformers.models.qwen3_5_moe).

    python3 python/examples/replace_qwen3_5_moe_block.py                     # tiny shape, GPU if any
    python3 python/examples/replace_qwen3_5_moe_block.py --hidden 4096 --inter 1024 --experts 512 \
        --top-k 10 --tokens 1,16,256                                           # Qwen3.5-397B's MoE shape

What it does:
  1. builds a Qwen3_5MoeSparseMoeBlock in BF16 (random weights; no download);
  2. quantizes its routed experts to NVFP4 with fp4moe (the ModelOpt formulas), giving the tensors a
     ModelOpt checkpoint holds per expert (gate_proj / up_proj / down_proj .weight, .weight_scale,
     .weight_scale_2), and puts the dequantized weights back into the HF block, so both sides run
     the same numbers;
  3. swaps the block for Fp4MoeSparseMoeBlock: HF's router and sigmoid-gated shared expert (BF16)
     around fp4moe.MoeLayer for the routed experts, on torch's current stream;
  4. prints the difference to the HF block and both times.
With a real ModelOpt checkpoint, step 2 is fp4moe.MoeLayer.from_modelopt(state_dict,
"model.language_model.layers.N.mlp.experts.", top_k=10, device="cuda") per layer, and
replace_sparse_moe_blocks() does step 3 for the whole model.
"""

import argparse
import time

import torch
import torch.nn.functional as F

import fp4moe

try:
    from transformers.models.qwen3_5_moe.configuration_qwen3_5_moe import Qwen3_5MoeTextConfig
    from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import Qwen3_5MoeSparseMoeBlock
except ImportError as error:
    raise SystemExit(f"this example needs transformers with Qwen3.5-MoE (5.x): {error}")


class Fp4MoeSparseMoeBlock(torch.nn.Module):
    """Qwen3_5MoeSparseMoeBlock with the routed experts run by fp4moe: same inputs, same outputs.

    The router (a BF16 linear giving the logits; fp4moe does softmax, top-k and renormalization in
    fp32) and the shared expert with its sigmoid gate stay Hugging Face's modules."""

    def __init__(self, hf_block, layer: fp4moe.MoeLayer):
        super().__init__()
        self.gate = hf_block.gate
        self.shared_expert = hf_block.shared_expert
        self.shared_expert_gate = hf_block.shared_expert_gate
        self.layer = layer

    def forward(self, hidden_states):
        batch, seq, hidden = hidden_states.shape
        flat = hidden_states.reshape(-1, hidden)
        logits = F.linear(flat, self.gate.weight)  # what Qwen3_5MoeTopKRouter computes first
        routed = self.layer(flat, logits)           # BF16 [T, H], on torch's current stream
        shared = torch.sigmoid(self.shared_expert_gate(flat)) * self.shared_expert(flat)
        return (routed.to(shared.dtype) + shared).reshape(batch, seq, hidden)


def replace_sparse_moe_blocks(model, make_layer):
    """Swap every Qwen3_5MoeSparseMoeBlock of `model` in place; make_layer(name, block) returns its
    fp4moe.MoeLayer (e.g. from_modelopt with the checkpoint tensors of that layer). Returns the count."""
    targets = [(name, module) for name, module in model.named_modules()
               if type(module).__name__ == "Qwen3_5MoeSparseMoeBlock"]
    for name, block in targets:
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, attr, Fp4MoeSparseMoeBlock(block, make_layer(name, block)))
    return len(targets)


def quantize_experts(block):
    """NVFP4-quantize the block's routed experts (ModelOpt per-expert tensors) and load the
    dequantized values back into the block."""
    experts = []
    with torch.no_grad():
        gate_up, down = block.experts.gate_up_proj, block.experts.down_proj
        inter = gate_up.shape[1] // 2
        for e in range(gate_up.shape[0]):
            tensors, deq = {}, {}
            for name, w in (("gate_proj", gate_up[e, :inter]), ("up_proj", gate_up[e, inter:]), ("down_proj", down[e])):
                packed, scales, scale2 = fp4moe.quantize_nvfp4(w)  # CUDA tensors: computed on the host
                tensors.update({f"{name}.weight": packed, f"{name}.weight_scale": scales,
                                f"{name}.weight_scale_2": scale2})
                deq[name] = fp4moe.dequantize_nvfp4(packed, scales, scale2)
            gate_up[e].copy_(torch.cat([deq["gate_proj"], deq["up_proj"]]).to(gate_up.dtype))
            down[e].copy_(deq["down_proj"].to(down.dtype))
            experts.append(tensors)
    return experts


def time_ms(fn, device, repeats=20):
    for _ in range(3):
        fn()
    if device == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(repeats):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / repeats
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - t0) * 1e3 / repeats


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--inter", type=int, default=128)
    parser.add_argument("--experts", type=int, default=16)
    parser.add_argument("--top-k", type=int, default=4)
    parser.add_argument("--tokens", default="1,16,64", help="comma-separated token counts")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--backend", default=None, help="fp4moe backend id (default: qualification verdict)")
    args = parser.parse_args()
    tokens = [int(t) for t in args.tokens.split(",")]

    config = Qwen3_5MoeTextConfig(hidden_size=args.hidden, moe_intermediate_size=args.inter,
                                  shared_expert_intermediate_size=args.inter, num_experts=args.experts,
                                  num_experts_per_tok=args.top_k, hidden_act="silu")
    try:
        config._experts_implementation = "eager"
    except (AttributeError, ValueError):
        pass
    torch.manual_seed(0)
    hf_block = Qwen3_5MoeSparseMoeBlock(config)
    with torch.no_grad():
        for p in hf_block.parameters():
            p.normal_(0.0, 0.05)
    hf_block = hf_block.to(device=args.device, dtype=torch.bfloat16).eval()
    print(f"quantizing {args.experts} experts to NVFP4 ...")
    experts = quantize_experts(hf_block)
    layer = fp4moe.MoeLayer.from_modelopt(experts, top_k=args.top_k, device=args.device, backend=args.backend,
                                          max_tokens=max(tokens))
    print(layer)

    holder = torch.nn.Module()
    holder.mlp = hf_block
    replace_sparse_moe_blocks(holder, lambda name, block: layer)
    fp4_block = holder.mlp
    print(f"{'tokens':>6}  {'normalized diff':>15}  {'HF BF16 ms':>10}  {'fp4moe ms':>9}")
    with torch.no_grad():
        for t in tokens:
            x = torch.randn(1, t, args.hidden, device=args.device, dtype=torch.bfloat16)
            want, got = hf_block(x).float(), fp4_block(x).float()
            diff = float(torch.linalg.vector_norm(got - want) / torch.linalg.vector_norm(want))
            print(f"{t:>6}  {diff:>15.2e}  {time_ms(lambda: hf_block(x), args.device):>10.3f}  "
                  f"{time_ms(lambda: fp4_block(x), args.device):>9.3f}")
    print("(difference: HF runs BF16 weights and activations; fp4moe rounds only at the contract's points)")


if __name__ == "__main__":
    main()
