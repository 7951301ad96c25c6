"""``benchmarks.longest_sequence``: measured bisection, the report, and a tiny run end to end."""

from __future__ import annotations

import json

import pytest

from benchmarks import longest_sequence
from benchmarks.longest_sequence import measured_boundary, parse_bytes
from benchmarks.longest_sequence.longest_report import targets, write_report


def test_parse_bytes() -> None:
    assert parse_bytes("256MiB") == 256 << 20
    assert parse_bytes("1.5GiB") == 3 << 29
    assert parse_bytes("300MB") == 300 * 10**6
    assert parse_bytes("4096") == 4096
    with pytest.raises(Exception, match="256 parsecs"):
        parse_bytes("256 parsecs")


@pytest.mark.parametrize("boundary", [0, 10, 63, 200, 1000])
@pytest.mark.parametrize("start", [None, 10, 64, 500])
def test_measured_bisection_finds_the_boundary_without_a_sweep(boundary: int, start: int | None) -> None:
    grid = list(range(8, 1001, 8))
    measured: list[int] = []

    def peak(n: int) -> int:
        measured.append(n)
        return n  # a peak that grows with the length: the cap is the boundary

    peaks: dict[int, int] = {}
    longest, beyond = measured_boundary(peak, grid, boundary, peaks, start if start in grid else None)
    fitting = [n for n in grid if n <= boundary]
    assert longest == (fitting[-1] if fitting else None)
    assert beyond == (boundary >= grid[-1])
    assert len(measured) == len(set(measured)) <= 2 * len(grid).bit_length() + 2


def _record(predicted: int, measured: int, compile_longest: int) -> dict:
    def result(system: str, longest: int, **extra: object) -> dict:
        base = {
            "system": system,
            "longest": longest,
            "beyond_high": False,
            "peaks": {str(longest): 900},
            "step_seconds": [0.1],
            "compile_seconds": 1.0,
            "predicted": None,
            "probes": {},
        }
        return {**base, **extra}

    ours = result(
        "ours",
        measured,
        predicted=predicted,
        predicted_peak=950,
        predicted_overhead=1e-3,
        probes={str(predicted): 950},
        fit_seconds=2.0,
        measured_at_predicted=990,
        grad_diff=1e-7,
    )
    return {
        "model": "llama",
        "cap": 1000,
        "command": "python -m benchmarks.longest_sequence ...",
        "path": "graphs",
        "size": "quick",
        "batch": 4,
        "grid": [16, 256, 16],
        "wall_seconds": 60.0,
        "torch": "2.13.0",
        "results": [result("compile", compile_longest), result("checkpoint", 96), ours],
    }


def test_targets_say_what_was_met() -> None:
    met = {name: ok for name, ok, _ in targets(_record(predicted=112, measured=112, compile_longest=64))}
    assert all(met.values()) and len(met) == 5
    missed = {name: ok for name, ok, _ in targets(_record(predicted=128, measured=112, compile_longest=96))}
    assert not missed["predicted longest within 3% of the measured boundary"]
    assert not missed[">= 1.5x torch.compile's longest"]


def test_report_writes_table_and_plot(tmp_path) -> None:
    (tmp_path / "llama_0MiB_graphs.json").write_text(json.dumps(_record(112, 112, 64)))
    text = write_report(tmp_path).read_text()
    assert (
        "| recompute: fit_longest | 112 |" in text and "![llama_0MiB_graphs](llama_0MiB_graphs.png)" in text
    )
    assert (tmp_path / "llama_0MiB_graphs.png").stat().st_size > 0


def test_tiny_run_end_to_end(tmp_path) -> None:
    """Ours at the test size without codegen: it predicts its measured boundary."""
    args = "--model llama --cap 1MiB --size quick --batch 2 --path graphs --low 16 --high 64 --multiple 16"
    argv = [*args.split(), "--repeats", "1", "--systems", "ours", "--out", str(tmp_path)]
    assert longest_sequence.main(argv) == 0
    (record,) = [json.loads(p.read_text()) for p in tmp_path.glob("*.json")]
    by = {r["system"]: r for r in record["results"]}
    ours = by["ours"]
    assert ours["predicted"] == ours["longest"]  # exact without codegen
    assert ours["measured_at_predicted"] <= record["cap"] and ours["grad_diff"] <= 1e-4
    assert "recompute: fit_longest" in (tmp_path / "RESULTS.md").read_text()


def test_inductor_rng_targets_compare_gradients_with_torch_compile() -> None:
    """Under ``--rng inductor`` eager draws other masks: the reference is torch.compile."""
    record = {**_record(112, 112, 64), "path": "inductor-rng", "rng": "inductor"}
    names = [name for name, _, _ in targets(record)]
    assert "gradients equal to torch.compile's" in names and "gradients equal to eager" not in names
