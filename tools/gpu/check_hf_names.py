#!/usr/bin/env python3
"""Checks that a checkpoint written by `fp4moe synth` names and shapes its tensors as Hugging Face
transformers does (run on the GPU machine, where transformers is installed; no GPU needed).

usage: check_hf_names.py CHECKPOINT_DIR

Builds the model from the checkpoint's config.json on the meta device (no memory), takes its
state_dict names and shapes, and compares them with the checkpoint's index. Routed experts are stored
per expert (`...mlp.experts.{e}.{gate,up,down}_proj.weight`, NVFP4 in ModelOpt exports) while
transformers 5 stacks them (`...mlp.experts.gate_up_proj` [E, 2I, H], `...mlp.experts.down_proj`
[E, H, I]) on load; that mapping is checked too. Exit 1 on any mismatch.
"""
import json
import re
import sys
from pathlib import Path


def checkpoint_tensors(directory: Path):
    from safetensors import safe_open
    index = directory / "model.safetensors.index.json"
    files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.exists() else ["model.safetensors"]
    shapes = {}
    for name in files:
        with safe_open(str(directory / name), framework="numpy") as f:
            for key in f.keys():
                shapes[key] = tuple(f.get_slice(key).get_shape())
    return shapes


def hf_tensors(directory: Path):
    import torch
    import transformers
    config = transformers.AutoConfig.from_pretrained(str(directory))
    candidates = []
    for arch in getattr(config, "architectures", None) or []:
        if hasattr(transformers, arch):
            candidates.append(getattr(transformers, arch))
    with torch.device("meta"):
        errors = []
        for cls in candidates:
            try:
                model = cls(config)
                return cls.__name__, {k: tuple(v.shape) for k, v in model.state_dict().items()}
            except Exception as e:  # noqa: BLE001 - report every attempt
                errors.append(f"{cls.__name__}: {e}")
        text_config = getattr(config, "text_config", config)
        model = transformers.AutoModelForCausalLM.from_config(text_config)
        print("note: built the text model only (" + "; ".join(errors) + ")")
        return type(model).__name__, {k: tuple(v.shape) for k, v in model.state_dict().items()}


def main() -> int:
    directory = Path(sys.argv[1])
    ours = checkpoint_tensors(directory)
    arch, theirs = hf_tensors(directory)
    print(f"transformers built {arch}: {len(theirs)} tensors; the checkpoint has {len(ours)}")
    expert = re.compile(r"^(.*\.mlp\.experts)\.(\d+)\.(gate_proj|up_proj|down_proj)\.(weight|weight_scale|weight_scale_2|input_scale)$")
    stacked = {}
    plain = {}
    for name, shape in ours.items():
        m = expert.match(name)
        if m:
            if m.group(4) == "weight":
                stacked.setdefault(m.group(1), {}).setdefault(m.group(3), {})[int(m.group(2))] = shape
        else:
            plain[name] = shape
    problems = []
    for name, shape in plain.items():
        if name not in theirs:
            problems.append(f"only in the checkpoint: {name} {shape}")
        elif theirs[name] != shape:
            problems.append(f"shape differs: {name} checkpoint {shape} transformers {theirs[name]}")
    for prefix, projections in stacked.items():
        experts = len(projections.get("gate_proj", {}))
        gate_up = theirs.get(prefix + ".gate_up_proj")
        down = theirs.get(prefix + ".down_proj")
        if gate_up is None or down is None:
            problems.append(f"transformers has no stacked experts under {prefix} (keys: gate_up_proj/down_proj)")
            continue
        out_i, in_h_packed = projections["gate_proj"][0]
        if gate_up[0] != experts or gate_up[1] != 2 * out_i:
            problems.append(f"{prefix}.gate_up_proj {gate_up} vs {experts} experts of gate_proj [{out_i}, ...]")
        if down[0] != experts:
            problems.append(f"{prefix}.down_proj {down} vs {experts} experts")
    expert_keys = {p + s for p in stacked for s in (".gate_up_proj", ".down_proj")}
    for name in theirs:
        if name not in plain and name not in expert_keys and "visual" not in name and not name.startswith("mtp"):
            problems.append(f"only in transformers: {name} {theirs[name]}")
    for p in problems[:60]:
        print("MISMATCH", p)
    print(f"{len(problems)} mismatches")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
