#!/usr/bin/env python3
"""Markdown tables for docs/perf records (numbers are never typed by hand).

  python3 bench/record_table.py REPORT.json
      one `fp4moe bench moe --json` report.
  python3 bench/record_table.py --combine "WHAT" DIR > AB.json
      the reports DIR/<side>-r<round>-<preset>.json of an interleaved comparison (tools/gpu/ab.sh: sides
      a and b; or knob values) as one JSON {"what": WHAT, "runs": {"<side>-r<round>-<preset>": report}}.
  python3 bench/record_table.py --ab AB.json
      its table: per backend, preset and T the median of each run per side, and the ratio of the second
      side's median over the runs to the first's.
  python3 bench/record_table.py --sides AB.json
      for a comparison of two or more sides (knob values): per backend, preset and T each side's median
      over its runs and its ratio to the first side's (the first side in name order, e.g. a knob's 0).
"""
import glob
import json
import os
import re
import statistics
import sys

RUN_NAME = re.compile(r"^(?P<side>[A-Za-z0-9_]+)-r(?P<round>[0-9]+)-(?P<preset>.+)$")


def combine(what, folder):
    runs = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
        name = os.path.basename(path)[:-len(".json")]
        if RUN_NAME.match(name):
            runs[name] = json.load(open(path))
    if not runs:
        sys.exit(f"no <side>-r<round>-<preset>.json reports in {folder}")
    json.dump({"what": what, "runs": runs}, sys.stdout, indent=1, sort_keys=True)
    print()


def runs_by_side(path):
    """The sides of a combined comparison in order of appearance (round, then name) and each side's
    points: {(side, backend, preset, T): [point of each run]}."""
    ab = json.load(open(path))
    sides, points = [], {}
    for name in sorted(ab["runs"], key=lambda n: (int(RUN_NAME.match(n)["round"]), n)):
        m = RUN_NAME.match(name)
        if m["side"] not in sides:
            sides.append(m["side"])
        for b in ab["runs"][name]["backends"]:
            for p in b.get("points", []):
                points.setdefault((m["side"], b["id"], m["preset"], p["tokens"]), []).append(p)
    return sides, points


def ab_table(path):
    sides, times = runs_by_side(path)
    if len(sides) != 2:
        sys.exit(f"{path}: expected two sides, found {sides}")
    first, second = sides
    print(f"| backend | preset | T | {first} us (TFLOP/s) | {second} us (TFLOP/s) | {second}/{first} (medians) |")
    print("|---|---|---:|---|---|---:|")
    for key in sorted(k for k in times if k[0] == first):
        _, backend, preset, t = key
        a, b = times[key], times.get((second, backend, preset, t), [])
        cell = lambda pts: ", ".join(f"{p['us_median']:.1f} ({p['tflops']:.1f})" for p in pts) or "-"
        ratio = (statistics.median(p["us_median"] for p in b) / statistics.median(p["us_median"] for p in a)) if b else float("nan")
        print(f"| {backend} | {preset} | {t} | {cell(a)} | {cell(b)} | {ratio:.3f} |")


def sides_table(path):
    sides, points = runs_by_side(path)
    times = {key: [p["us_median"] for p in pts] for key, pts in points.items()}
    if len(sides) < 2:
        sys.exit(f"{path}: expected two or more sides, found {sides}")
    first = sides[0]
    print("| backend | preset | T | " + " | ".join(f"{s} us" + ("" if s == first else f" (/{first})") for s in sides) + " |")
    print("|---|---|---:|" + "---:|" * len(sides))
    for key in sorted(k for k in times if k[0] == first):
        _, backend, preset, t = key
        base = statistics.median(times[key])
        cells = []
        for s in sides:
            us = times.get((s, backend, preset, t))
            if not us:
                cells.append("-")
            elif s == first:
                cells.append(f"{base:.1f}")
            else:
                cells.append(f"{statistics.median(us):.1f} ({statistics.median(us) / base:.3f})")
        print(f"| {backend} | {preset} | {t} | " + " | ".join(cells) + " |")


def main(path):
    r = json.load(open(path))
    g, c = r["gpu"], r["ceilings"]

    def cuda(v):
        return f"{v // 1000}.{v % 1000 // 10}"

    print(f"- GPU: {g['name']} (SM {g['sm']}, {g['multiprocessors']} SMs, L2 {g['l2_bytes'] / 2**20:.0f} MiB), "
          f"driver {g.get('driver', 'unknown')} (CUDA {cuda(g.get('driver_cuda_version', g.get('driver_version')))}), "
          f"runtime {cuda(g['runtime_version'])}")
    print(f"- date {r['date_utc']}, commit `{r['commit']}`, preset {r['preset']}: {r['problem']['describe']}")
    print(f"- ceilings (same run): copy {c['copy_gbps_read_plus_write']:.0f} GB/s (read + write), "
          f"BF16 GEMM {c['gemm_size']}^3 {c['bf16_tflops']:.0f} TFLOP/s")
    for b in r["backends"]:
        if not b["supported"]:
            print(f"- `{b['id']}`: not run: {b['reason']}")
        else:
            note = f"; {b['note']}" if b.get("note") else ""
            print(f"- `{b['id']}`: {b['activation']}, {b['weight_sets']} weight sets, {b['timing']}{note}")
    runs = [b for b in r["backends"] if b["supported"]]
    base = next((b for b in runs if b["id"] == "cuda.cublas_bf16.baseline.v1"), None)
    print()
    head = "| T | experts | NVFP4 MB |"
    sep = "|---:|---:|---:|"
    for b in runs:
        short = b["id"].replace("cuda.", "").replace(".v1", "")
        head += f" {short} us | GB/s (% copy) | TFLOP/s (% peak) |"
        sep += "---:|---:|---:|"
    if base:
        for b in runs:
            if b is not base:
                head += f" speed-up {b['id'].replace('cuda.', '').replace('.v1', '')} |"
                sep += "---:|"
    print(head)
    print(sep)
    tokens = [p["tokens"] for p in runs[0]["points"]] if runs else []
    for t in tokens:
        pts = {b["id"]: next((p for p in b["points"] if p["tokens"] == t), None) for b in runs}
        any_p = next(p for p in pts.values() if p)
        row = f"| {t} | {any_p['unique_experts']:.1f} | {any_p['weight_bytes'] / 1e6:.1f} |"
        for b in runs:
            p = pts[b["id"]]
            if p is None:
                row += " - | - | - |"
            else:
                flag = " (!)" if p.get("warning") else ""
                row += (f" {p['us_median']:.1f}{flag} | {p['gbps']:.0f} ({p['pct_copy_bandwidth']:.1f}%) |"
                        f" {p['tflops']:.1f} ({p['pct_bf16_peak']:.1f}%) |")
        if base:
            for b in runs:
                if b is not base:
                    p = pts[b["id"]]
                    row += f" {p['speedup_vs_baseline']:.2f}x |" if p and "speedup_vs_baseline" in p else " - |"
        print(row)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--combine":
        combine(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "--ab":
        ab_table(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "--sides":
        sides_table(sys.argv[2])
    elif len(sys.argv) == 2:
        main(sys.argv[1])
    else:
        sys.exit(__doc__)
