"""bench/record_table.py, the generator of the docs/perf tables: the interleaved-comparison mode
(--combine, then --ab) must pair the sides' runs and report the ratio of their medians."""

import json
import os
import subprocess
import sys

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "record_table.py")


def report(us_by_tokens):
    points = [{"tokens": t, "us_median": us, "tflops": 1000.0 / us} for t, us in us_by_tokens.items()]
    return {"backends": [{"id": "cuda.sm90.prefill.v1", "points": points}]}


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], check=True, capture_output=True, text=True).stdout


def test_ab_table_pairs_sides_and_takes_the_ratio_of_medians(tmp_path):
    runs = {
        "gathered-r1-m": {64: 100.0, 128: 10.0},
        "gathered-r2-m": {64: 104.0, 128: 10.0},
        "slots-r1-m": {64: 90.0, 128: 12.0},
        "slots-r2-m": {64: 94.0, 128: 12.0},
    }
    for name, points in runs.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(report(points)))
    (tmp_path / "notes.json").write_text("{}")  # not a run: ignored by --combine
    combined = tmp_path / "ab.json"
    combined.write_text(run("--combine", "test comparison", str(tmp_path)))
    assert sorted(json.loads(combined.read_text())["runs"]) == sorted(runs)
    rows = [line for line in run("--ab", str(combined)).splitlines() if line.startswith("| cuda.")]
    assert len(rows) == 2
    cells = {int(r.split("|")[3]): r.split("|") for r in rows}
    assert cells[64][4].strip() == "100.0 (10.0), 104.0 (9.6)"  # the first side seen in round 1 comes first
    assert float(cells[64][6]) == round(92.0 / 102.0, 3)
    assert float(cells[128][6]) == 1.2


def test_ab_table_refuses_other_than_two_sides(tmp_path):
    combined = tmp_path / "ab.json"
    combined.write_text(json.dumps({"what": "x", "runs": {"a-r1-m": report({1: 1.0})}}))
    result = subprocess.run([sys.executable, SCRIPT, "--ab", str(combined)], capture_output=True, text=True)
    assert result.returncode != 0 and "expected two sides" in result.stderr
