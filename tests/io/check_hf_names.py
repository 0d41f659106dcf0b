"""Checks a checkpoint's tensor names and shapes against transformers' own model class.

Run on a machine with torch + transformers (the GPU machine):
    python3 tests/io/check_hf_names.py --fp4moe build/tools/fp4moe     # every toy config below
    python3 tests/io/check_hf_names.py CHECKPOINT_DIR                  # one checkpoint
The first form synthesizes a checkpoint for each config in tests/io/hf_toy_configs/ (the four
supported architectures at toy size) with `fp4moe synth --config` and checks it. Without torch or
transformers it exits 77 (ctest: skipped).
The model is built from the checkpoint's config.json on the meta device (no memory, no weights);
its state_dict names/shapes are compared with the safetensors headers:
- every non-expert tensor must exist in the model with the same shape;
- routed experts: the checkpoint's per-expert `...mlp.experts.{e}.{gate,up,down}_proj.weight`
  (ModelOpt layout; NVFP4 aux tensors weight_scale / weight_scale_2 / input_scale ignored) must
  match either per-expert model parameters of the same name, or transformers v5's stacked
  `...mlp.experts.gate_up_proj` [E, 2I, H] / `...mlp.experts.down_proj` [E, H, I];
- model parameters absent from the checkpoint are listed (vision tower / MTP are expected there:
  fp4moe does not write them).
Exit status 0 when nothing unexpected differs. This validates io/checkpoint_layout.cpp, in
particular the Qwen3.5 text prefix `model.language_model.`.
"""
import glob
import json
import os
import re
import struct
import sys
import tempfile


def checkpoint_shapes(ckpt):
    shapes = {}
    for path in sorted(glob.glob(os.path.join(ckpt, "*.safetensors"))):
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        for name, t in header.items():
            if name != "__metadata__":
                shapes[name] = (t["dtype"], list(t["shape"]))
    return shapes


def check_checkpoint(ckpt):
    import torch
    import transformers

    config = json.load(open(os.path.join(ckpt, "config.json")))
    config.pop("quantization_config", None)  # build the plain BF16 module tree
    arch = config["architectures"][0]
    with tempfile.TemporaryDirectory() as tmp:
        json.dump(config, open(os.path.join(tmp, "config.json"), "w"))
        hf_config = transformers.AutoConfig.from_pretrained(tmp)
    cls = getattr(transformers, arch)
    with torch.device("meta"):
        model = cls._from_config(hf_config)
    model_shapes = {k: list(v.shape) for k, v in model.state_dict().items()}
    print(f"transformers {transformers.__version__}, {arch}: {len(model_shapes)} model tensors")

    ck = checkpoint_shapes(ckpt)
    aux = (".weight_scale", ".weight_scale_2", ".input_scale")
    expert_re = re.compile(r"^(.*\.mlp\.experts)\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")
    problems, matched, experts = [], 0, {}
    for name, (dtype, shape) in sorted(ck.items()):
        if name.endswith(aux):
            continue
        m = expert_re.match(name)
        if m:
            prefix, e, proj = m.group(1), int(m.group(2)), m.group(3)
            if name in model_shapes:  # per-expert modules (transformers < 5)
                logical = shape if dtype != "U8" else [shape[0], shape[1] * 2]
                if model_shapes[name] != logical:
                    problems.append(f"{name}: checkpoint {logical} vs model {model_shapes[name]}")
                matched += 1
            else:
                experts.setdefault(prefix, {}).setdefault(proj, {})[e] = shape if dtype != "U8" else [shape[0], shape[1] * 2]
            continue
        if name not in model_shapes:
            problems.append(f"only in the checkpoint: {name} {shape}")
        elif model_shapes[name] != shape:
            problems.append(f"{name}: checkpoint {shape} vs model {model_shapes[name]}")
        else:
            matched += 1
    for prefix, projs in experts.items():  # stacked experts (transformers v5)
        gate_up, down = prefix + ".gate_up_proj", prefix + ".down_proj"
        if gate_up not in model_shapes or down not in model_shapes:
            problems.append(f"{prefix}: per-expert tensors in the checkpoint, but the model has neither per-expert "
                            f"parameters nor {gate_up} / {down}")
            continue
        E = len(projs.get("gate_proj", {}))
        (I, H) = projs["gate_proj"][0]
        if model_shapes[gate_up] != [E, 2 * I, H] or model_shapes[down] != [E, H, I]:
            problems.append(f"{prefix}: checkpoint E={E} I={I} H={H} vs model {gate_up} {model_shapes[gate_up]}, "
                            f"{down} {model_shapes[down]}")
        else:
            matched += 2
    covered = set(ck) | {p + s for p in experts for s in (".gate_up_proj", ".down_proj")}
    missing = [k for k in model_shapes if k not in covered and not re.search(r"\.experts\.\d+\.", k)]
    expected_missing = [k for k in missing if k.startswith(("model.visual.", "mtp.")) or ".visual." in k]
    unexpected_missing = [k for k in missing if k not in expected_missing]
    if hf_config.to_dict().get("tie_word_embeddings") or getattr(hf_config, "tie_word_embeddings", False):
        unexpected_missing = [k for k in unexpected_missing if k != "lm_head.weight"]
    for k in unexpected_missing:
        problems.append(f"only in the model: {k} {model_shapes[k]}")
    print(f"matched {matched}; {len(expected_missing)} model tensors not written by design (vision tower / MTP)")
    for p in problems:
        print("PROBLEM:", p)
    if not problems:
        print("OK: the checkpoint's names and shapes match transformers")
    return len(problems)


def main():
    args = sys.argv[1:]
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        print(f"SKIP: needs torch and transformers ({e})")
        sys.exit(77)
    if len(args) == 2 and args[0] == "--fp4moe":
        import subprocess
        configs = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hf_toy_configs")
        total = 0
        with tempfile.TemporaryDirectory() as tmp:
            for name in sorted(os.listdir(configs)):
                out = os.path.join(tmp, name[:-5])
                subprocess.run([args[1], "synth", "--config", os.path.join(configs, name), "--out", out], check=True,
                               env=dict(os.environ, FP4MOE_NO_PROGRESS="1"), stdout=subprocess.DEVNULL)
                print(f"== {name}")
                total += check_checkpoint(out)
        sys.exit(1 if total else 0)
    if len(args) != 1:
        sys.exit(__doc__)
    sys.exit(1 if check_checkpoint(args[0]) else 0)


if __name__ == "__main__":
    main()
