"""End-to-end tests of `fp4moe synth | quantize | inspect` as a user runs them.

- synth is deterministic (same seed: identical files), inspect accepts its output (exit 0);
- synth --bf16 -> quantize -> inspect works and exits 0;
- every corrupted file of safetensors_corpus.py makes inspect exit 1 with the expected message on
  stderr, never crash (no signal, no "unexpected error" exit 70);
- broken checkpoint directories (index pointing at a missing shard or at an absent tensor, a shard
  missing an expert tensor, a config.json with absurd sizes) are reported: unreadable ones exit 1,
  inconsistent ones exit 2.

usage: cli_checkpoints.py --fp4moe PATH        (standard library only)
"""
import argparse
import filecmp
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_corpus  # noqa: E402

failures = []


def check(cond, message):
    if not cond:
        failures.append(message)
        print("FAIL:", message, file=sys.stderr)


def run(cmd):
    env = dict(os.environ, FP4MOE_NUM_THREADS="2")
    return subprocess.run(cmd, capture_output=True, text=True, errors="replace", env=env,
                          timeout=120)


def run_ok(cmd):
    r = run(cmd)
    if r.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {r.returncode}\n{r.stdout}\n{r.stderr}")
    return r


def check_no_crash(r, what):
    check(r.returncode >= 0, f"{what}: killed by signal {-r.returncode}")
    check(r.returncode != 70, f"{what}: unexpected-error exit 70: {r.stderr.strip()}")


def rewrite_without(path, drop):
    """Rewrites a safetensors file without tensor `drop` (standard library writer)."""
    blob = open(path, "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    new_header, chunks, offset = {}, [], 0
    for name, t in header.items():
        if name == "__metadata__":
            new_header[name] = t
            continue
        if name == drop:
            continue
        b, e = t["data_offsets"]
        new_header[name] = dict(t, data_offsets=[offset, offset + e - b])
        chunks.append(data[b:e])
        offset += e - b
    text = json.dumps(new_header).encode()
    text += b" " * (-(8 + len(text)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fp4moe", required=True)
    args = ap.parse_args()
    exe = args.fp4moe
    work = tempfile.mkdtemp(prefix="fp4moe_cli_")
    try:
        a, b = os.path.join(work, "a"), os.path.join(work, "b")
        r = run_ok([exe, "synth", "--preset", "tiny", "--seed", "3", "--out", a, "--max-shard-size", "2MB"])
        check("4 shards" in r.stdout, f"synth summary: {r.stdout.strip()}")
        check("synth tiny: done" in r.stderr, f"no final progress line on a non-TTY stderr: {r.stderr!r}")
        check(r.stderr.count("\n") == 1 and "\r" not in r.stderr, f"progress output not quiet on a non-TTY: {r.stderr!r}")
        run_ok([exe, "synth", "--preset", "tiny", "--seed", "3", "--out", b, "--max-shard-size", "2MB"])
        match, mismatch, errors = filecmp.cmpfiles(a, b, sorted(os.listdir(a)), shallow=False)
        check(not mismatch and not errors and len(match) == 7, f"synth not deterministic: {mismatch} {errors}")
        r = run([exe, "inspect", a])
        check(r.returncode == 0 and "OK: no inconsistencies found" in r.stdout, f"inspect of synth output: {r.stdout}")
        check("qwen3_5_moe" in r.stdout and "NVFP4 linears: 192" in r.stdout, f"inspect summary: {r.stdout}")

        bf16, q = os.path.join(work, "bf16"), os.path.join(work, "q")
        run_ok([exe, "synth", "--preset", "tiny", "--layers", "2", "--bf16", "--out", bf16])
        r = run_ok([exe, "quantize", "--in", bf16, "--out", q, "--max-shard-size", "1MB"])
        check("96 linears quantized to NVFP4" in r.stdout, f"quantize summary: {r.stdout.strip()}")
        r = run([exe, "inspect", q])
        check(r.returncode == 0, f"inspect of quantized checkpoint exited {r.returncode}: {r.stdout}")

        r = run([exe, "synth", "--preset", "nope", "--out", os.path.join(work, "x")])
        check(r.returncode == 1 and "unknown model preset 'nope'" in r.stderr, f"bad preset: {r.returncode} {r.stderr}")

        corpus = os.path.join(work, "corpus")
        os.makedirs(corpus)
        for name, data, expected in safetensors_corpus.corpus():
            path = os.path.join(corpus, name)
            with open(path, "wb") as f:
                f.write(data)
            r = run([exe, "inspect", path])
            check_no_crash(r, name)
            check(r.returncode == 1, f"{name}: inspect exited {r.returncode}, expected 1")
            check("fp4moe: error: " in r.stderr and expected in r.stderr and name in r.stderr,
                  f"{name}: expected '{expected}' naming the file, got: {r.stderr.strip()}")

        # Broken directories.
        index_path = os.path.join(a, "model.safetensors.index.json")
        index = json.load(open(index_path))
        broken = os.path.join(work, "missing_shard")
        shutil.copytree(a, broken)
        os.remove(os.path.join(broken, "model-00003-of-00004.safetensors"))
        r = run([exe, "inspect", broken])
        check_no_crash(r, "missing shard")
        check(r.returncode == 1 and "model-00003-of-00004.safetensors', which does not exist" in r.stderr,
              f"missing shard: {r.returncode} {r.stderr.strip()}")
        absent = os.path.join(work, "absent_tensor")
        shutil.copytree(a, absent)
        victim = "model.language_model.layers.1.mlp.experts.4.up_proj.weight"
        rewrite_without(os.path.join(absent, index["weight_map"][victim]), victim)
        r = run([exe, "inspect", absent])
        check_no_crash(r, "absent tensor")
        check(r.returncode == 1 and f"tensor '{victim}' is mapped to shard" in r.stderr,
              f"index entry without tensor: {r.returncode} {r.stderr.strip()}")
        # A config.json claiming 2^31 experts: a problem named at once (it used to have inspect build its
        # expected tensor list until memory ran out), and synth --config refuses it.
        absurd = os.path.join(work, "absurd_config")
        shutil.copytree(a, absurd)
        config = json.load(open(os.path.join(absurd, "config.json")))
        config["text_config"]["num_experts"] = 1 << 31
        json.dump(config, open(os.path.join(absurd, "config.json"), "w"))
        r = run([exe, "inspect", absurd])
        check_no_crash(r, "absurd config")
        check(r.returncode == 2 and "num experts is 2147483648, outside [1, 4096]" in r.stdout,
              f"absurd config: {r.returncode} {r.stdout}")
        r = run([exe, "synth", "--config", os.path.join(absurd, "config.json"), "--out", os.path.join(work, "y")])
        check(r.returncode == 1 and "config.json: num experts is 2147483648" in r.stderr,
              f"synth of an absurd config: {r.returncode} {r.stderr}")
        check(not os.path.exists(os.path.join(work, "y")), "synth of an absurd config created its output directory")
        # --layers outside [1, the model's layers]: a clear error, no output directory (it used to print CLI11's
        # bound as a 300-digit number for 0, and to clamp 99999 to the model's 4 layers without a word).
        for layers, expected in (("0", "--layers 0: tiny has 4 layers, so N must be in [1, 4]"),
                                 ("99999", "--layers 99999: tiny has 4 layers, so N must be in [1, 4]")):
            out = os.path.join(work, f"layers_{layers}")
            r = run([exe, "synth", "--preset", "tiny", "--layers", layers, "--out", out])
            check(r.returncode == 1 and expected in r.stderr, f"synth --layers {layers}: {r.returncode} {r.stderr}")
            check(not os.path.exists(out), f"synth --layers {layers} created its output directory")
        # Integer options take decimal integers of their type and nothing else: CLI11 saturated --seed -1 and
        # --seed 2^64 to 2^64 - 1 without a word and read --seed 010 as octal 8.
        for option, value, expected in (("--seed", "-1", "'-1' is not a decimal integer in [0, 2^64 - 1]"),
                                        ("--seed", "18446744073709551616", "is not a decimal integer in [0, 2^64 - 1]"),
                                        ("--seed", "0x10", "'0x10' is not a decimal integer"),
                                        ("--layers", "99999999999999999999", "is not a decimal integer in [-2^63, 2^63 - 1]")):
            out = os.path.join(work, "seed_bad")
            r = run([exe, "synth", "--preset", "tiny", option, value, "--out", out])
            check(r.returncode != 0 and f"{option}: " in r.stderr and expected in r.stderr,
                  f"synth {option} {value}: {r.returncode} {r.stderr}")
            check(not os.path.exists(out), f"synth {option} {value} created its output directory")
        digests = {}
        for seed in ("010", "10", "8"):
            out = os.path.join(work, f"seed_{seed}")
            run_ok([exe, "synth", "--preset", "tiny", "--layers", "1", "--seed", seed, "--out", out])
            digests[seed] = hashlib.sha256(open(os.path.join(out, "model.safetensors"), "rb").read()).hexdigest()
        check(digests["010"] == digests["10"] and digests["10"] != digests["8"],
              "synth --seed 010 is not seed 10 (CLI11 reads a leading 0 as octal)")
        r = run([exe, "qualify", "--preset", "tiny", "--max-tokens", "99999999999999999999"])
        check(r.returncode != 0 and "--max-tokens: '99999999999999999999' is not a decimal integer" in r.stderr,
              f"qualify --max-tokens 10^20: {r.returncode} {r.stderr}")
        # qualify --timeout outside [1 s, a week]: an error before any GPU is looked for (NaN used to disable the
        # limit, so a hung kernel hung qualification; 0 timed out every backend and cached that verdict).
        for limit in ("nan", "0", "-5", "1e300"):
            r = run([exe, "qualify", "--preset", "tiny", "--timeout", limit])
            check(r.returncode == 1 and "--timeout must be a number of seconds in [1, 604800] per backend" in r.stderr,
                  f"qualify --timeout {limit}: {r.returncode} {r.stderr}")
        # Consistent files, but an expert tensor is gone from both shard and index: inconsistent (exit 2).
        idx = json.load(open(os.path.join(absent, "model.safetensors.index.json")))
        del idx["weight_map"][victim]
        json.dump(idx, open(os.path.join(absent, "model.safetensors.index.json"), "w"))
        r = run([exe, "inspect", absent])
        check_no_crash(r, "missing expert")
        check(r.returncode == 2 and f"problem: missing expert tensor {victim}" in r.stdout,
              f"missing expert: {r.returncode} {r.stdout}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if failures:
        sys.exit(f"{len(failures)} failures")
    print("OK")


if __name__ == "__main__":
    main()
