"""bench/record_table.py, the generator of the docs/perf tables: the interleaved-comparison modes
(--combine, then --ab for two sides or --sides for more) must pair the sides' runs and report the ratios
of their medians."""

import json
import os
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "record_table.py")


def report(us_by_tokens):
    points = [{"tokens": t, "us_median": us, "tflops": 1000.0 / us} for t, us in us_by_tokens.items()]
    return {"backends": [{"id": "cuda.sm90.prefill.v1", "points": points}]}


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], check=True, capture_output=True, text=True).stdout


def combine_runs(folder, runs):
    """Writes each run's report as folder/<name>.json and combines the folder with --combine."""
    for name, points in runs.items():
        (folder / f"{name}.json").write_text(json.dumps(report(points)))
    combined = folder / "combined.out"
    combined.write_text(run("--combine", "test comparison", str(folder)))
    return combined


def test_ab_table_pairs_sides_and_takes_the_ratio_of_medians(tmp_path):
    runs = {
        "gathered-r1-m": {64: 100.0, 128: 10.0},
        "gathered-r2-m": {64: 104.0, 128: 10.0},
        "slots-r1-m": {64: 90.0, 128: 12.0},
        "slots-r2-m": {64: 94.0, 128: 12.0},
    }
    (tmp_path / "notes.json").write_text("{}")  # not a run: ignored by --combine
    combined = combine_runs(tmp_path, runs)
    assert sorted(json.loads(combined.read_text())["runs"]) == sorted(runs)
    rows = [line for line in run("--ab", str(combined)).splitlines() if line.startswith("| cuda.")]
    assert len(rows) == 2
    cells = {int(r.split("|")[3]): r.split("|") for r in rows}
    assert cells[64][4].strip() == "100.0 (10.0), 104.0 (9.6)"  # the first side seen in round 1 comes first
    assert float(cells[64][6]) == round(92.0 / 102.0, 3)
    assert float(cells[128][6]) == 1.2


@pytest.mark.parametrize("mode, message", [("--ab", "expected two sides"), ("--sides", "two or more sides")])
def test_tables_refuse_a_single_side(tmp_path, mode, message):
    combined = tmp_path / "one.json"
    combined.write_text(json.dumps({"what": "x", "runs": {"a-r1-m": report({1: 1.0})}}))
    result = subprocess.run([sys.executable, SCRIPT, mode, str(combined)], capture_output=True, text=True)
    assert result.returncode != 0 and message in result.stderr


def test_sides_table_gives_each_side_its_median_and_ratio_to_the_first(tmp_path):
    runs = {
        "knob0-r1-m": {1: 40.0, 8: 200.0},
        "knob0-r2-m": {1: 42.0, 8: 210.0},
        "knob1-r1-m": {1: 30.0, 8: 100.0},
        "knob1-r2-m": {1: 31.0, 8: 110.0},
        "knob2-r1-m": {1: 50.0},  # no 8-token point: a dash
        "knob2-r2-m": {1: 52.0},
    }
    combined = combine_runs(tmp_path, runs)
    lines = run("--sides", str(combined)).splitlines()
    assert lines[0] == "| backend | preset | T | knob0 us | knob1 us (/knob0) | knob2 us (/knob0) |"
    rows = {int(r.split("|")[3]): [c.strip() for c in r.split("|")[4:7]] for r in lines if r.startswith("| cuda.")}
    assert rows[1] == ["41.0", f"30.5 ({30.5 / 41.0:.3f})", f"51.0 ({51.0 / 41.0:.3f})"]
    assert rows[8] == ["205.0", f"105.0 ({105.0 / 205.0:.3f})", "-"]

