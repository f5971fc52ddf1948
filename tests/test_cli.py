"""The `eat` command as a user runs it: exit codes, one-line errors, JSON keys."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
MATMUL = ROOT / "examples" / "cpu_matmul"


def eat(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "eat", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def _one_line_error(done: subprocess.CompletedProcess, *words: str) -> None:
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    for w in words:
        assert w in lines[0]
    assert done.stdout == ""


def test_missing_target_and_candidate_exit_2(tmp_path):
    _one_line_error(eat("eval", str(tmp_path / "none"), "x.c"), "none", "no such target folder")
    _one_line_error(eat("eval", str(MATMUL), str(tmp_path / "gone.c")), "gone.c", "not found")


def test_malformed_target_names_file_and_field(tmp_path):
    (tmp_path / "target.toml").write_text((MATMUL / "target.toml").read_text()
                                          .replace("rtol = 1e-4", 'rtol = "tight"'))
    for f in ("reference.py", "baseline.c"):
        (tmp_path / f).write_text((MATMUL / f).read_text())
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    _one_line_error(eat("eval", str(tmp_path), str(MATMUL / "baseline.c")),
                    "target.toml", "tolerance.rtol")
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


@pytest.mark.slow
def test_eval_baseline_json_is_ok_with_speedup_near_one():
    done = eat("eval", str(MATMUL), str(MATMUL / "baseline.c"), "--json")
    assert done.returncode == 0, done.stderr
    ev = json.loads(done.stdout)
    assert ev["status"] == "ok"
    assert 0.8 <= ev["speedup"] <= 1.25
    assert len(ev["workloads"]) == 3 and all(w["gflops"] > 0 for w in ev["workloads"])
    assert ev["vendor_speedup"] > 1 and ev["workloads"][0]["vendor"]["n"] >= 7


def test_eval_compile_error_exits_1_with_message(tmp_path):
    bad = tmp_path / "bad.c"
    bad.write_text("void matmul(const float *A, const float *B, float *C, int M, int N, int K)"
                   " { this is not C }\n")
    done = eat("eval", str(MATMUL), str(bad), "--json")
    assert done.returncode == 1
    ev = json.loads(done.stdout)
    assert ev["status"] == "compile_error" and "error" in ev["message"]
    assert ev["speedup"] is None


def test_doctor_reports_peaks_as_json():
    done = eat("doctor", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["cores"] >= 1 and report["peak_gflops_1core"] > 0
    assert report["peak_gbps_1core"] > 0


@pytest.mark.parametrize("example", ["cuda_matmul", "rocm_softmax"])
def test_start_on_a_gpu_target_without_the_gpu_is_one_line_and_writes_nothing(tmp_path,
                                                                              example):
    """The machines that run the tests have no GPU: the run must not begin (no workspace)."""
    from eat.runners.base import runner_for
    from eat.target import load_target

    if runner_for(load_target(ROOT / "examples" / example)).unavailable() is None:
        pytest.skip(f"this machine can run {example}")
    done = eat("start", str(ROOT / "examples" / example), "--workspace", str(tmp_path / "ws"))
    _one_line_error(done, example, "needs the")
    assert not (tmp_path / "ws").exists()
