"""The GPU runner: CUDA C++ candidates built with nvcc, HIP C++ candidates built with hipcc.

Candidate contract. One file, `.cu` (CUDA) or `.hip` (HIP), defining

    extern "C" void NAME(<the target's C signature>)

a host function whose pointer arguments are *device* pointers to buffers of the shapes the
target declares (`const T *` inputs, `T *` outputs). It launches its kernels on any stream and
may return before they finish: the harness synchronizes the whole device after every call. Work
still running, or launched, after that (a host thread left behind) is caught: the outputs are
read again after a delay and must not have changed. `// eat:cflags ...` lines replace the
target's flags, from an allow-list (-O0..3, -use_fast_math, -D/-U, -lineinfo, -maxrregcount=N,
-Xptxas=-v, -std=c++17, -ftz=, -prec-div= ...; options with a value are written with `=`).
The architecture is the target's ([build] arch, else the GPU's own), not the candidate's.

The GPU's own arch comes from the probe, not from `-arch=native` (the contained build sees no
GPU): for CUDA `sm_XY` from the compute capability, `sm_XYa` from 9.0 on (the arch-specific
features a tuned Hopper or Blackwell kernel uses: wgmma, TMA, tcgen05) where the nvcc found
knows it; for a GPU newer than nvcc, PTX of the newest virtual arch nvcc knows (`compute_XY`,
compiled by the driver at load); for HIP the device's gfx name (gcnArchName, without its
feature flags). Evaluation.arch says which.

build: `nvcc -shared -Xcompiler -fPIC -cudart shared -arch=ARCH` (hipcc: `-shared -fPIC
--offload-arch=ARCH`),
contained -> verify and time: `python -m eat.runners.gpu_harness` (device buffers, poison by
memset, device-wide synchronize, events; see there), timing under one lock per GPU. The pipeline
is NativeRunner's (native.py). `device` picks one of the visible GPUs; the children see only that
one (CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES), as their device 0.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

from eat.errors import BadInput, RunnerUnavailable
from eat.runners import gpurt, sandbox
from eat.runners.base import Peaks, eat_pythonpath
from eat.runners.job import NativeJob
from eat.runners.native import CC_FLAG_DENY, CC_FLAG_OK, NativeRunner, candidate_cflags
from eat.target import Build, EvalConfig, Target

_SUFFIX = {"cuda": ".cu", "rocm": ".hip"}
_VISIBLE = {"cuda": "CUDA_VISIBLE_DEVICES", "rocm": "HIP_VISIBLE_DEVICES"}
# What the toolchains and runtimes read from the environment; sandbox.clean_env drops the rest.
_PASS_ENV = (
    "LD_LIBRARY_PATH",
    "CUDA_HOME",
    "CUDA_PATH",
    "ROCM_PATH",
    "HIP_PATH",
    "HIP_PLATFORM",
    "ROCR_VISIBLE_DEVICES",
)
_NVCC_OK = re.compile(
    r"-O[0-3]|-D[A-Za-z_]\w*(=[\w.+-]*)?|-U[A-Za-z_]\w*|-std=c\+\+(11|14|17|20)|-w"
    r"|--?use_fast_math|--?lineinfo|--?maxrregcount=\d+|--?restrict|--extra-device-vectorization"
    r"|--?(ftz|prec-div|prec-sqrt|fmad)=(true|false)"
    r"|--expt-relaxed-constexpr|--expt-extended-lambda|--extended-lambda"
    r"|-Xptxas=(-v|-O[0-3]|--warn-on-spills)(,(-v|-O[0-3]|--warn-on-spills))*"
    r"|-Xcompiler=(-O[0-3]|-march=native|-ffast-math)"
)
# hipcc is clang: the C compiler's allow-list (and deny-list), with C++ standards.
_HIPCC_OK = re.compile(CC_FLAG_OK.pattern + r"|-std=(c|gnu)\+\+\w+")
_PROBE_S = 60.0
_CHECK_SOURCE = Path(__file__).with_name("device_check.cu")


class GpuRunner(NativeRunner):
    """Runner for CUDA (`name` "cuda") or HIP (`name` "rocm") candidates on one GPU."""

    harness_module = "eat.runners.gpu_harness"

    def __init__(
        self,
        name: str,
        peaks: Peaks | None = None,
        device: int = 0,
        lock_down: bool = True,
        runtime: str | None = None,
    ):
        if name not in _SUFFIX:
            raise BadInput(f"the GPU runner runs cuda or rocm, not {name!r}")
        self.name, self.peaks, self.index, self.lock_down = name, peaks, device, lock_down
        self.suffix = _SUFFIX[name]
        self.api = gpurt.API[name]
        self.runtime = runtime or os.environ.get(gpurt.ENV)  # None: the usual library names
        self.lock_name = f"{name}{device}"
        if name == "cuda":
            # `nvcc -E` writes the device pass alone (__CUDA_ARCH__ set); the same without it
            # is the host pass, so code that either pass leaves out still tells programs apart.
            self.preprocess = ("-E", "-Xcompiler", "-P", "-Xcompiler", "-dD")
            self.passes = ((), ("-U__CUDA_ARCH__", "-UCUDA_DOUBLE_MATH_FUNCTIONS"))
        else:
            self.passes = None  # hipcc's -E, not checked on a machine with hipcc

    # -- what is here ---------------------------------------------------------------------

    def _device_env(self) -> dict[str, str]:
        env = {k: os.environ[k] for k in _PASS_ENV if k in os.environ}
        visible = [
            x.strip() for x in os.environ.get(_VISIBLE[self.name], "").split(",") if x.strip()
        ]
        if visible:  # our index counts among the GPUs the user left visible; -1: none
            env[_VISIBLE[self.name]] = visible[self.index] if self.index < len(visible) else "-1"
        else:
            env[_VISIBLE[self.name]] = str(self.index)
        if self.name == "rocm":
            env.setdefault("HIP_PLATFORM", "amd")  # hipcc builds for NVIDIA when it sees nvcc
        return env

    def _info(self) -> dict:
        return probe(self.name, self.runtime, tuple(sorted(self._device_env().items())))

    def unavailable(self, target: Target | None = None) -> str | None:
        compiler = (target.build if target else Build()).compiler_for(self.name)
        if not shutil.which(compiler):
            return f"{self.api} compiler {compiler!r} not found on PATH"
        return self._info().get("reason")

    @property
    def device(self) -> str:
        return f"{self.name}:{self.index} {self._info().get('name', '(unavailable)')}"

    # -- NativeRunner's hooks --------------------------------------------------------------

    def flags(self, source: str, default: str) -> tuple[list[str], str | None]:
        if self.name == "cuda":
            return candidate_cflags(source, default, _NVCC_OK, None)
        return candidate_cflags(source, default, _HIPCC_OK, CC_FLAG_DENY)

    def arch(self, target: Target) -> str | None:
        """The target's [build] arch, else this GPU's (device_arch)."""
        return target.build.arch or self.device_arch(target.build.compiler_for(self.name))

    def device_arch(self, compiler: str | None = None) -> str | None:
        """This GPU's arch as `compiler` (nvcc, hipcc by default) names it (see the module's
        docstring); None where the probe cannot tell (the build then asks for `native`)."""
        info = self._info()
        if self.name == "cuda":
            cc, compiler = info.get("compute_capability"), compiler or "nvcc"
            if not cc:  # the probe's [major, minor], where it could tell
                return None
            major, minor = cc
            return cuda_arch(
                major,
                minor,
                accepts=lambda arch: nvcc_accepts(compiler, arch),
                known=lambda: nvcc_virtual_archs(compiler),
            )
        gcn = info.get("gcn_arch")
        return gcn and gcn.split(":")[0]  # feature flags left out: code for either xnack mode

    def program(self, target: Target, source: str) -> str | None:
        """NativeRunner.program's key, where this nvcc's `-E` writes the device pass as the
        key's two passes assume (nvcc 13's does); else None, as for HIP."""
        compiler, arch = target.build.compiler_for(self.name), self.arch(target) or "native"
        if self.name == "cuda" and not nvcc_preprocesses_device(compiler, arch):
            return None
        return super().program(target, source)

    def compile_command(self, target: Target, src: Path, flags: list[str]) -> list[str]:
        cc, arch = target.build.compiler_for(self.name), self.arch(target) or "native"
        out = str(src.with_suffix(".so"))
        if self.name == "cuda":
            # -cudart shared: the candidate uses the runtime the harness loaded, not a static
            # copy of its own with separate state.
            return [
                cc,
                "-shared",
                "-Xcompiler",
                "-fPIC",
                "-cudart",
                "shared",
                f"-arch={arch}",
                *flags,
                "-o",
                out,
                str(src),
            ]
        return [cc, "-shared", "-fPIC", f"--offload-arch={arch}", *flags, "-o", out, str(src)]

    def child_env(self) -> dict[str, str]:
        # The runtime the probe found, so the harness loads the very same library.
        library = self._info().get("library")
        return self._device_env() | ({gpurt.ENV: library} if library else {})

    def harness_limits(self, cfg: EvalConfig) -> sandbox.Limits:
        return sandbox.Limits(
            wall_s=cfg.timeout_s,
            cpu_s=cfg.cpu_s,
            address_space_bytes=None,
            data_bytes=cfg.memory_mb << 20,
            max_output_chars=64_000,
        )

    def support_libs(self, target: Target, cfg: EvalConfig, job: NativeJob) -> None:
        # The harness's device-side checks (device_check.cu), for this device's arch.
        flags = ["-O3", "-fmad=false"] if self.name == "cuda" else ["-O3", "-ffp-contract=off"]
        job["check_lib"] = str(
            self._kept_lib(
                target,
                cfg,
                f"device-check-{self.name}",
                _CHECK_SOURCE.read_text(),
                flags,
                "eat's device checks (device_check.cu) do not build",
            )
        )

    def job_extra(self, job: NativeJob) -> None:
        info = self._info()
        if "reason" in info:  # reached only past compiling: nothing ran on a device yet
            raise RunnerUnavailable(f"the {self.name} runner cannot run here: {info['reason']}")
        job["gpu"] = self.name
        job["runtime"] = info["library"]
        job["flush_bytes"] = 2 * (info["l2_bytes"] or 64 << 20)


def cuda_arch(
    major: int, minor: int, accepts: Callable[[str], bool], known: Callable[[], list[int]]
) -> str:
    """nvcc's -arch for a device of compute capability major.minor: `sm_XYa` from 9.0 on where
    `accepts` it, else `sm_XY`; for a device newer than the compiler, `compute_N` of the newest
    virtual arch it knows (`known()`: the N of its compute_N) at or below the device's; else
    `sm_XY`, and nvcc says what is wrong."""
    sm = f"sm_{major}{minor}"
    for arch in ([f"{sm}a"] if major >= 9 else []) + [sm]:
        if accepts(arch):
            return arch
    older = [n for n in known() if n <= major * 10 + minor]
    return f"compute_{max(older)}" if older else sm


@lru_cache(maxsize=64)
def nvcc_accepts(compiler: str, arch: str) -> bool:
    """Whether this nvcc builds for `arch` (a dry run: it checks the arch, compiles nothing)."""
    with sandbox.scratch("arch") as tmp:
        try:
            done = subprocess.run(
                [compiler, "--dryrun", f"-arch={arch}", "-c", "probe.cu", "-o", "probe.o"],
                cwd=tmp,
                capture_output=True,
                timeout=60,
            )
        except (OSError, subprocess.TimeoutExpired):
            return False
    return done.returncode == 0


@lru_cache(maxsize=64)
def nvcc_preprocesses_device(compiler: str, arch: str) -> bool:
    """Whether this nvcc's `-E` writes the device pass (__CUDA_ARCH__ set) for `arch`."""
    with sandbox.scratch("pass") as tmp:
        Path(tmp, "probe.cu").write_text("#ifdef __CUDA_ARCH__\neat_device_pass\n#endif\n")
        try:
            done = subprocess.run(
                [compiler, "-E", f"-arch={arch}", "probe.cu"],
                cwd=tmp,
                capture_output=True,
                text=True,
                timeout=60,
            )
        except (OSError, subprocess.TimeoutExpired):
            return False
    return done.returncode == 0 and "eat_device_pass" in done.stdout


@lru_cache(maxsize=8)
def nvcc_virtual_archs(compiler: str) -> list[int]:
    """The N of every compute_N `nvcc --list-gpu-arch` names (none if it cannot say)."""
    try:
        done = subprocess.run(
            [compiler, "--list-gpu-arch"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return (
        [int(n) for n in re.findall(r"\bcompute_(\d+)\b", done.stdout)]
        if done.returncode == 0
        else []
    )


@lru_cache(maxsize=16)
def probe(kind: str, runtime: str | None, env: tuple[tuple[str, str], ...]) -> dict:
    """gpurt.describe() run in a short child, once per process and setting.

    A child, because a broken driver can hang or crash its caller; under the harness's memory
    limit, so a runtime that cannot start under it is reported here rather than as a crash.
    """
    with sandbox.scratch("gpu-probe") as tmp:
        cmd = [sys.executable, "-m", "eat.runners.gpurt", kind] + ([runtime] if runtime else [])
        limits = sandbox.Limits(
            wall_s=_PROBE_S,
            cpu_s=int(_PROBE_S),
            address_space_bytes=None,
            data_bytes=EvalConfig().memory_mb << 20,
        )
        run = sandbox.run(
            cmd,
            cwd=Path(tmp),
            limits=limits,
            env=sandbox.clean_env(Path(tmp), dict(env) | {"PYTHONPATH": eat_pythonpath()}),
        )
    for line in run.stdout.splitlines():
        if line.startswith(gpurt.PROBE_TAG):
            return json.loads(line[len(gpurt.PROBE_TAG) :])
    api = gpurt.API[kind]
    if run.timed_out:
        return {
            "reason": f"the {api} runtime did not answer within {_PROBE_S:g} s (a hung driver?)"
        }
    how = f"killed by {run.signal_name}" if run.signal_name else f"exit code {run.returncode}"
    tail = (run.stderr.strip().splitlines() or [""])[-1][:200]
    return {"reason": f"the {api} runtime probe failed ({how}) {tail}".strip()}
