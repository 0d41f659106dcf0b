"""Cross-checks fp4moe's safetensors I/O and NVFP4 quantizer against independent Python code.

1. What fp4moe writes (`fp4moe synth`, sharded) loads in the reference `safetensors` package, with
   the bytes of every tensor equal to what the header promises, and an index that matches.
2. What `safetensors` writes (every dtype fp4moe reads, incl. BF16 and F8_E4M3 through ml_dtypes)
   loads in fp4moe: `fp4moe quantize` reads it, copies the non-expert tensors byte for byte (checked
   back in `safetensors`) and quantizes the expert weights to exactly the codes, block scales and
   tensor scales of a NumPy transcription of ModelOpt's formulas (nvfp4-format.md section 3.2), with
   gate/up sharing weight_scale_2.

usage: safetensors_crosscheck.py --fp4moe PATH [--workdir DIR]
Needs numpy, safetensors and ml_dtypes (pip install numpy safetensors ml_dtypes); fails if absent.
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

try:
    import ml_dtypes
    import numpy as np
    import safetensors
    from safetensors.numpy import save_file
except ImportError as e:  # a missing oracle is a failure, not a skip
    print(f"FAIL: the cross-check needs the Python packages numpy, safetensors and ml_dtypes: {e}\n"
          "      pip install numpy safetensors ml_dtypes", file=sys.stderr)
    sys.exit(1)

failures = []


def check(cond, message):
    if not cond:
        failures.append(message)
        print("FAIL:", message, file=sys.stderr)


def run(cmd):
    env = dict(os.environ, FP4MOE_NO_PROGRESS="1", FP4MOE_NUM_THREADS="2")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {r.returncode}\n{r.stdout}\n{r.stderr}")
    return r.stdout


def raw_tensors(path):
    """Independent parse of a safetensors file: {name: (dtype, shape, bytes)}."""
    blob = open(path, "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        out[name] = (t["dtype"], t["shape"], data[b:e])
    return out


def check_synth(fp4moe, work):
    out = os.path.join(work, "synth")
    run([fp4moe, "synth", "--preset", "tiny", "--layers", "2", "--seed", "11", "--out", out, "--max-shard-size", "1MB"])
    index = json.load(open(os.path.join(out, "model.safetensors.index.json")))
    shards = sorted(f for f in os.listdir(out) if f.endswith(".safetensors"))
    check(len(shards) > 1, f"expected several shards, got {shards}")
    seen = {}
    for shard in shards:
        path = os.path.join(out, shard)
        loaded = dict(safetensors.deserialize(open(path, "rb").read()))  # the reference reader
        mine = raw_tensors(path)
        check(set(loaded) == set(mine), f"{shard}: tensor sets differ")
        for name, (dtype, shape, data) in mine.items():
            ref = loaded[name]
            check(ref["dtype"] == dtype and list(ref["shape"]) == shape, f"{shard}:{name}: dtype/shape differ")
            check(bytes(ref["data"]) == data, f"{shard}:{name}: bytes differ")
            seen[name] = (shard, dtype, shape, data)
        with safetensors.safe_open(path, framework="np") as f:
            check(f.metadata().get("format") == "pt", f"{shard}: metadata format is not 'pt'")
            for name in f.keys():
                if mine[name][0] in ("U8", "F32"):
                    check(f.get_tensor(name).tobytes() == mine[name][2], f"{shard}:{name}: numpy view differs")
    check(set(index["weight_map"]) == set(seen), "index weight_map does not list exactly the tensors")
    for name, shard in index["weight_map"].items():
        check(seen[name][0] == shard, f"index maps {name} to {shard}, it is in {seen[name][0]}")
    check(index["metadata"]["total_size"] == sum(len(v[3]) for v in seen.values()), "index total_size is wrong")
    # ModelOpt layout of one expert.
    e = "model.language_model.layers.1.mlp.experts.15."
    check(seen[e + "gate_proj.weight"][1:3] == ("U8", [128, 128]), "gate_proj.weight dtype/shape")
    check(seen[e + "gate_proj.weight_scale"][1:3] == ("F8_E4M3", [128, 16]), "gate_proj.weight_scale dtype/shape")
    check(seen[e + "down_proj.weight"][1:3] == ("U8", [256, 64]), "down_proj.weight dtype/shape")
    check(seen[e + "up_proj.weight_scale_2"][1:3] == ("F32", []), "weight_scale_2 must be an F32 scalar []")
    check(seen[e + "gate_proj.weight_scale_2"][3] == seen[e + "up_proj.weight_scale_2"][3], "gate/up scale_2 differ")
    print(f"synth: compared {len(seen)} tensors in {len(shards)} shards with safetensors {safetensors.__version__}")


# ---- NumPy transcription of ModelOpt's NVFP4 quantization (nvfp4-format.md section 3.2) ----
E2M1_MIDPOINTS = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], np.float32)


def e2m1_codes(q):
    """Round-to-nearest-even onto the E2M1 grid, saturating at 6; sign from q < 0."""
    a = np.abs(q)
    idx = np.searchsorted(E2M1_MIDPOINTS, a, side="left")  # number of midpoints below |q|
    at_mid = (idx < 7) & (a == E2M1_MIDPOINTS[np.minimum(idx, 6)])
    idx = np.where(at_mid & (idx % 2 == 1), idx + 1, idx)  # a tie goes to the even code
    return (idx | np.where(q < 0, 8, 0)).astype(np.uint8)


def modelopt_nvfp4(x, scale2):
    rows, cols = x.shape
    blocks = x.reshape(rows, cols // 16, 16)
    bamax = np.abs(blocks).max(axis=-1)
    s = bamax / (np.float32(6.0) * scale2)
    s = np.where((s == 0) | (bamax == 0), np.float32(1.0), s)
    s = np.clip(s, np.float32(2.0 ** -9), np.float32(448.0)).astype(np.float32)
    s8 = s.astype(ml_dtypes.float8_e4m3fn)  # RNE
    denom = s8.astype(np.float32) * scale2
    q = (blocks / denom[..., None]).astype(np.float32)
    codes = np.where(bamax[..., None] == 0, 0, e2m1_codes(q)).astype(np.uint8).reshape(rows, cols)
    packed = codes[:, 0::2] | (codes[:, 1::2] << 4)
    return packed.astype(np.uint8).tobytes(), s8.view(np.uint8).tobytes()


def check_quantize(fp4moe, work):
    rng = np.random.default_rng(1234)
    H, I = 64, 32
    tensors = {}
    originals = {}
    for e in range(3):
        for proj, shape in (("gate_proj", (I, H)), ("up_proj", (I, H)), ("down_proj", (H, I))):
            # log-normal block magnitudes, so block scales vary; the up tensor is larger so that gate
            # must take up's amax for the shared scale.
            base = rng.standard_normal(shape).astype(np.float32) * 0.05 * (2.0 if proj == "up_proj" else 1.0)
            mags = np.exp(0.8 * rng.standard_normal((shape[0], shape[1] // 16, 1))).astype(np.float32)
            # expert 0 BF16, expert 1 F16, expert 2 F32: every input dtype the quantizer accepts
            dtype = (ml_dtypes.bfloat16, np.float16, np.float32)[e]
            x = (base.reshape(shape[0], -1, 16) * mags).reshape(shape).astype(dtype)
            name = f"model.layers.0.mlp.experts.{e}.{proj}.weight"
            tensors[name] = x
            originals[name] = x.astype(np.float32)
    others = {
        "model.embed_tokens.weight": rng.standard_normal((16, H)).astype(ml_dtypes.bfloat16),
        "model.norm.weight": rng.standard_normal(H).astype(np.float16),
        "model.layers.0.mlp.gate.weight": rng.standard_normal((3, H)).astype(np.float32),
        "f64": rng.standard_normal(5),
        "i64": np.arange(7, dtype=np.int64),
        "i32": np.arange(3, dtype=np.int32),
        "i16": np.arange(3, dtype=np.int16),
        "i8": np.arange(-3, 3, dtype=np.int8),
        "u8": np.arange(9, dtype=np.uint8),
        "bool": np.array([True, False, True]),
        "fp8": np.array([0.5, -448, 3], np.float32).astype(ml_dtypes.float8_e4m3fn),
        "scalar": np.array(2.5, np.float32),
        "empty": np.zeros((0, 4), np.float32),
    }
    tensors.update(others)
    src = os.path.join(work, "py_bf16")
    os.makedirs(src)
    save_file(tensors, os.path.join(src, "model.safetensors"), metadata={"format": "pt"})
    inspect = run([fp4moe, "inspect", src])  # reads what safetensors wrote
    check("problem:" not in inspect, "inspect reports problems in a safetensors-written file")
    dst = os.path.join(work, "py_nvfp4")
    run([fp4moe, "quantize", "--in", src, "--out", dst])
    out = {}
    for shard in sorted(f for f in os.listdir(dst) if f.endswith(".safetensors")):
        out.update(dict(safetensors.deserialize(open(os.path.join(dst, shard), "rb").read())))
    source = dict(safetensors.deserialize(open(os.path.join(src, "model.safetensors"), "rb").read()))
    for name in others:  # copied byte for byte
        check(bytes(out[name]["data"]) == bytes(source[name]["data"]), f"{name}: bytes changed by quantize")
        check(out[name]["dtype"] == source[name]["dtype"] and out[name]["shape"] == source[name]["shape"],
              f"{name}: dtype/shape changed by quantize")
    input_scale = np.float32(16.0) / np.float32(2688.0)
    compared = 0
    for e in range(3):
        p = f"model.layers.0.mlp.experts.{e}."
        amax_gu = max(np.abs(originals[p + "gate_proj.weight"]).max(), np.abs(originals[p + "up_proj.weight"]).max())
        for proj in ("gate_proj", "up_proj", "down_proj"):
            x = originals[p + proj + ".weight"]
            amax = np.float32(amax_gu) if proj != "down_proj" else np.abs(x).max()
            scale2 = np.float32(amax) / np.float32(2688.0)
            packed, scales = modelopt_nvfp4(x, scale2)
            q = p + proj + "."
            check(out[q + "weight"]["dtype"] == "U8" and out[q + "weight"]["shape"] == [x.shape[0], x.shape[1] // 2],
                  f"{q}weight dtype/shape")
            check(out[q + "weight_scale"]["dtype"] == "F8_E4M3", f"{q}weight_scale dtype")
            check(bytes(out[q + "weight"]["data"]) == packed, f"{q}weight: E2M1 codes differ from the ModelOpt formula")
            check(bytes(out[q + "weight_scale"]["data"]) == scales, f"{q}weight_scale: block scales differ")
            check(bytes(out[q + "weight_scale_2"]["data"]) == scale2.tobytes(), f"{q}weight_scale_2 differs")
            check(out[q + "weight_scale_2"]["shape"] == [], f"{q}weight_scale_2 is not a scalar")
            check(bytes(out[q + "input_scale"]["data"]) == input_scale.tobytes(), f"{q}input_scale differs")
            compared += 1
    hf_quant = json.load(open(os.path.join(dst, "hf_quant_config.json")))
    check(hf_quant["quantization"]["quant_algo"] == "NVFP4", "hf_quant_config quant_algo")
    check("model.layers.*.mlp.gate" in hf_quant["quantization"]["exclude_modules"], "router not in exclude_modules")
    print(f"quantize: compared {len(others)} copied tensors ({len(set(v['dtype'] for v in source.values()))} dtypes) "
          f"and {compared} expert projections against the NumPy ModelOpt quantizer")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fp4moe", required=True)
    ap.add_argument("--workdir")
    args = ap.parse_args()
    work = args.workdir or tempfile.mkdtemp(prefix="fp4moe_crosscheck_")
    try:
        check_synth(args.fp4moe, work)
        check_quantize(args.fp4moe, work)
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    if failures:
        sys.exit(f"{len(failures)} cross-check failures")
    print("OK")


if __name__ == "__main__":
    main()
