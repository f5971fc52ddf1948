"""eat doctor and GPU peaks on a machine without a GPU: reported as absent, never raised, never
hung on; cached per GPU when measured (the measurement itself replaced by a stub); the CUDA peak
program compiles."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from eat import doctor
from eat.cache import doctor_file
from eat.runners.base import Peaks

CPU_PEAKS = Peaks(gflops=10.0, gbps=5.0)
GPU = {"name": "NVIDIA Test", "driver": "999.1", "uuid": "GPU-1111"}


def fake_tool(bin_dir: Path, name: str, script: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(0o755)


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """An empty doctor cache, and CPU peaks that cost nothing to measure."""
    monkeypatch.setenv("EAT_CACHE_DIR", str(tmp_path / "cache"))
    measured = []
    monkeypatch.setattr(doctor, "measure_peaks", lambda: measured.append(1) or CPU_PEAKS)
    return measured


def test_without_nvidia_smi_there_are_no_gpu_peaks(tmp_path, monkeypatch, fresh_cache):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert doctor.load_peaks("cuda") is None
    report = doctor.machine_report()
    assert report["nvidia_gpu"] is None and report["peak_gbps_gpu"] is None
    assert "nvidia-smi not found" in report["gpu_peaks_note"]


def test_a_driver_without_gpu_is_reported_and_the_cpu_still_measured(
    tmp_path, monkeypatch, fresh_cache
):
    fake_tool(
        tmp_path / "bin",
        "nvidia-smi",
        "echo \"NVIDIA-SMI has failed because it couldn't "
        'communicate with the NVIDIA driver."; exit 9',
    )
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    report = doctor.machine_report()
    assert report["nvidia_gpu"] is None and report["peak_gflops_gpu"] is None
    assert "couldn't communicate" in report["gpu_peaks_note"]
    assert report["peak_gflops_1core"] == CPU_PEAKS.gflops


def test_a_hanging_nvidia_smi_is_given_up_on(tmp_path, monkeypatch):
    fake_tool(tmp_path / "bin", "nvidia-smi", "exec sleep 60")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    assert doctor.nvidia_gpus(timeout_s=0.5) == ([], "nvidia-smi did not answer within 0.5 s")


def test_gpu_peaks_are_cached_per_gpu_next_to_the_cpu_peaks(tmp_path, monkeypatch, fresh_cache):
    fake_tool(tmp_path / "bin", "nvcc", "exit 1")  # present; the stub below measures instead
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    gpus = [dict(GPU)]
    monkeypatch.setattr(doctor, "nvidia_gpus", lambda: (gpus, None))
    runs = []

    def measure():
        runs.append(1)
        return "NVIDIA Test", Peaks(gflops=50_000.0 + len(runs), gbps=4_000.0)

    monkeypatch.setattr(doctor, "measure_gpu_peaks", measure)
    assert doctor.load_peaks("cpu") == CPU_PEAKS
    assert doctor.load_peaks("cuda").gflops == 50_001.0
    assert doctor.load_peaks("cuda").gflops == 50_001.0 and len(runs) == 1  # cached
    assert doctor.load_peaks("cpu") == CPU_PEAKS and len(fresh_cache) == 1  # both kept
    data = json.loads(doctor_file().read_text())
    assert data["cuda"]["device"] == "NVIDIA Test" and data["peaks"] == CPU_PEAKS.model_dump()

    gpus[0]["uuid"] = "GPU-2222"  # another GPU in the machine
    assert doctor.load_peaks("cuda").gflops == 50_002.0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # another device 0
    assert doctor.load_peaks("cuda", measure=False) is None
    assert doctor.load_peaks("cuda").gflops == 50_003.0
    assert doctor.load_peaks("cuda", refresh=True).gflops == 50_004.0
    assert len(runs) == 4

    def broken():
        raise RuntimeError("the peak program failed: no CUDA-capable device is detected")

    monkeypatch.setattr(doctor, "measure_gpu_peaks", broken)
    assert doctor.gpu_peaks(refresh=True) == (
        None,
        "the peak program failed: no CUDA-capable device is detected",
    )
    assert doctor.load_peaks("cuda").gflops == 50_004.0  # a failure does not erase the cache


def test_parse_gpu_peaks():
    assert doctor.parse_gpu_peaks("device NVIDIA H200\ngbps 4321.0\ngflops 61234.5\n") == (
        "NVIDIA H200",
        Peaks(gflops=61234.5, gbps=4321.0),
    )
    with pytest.raises(RuntimeError, match="unexpected output"):
        doctor.parse_gpu_peaks("device NVIDIA H200\n")


needs_nvcc = pytest.mark.skipif(not shutil.which("nvcc"), reason="nvcc not found on PATH")


@needs_nvcc
def test_gpu_peak_program_compiles(tmp_path):
    src = tmp_path / "peaks.cu"
    src.write_text(doctor.GPU_PEAKS_CU)
    done = subprocess.run(
        ["nvcc", "--ptx", "-arch=sm_90", "-o", str(tmp_path / "peaks.ptx"), str(src)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    ptx = (tmp_path / "peaks.ptx").read_text()
    assert "fma.rn.f32" in ptx  # the FMA chain survived optimization
    assert re.search(r"ld\.global(\.nc)?\.v4\.f32", ptx)  # the triad moves 16-byte vectors


@needs_nvcc
def test_a_gpu_that_cannot_run_gives_a_reason_not_an_error(tmp_path, monkeypatch, fresh_cache):
    """A listed GPU and the real nvcc: here the program builds and then fails to start (no
    driver); on a machine with a GPU it measures."""
    fake_tool(
        tmp_path / "bin", "nvidia-smi", f"echo '{GPU['name']}, {GPU['driver']}, {GPU['uuid']}'"
    )
    monkeypatch.setenv(
        "PATH", f"{tmp_path / 'bin'}:{Path(shutil.which('nvcc')).parent}:/usr/bin:/bin"
    )
    peaks, why = doctor.gpu_peaks()
    if peaks is None:
        assert "peak program" in why or "nvcc" in why, why
        assert doctor.load_peaks("cuda") is None
    else:
        assert peaks.gbps > 0 and peaks.gflops > 0 and why is None


@needs_nvcc
def test_doctor_names_the_arch_the_gpu_runner_builds_for(monkeypatch, fresh_cache):
    """The arch comes from the runner's probe: here the fake runtime of tests/fake_gpu, which
    says compute capability 9.0; the real nvcc knows sm_90a."""
    import fake_gpu

    monkeypatch.setenv(*next(iter(fake_gpu.runtime_env().items())))
    monkeypatch.setattr(doctor, "nvidia_gpus", lambda: ([dict(GPU)], None))
    monkeypatch.setattr(
        doctor, "measure_gpu_peaks", lambda: ("NVIDIA Test", Peaks(gflops=1.0, gbps=1.0))
    )
    report = doctor.machine_report()
    assert report["nvidia_gpu"] == "NVIDIA Test" and report["gpu_arch"] == "sm_90a"
