"""The fake GPU runtime of the tests (fakert.c) and the compiler that goes with it (fake-gpucc).

Neither is a GPU: the "device" is host memory, and candidates built by fake-gpucc are plain C++.
They let the GPU runner's pipeline run on machines without a GPU; see tests/test_gpu_runner.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from eat.cache import cache_dir
from eat.runners.gpurt import ENV

HERE = Path(__file__).parent
COMPILER = HERE / "fake-gpucc"
_VARIANTS = {"cuda": [], "hip": ["-DFAKE_HIP"], "no_device": ["-DFAKE_NO_DEVICE"]}


def build_runtime(variant: str = "cuda") -> Path:
    """fakert.c built with gcc into eat's cache folder (the test session's), once."""
    if not shutil.which("gcc"):
        pytest.skip("the fake GPU runtime needs gcc")
    out = cache_dir() / "fake_gpu" / f"fakert_{variant}.so"
    if not out.exists():
        out.parent.mkdir(exist_ok=True)
        tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
        subprocess.run(
            [
                "gcc",
                "-shared",
                "-fPIC",
                "-O2",
                *_VARIANTS[variant],
                "-o",
                str(tmp),
                str(HERE / "fakert.c"),
                "-lpthread",
            ],
            check=True,
        )
        os.replace(tmp, out)
    return out


def runtime_env() -> dict[str, str]:
    """The environment that points eat's GPU runner at the fake CUDA runtime."""
    return {ENV: str(build_runtime("cuda"))}
