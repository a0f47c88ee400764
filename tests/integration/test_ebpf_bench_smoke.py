"""benchmarks/boot_symbolizer.py in its quick mode: the four configurations run, eBPF with every ISeq
probed really reports the boot's ISeqs, and the governed one pauses. Speed is not judged here (benchmarks/RESULTS.md holds measured runs)."""
from __future__ import annotations

import json

import pytest

from conftest import run_bench_quick

from test_ebpf_symbolizer import ebpf_missing

pytestmark = [pytest.mark.once,
              pytest.mark.skipif(bool(ebpf_missing()), reason=f"no eBPF here: {ebpf_missing()}")]


def test_boot_symbolizer_quick_run_measures_every_configuration(tmp_path):
    # GIVEN/WHEN the quick run
    # (a bound for a hung run only: eBPF is compiled three times, each waited for, as long as it takes)
    r = run_bench_quick(tmp_path, "boot_symbolizer", timeout=900)
    with open(tmp_path / "boot_symbolizer-quick.json") as f:
        doc = json.load(f)
    rows = {row["mode"]: row for row in doc["rows"]}
    # THEN every configuration booted
    assert list(rows) == ["none", "remote", "ebpf", "ebpf-all"]
    for row in rows.values():
        assert row["boot_s"]["median"] > 0
    # AND with every ISeq probed (--ebpf-max-rate 0), every ISeq of the boot was reported, none lost
    p = doc["params"]
    assert rows["ebpf-all"]["ebpf_events"] >= 2 * p["methods"] + p["files"]
    assert rows["ebpf-all"]["lost"] == 0 and rows["ebpf-all"]["pauses"] == 0
    # AND at the default budget the governor paused the probes: fewer events, some names from remote reads
    assert rows["ebpf"]["pauses"] >= 1 and 0 < rows["ebpf"]["ebpf_events"] < rows["ebpf-all"]["ebpf_events"]
    assert rows["ebpf"]["median"]["named_remote"] > 0 and rows["ebpf"]["median"]["named_ebpf"] > 0
    assert rows["remote"]["ebpf_events"] == 0 and rows["remote"]["median"]["named_ebpf"] == 0
    assert "| ebpf |" in r.stdout and "| ebpf-all |" in r.stdout


def test_ebpf_pause_cost_quick_run_measures_both_sides(tmp_path):
    # GIVEN/WHEN the quick run of the pause-cost benchmark
    # (a bound for a hung run only: it compiles eBPF twice, the second time beside two `yes`)
    r = run_bench_quick(tmp_path, "ebpf_pause_cost", timeout=900)
    with open(tmp_path / "ebpf_pause_cost-quick.json") as f:
        doc = json.load(f)
    rows = {(row["side"], row["what"]): row for row in doc["rows"] if row["what"] != "asleep"}
    stalls = {row["hogs"]: row for row in doc["rows"] if row["what"] == "asleep"}
    # THEN detaches and attaches were timed on the sidecar, and the target (quiet) was counted in every phase
    # it spent time in (the attach is too short to be sure of a 10 ms slice)
    assert rows[("sidecar", "detach (pause)")]["wall_ms"] > 0 and rows[("sidecar", "attach (resume)")]["wall_ms"] > 0
    for phase in ("attached", "detaching", "detached"):
        assert rows[("target", phase)]["slices"] > 0, phase
    assert doc["params"]["probes"] and "| sidecar | detach (pause) |" in r.stdout
    # AND the target's time asleep was taken at every detach, quiet and beside two `yes`
    assert sorted(stalls) == [0, 2], stalls
    for row in stalls.values():
        assert row["detach"]["n"] == doc["params"]["cycles"] and row["attach"]["n"] == doc["params"]["cycles"], row
    assert "| 2 `yes` |" in r.stdout
