#!/usr/bin/env python3
"""Markdown table of a `fp4moe bench moe --json` report, for docs/perf records (numbers are never
typed by hand). Usage: python3 bench/record_table.py REPORT.json"""
import json
import sys


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
    main(sys.argv[1])
