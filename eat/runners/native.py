"""The pipeline of native candidates: a source compiled into a shared library (C, CUDA, HIP).

build (contained, in a temp folder holding only the candidate) -> verify (fresh process) -> time
(fresh process, under the device lock, the baseline and vendor timed in the same process,
interleaved with the candidate). NativeRunner is the pipeline; a runner (CpuRunner in cpu.py,
GpuRunner in gpu.py) fills in its hooks: compiler, flags, harness, device, environment, limits.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from eat.cache import (
    anchors_dir,
    builds_dir,
    device_lock,
    intact_build,
    keep_build,
    maybe_prune,
    used,
)
from eat.runners import sandbox
from eat.runners.base import (
    VERIFIED_ONLY,
    Evaluation,
    HarnessError,
    Peaks,
    eat_pythonpath,
    read_result,
    source_hash,
    summarize,
)
from eat.runners.job import MakeSets, NativeJob, Sets
from eat.runners.sets import again_if_sets_changed, grown, input_sets, sets_detail, source_key
from eat.target import EvalConfig, Target, eval_expr

CFLAGS_LINE = re.compile(r"^\s*//\s*eat:cflags\b(.*)$", re.M)
# Flags a gcc or clang driver may take from a candidate: the C runner's, and hipcc's (clang).
CC_FLAG_OK = re.compile(
    r"-O[0-3sgz]?|-Ofast|-m[a-z0-9][a-z0-9.=_-]*|-f[a-z0-9][a-z0-9.=_-]*"
    r"|-D[A-Za-z_]\w*(=[\w.+-]*)?|-U[A-Za-z_]\w*|-std=(c|gnu)\w+|-W[\w=-]*"
    r"|-w|-g[0-3]?|-pthread"
)
CC_FLAG_DENY = re.compile(
    r"-f(plugin|use-ld|profile|dump|record|save|stack-usage|callgraph"
    r"|debug-prefix|file-prefix|macro-prefix|auto-profile|sanitize"
    r"|instrument|coverage)"
)
# Ways for a source file to pull other files of this machine into its build (and so its logs).
_FILE_READS = re.compile(r'#\s*include\s*["<]\s*(/|[^">]*\.\.)|\.incbin|#\s*embed|__has_embed')
_DEFINE = re.compile(r"#(define|undef) (\w+)")
_WORD = re.compile(r"[A-Za-z_]\w*")


def program_text(preprocessed: str) -> str:
    """What the compiler compiles, from `cc -E -P -dD` output: the code without its macro
    definitions, each pragma followed by the definitions in force of the names it holds.
    The preprocessor leaves a pragma's macros unexpanded (`#pragma GCC unroll N`), so two
    sources whose pragmas read the same may still build different programs."""
    defined: dict[str, str] = {}
    kept = []
    for line in preprocessed.splitlines():
        if m := _DEFINE.match(line):
            if m[1] == "define":
                defined[m[2]] = line
            else:
                defined.pop(m[2], None)
            continue
        kept.append(line)
        if line.lstrip().startswith("#pragma") or "_Pragma" in line:
            kept += [defined[w] for w in dict.fromkeys(_WORD.findall(line)) if w in defined]
    return "\n".join(kept)


def candidate_cflags(
    source: str, default: str, allowed: re.Pattern, denied: re.Pattern | None
) -> tuple[list[str], str | None]:
    """Flags from `// eat:cflags ...` lines (else `default`), and why they are refused, if so."""
    lines = CFLAGS_LINE.findall(source)
    flags = " ".join(lines).split() if lines else default.split()
    for f in flags:
        if not allowed.fullmatch(f) or (denied and denied.match(f)):
            return flags, f"compiler flag {f!r} is not allowed"
    return flags, None


def _first_error(log: str) -> str:
    for line in log.splitlines():
        if "error" in line:
            return line.strip()[:300]
    return (log.strip().splitlines() or ["compiler failed"])[0][:300]


@lru_cache(maxsize=8)
def compiler_version(compiler: str) -> str:
    try:
        return subprocess.run(
            [compiler, "--version"], capture_output=True, text=True, timeout=30
        ).stdout.split("\n")[0]
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def _reuse(kept: Path, dest: Path) -> str | None:
    """Copy the build kept at `kept` to `dest` and return its compile log; None when there is
    none (a prune may remove it at any moment) or it is not the file eat built there."""
    used(kept)
    try:
        shutil.copyfile(kept, dest)
    except FileNotFoundError:
        return None
    if not intact_build(kept, dest):  # the copy is checked: it is what the harness loads
        return None
    log = kept.with_suffix(".log")
    used(log)
    try:
        return log.read_text()
    except FileNotFoundError:
        return ""


class NativeRunner(ABC):
    """Build -> verify -> time for candidates compiled into a shared library (C, CUDA, HIP).

    A subclass says how its compiler is called, which flags a candidate may ask for, which
    harness module judges it and what its device is; the pipeline itself is this class.
    """

    name: str
    suffix: str  # the candidate is built from candidate<suffix>
    harness_module: str
    lock_name: str  # the timing slot: one per device
    peaks: Peaks | None
    lock_down: bool
    # How `program` has the compiler preprocess a source: the flags that write it preprocessed
    # (to -o), and the extra flags of each pass the compiler compiles it in (None: its passes
    # are not known here, and no source gets a program key).
    preprocess: tuple[str, ...] = ("-E", "-P", "-dD")
    passes: tuple[tuple[str, ...], ...] | None = ((),)

    @property
    @abstractmethod
    def device(self) -> str:
        """The device candidates run on, for reports (part of the baseline's cache key)."""

    def arch(self, target: Target) -> str | None:
        """The architecture candidates are built for, for reports; None: the compiler's default."""
        return None

    @abstractmethod
    def flags(self, source: str, default: str) -> tuple[list[str], str | None]:
        """The candidate's compiler flags, and why they are refused, if so."""

    @abstractmethod
    def compile_command(self, target: Target, src: Path, flags: list[str]) -> list[str]:
        """The command that builds `src` into src.with_suffix('.so')."""

    @abstractmethod
    def child_env(self) -> dict[str, str]:
        """Variables the compiler and the harness need beyond sandbox.clean_env's."""

    @abstractmethod
    def harness_limits(self, cfg: EvalConfig) -> sandbox.Limits:
        """The harness child's limits."""

    @abstractmethod
    def job_extra(self, job: NativeJob) -> None:
        """Set the fields this runner's harness needs in `job` (for its mode)."""

    def program(self, target: Target, source: str) -> str | None:
        """The build key of `source` preprocessed in each of the compiler's passes (`-E -P
        -dD`, then `program_text`): sources that differ only where the preprocessor erases it
        (comments, a knob whose `#if` is not taken) get one key. None where it does not
        preprocess, or is refused."""
        flags, refused = self.flags(source, target.build.cflags)
        passes = self.passes
        if passes is None or refused or _FILE_READS.search(source):
            return None
        with sandbox.scratch("prog") as tmp_name:
            src = Path(tmp_name) / f"candidate{self.suffix}"
            src.write_text(source)
            outs = [src.with_suffix(f".{i}.i") for i in range(len(passes))]

            def preprocess(i: int) -> bool:
                done = self._compile(target, src, [*flags, *passes[i]], target.evaluation, outs[i])
                return done.returncode == 0 and not done.timed_out and outs[i].is_file()

            # Each pass is its own compiler process: side by side, a key takes the slower one's
            # time, not the sum (nvcc's two: 0.27 s -> 0.16 s here).
            with ThreadPoolExecutor(len(outs)) as pool:
                if not all(pool.map(preprocess, range(len(outs)))):
                    return None
            texts = [program_text(out.read_text(errors="replace")) for out in outs]
        return self._build_key(target, "\0".join(texts), flags)

    def evaluate(
        self,
        target: Target,
        source: str,
        *,
        config: EvalConfig | None = None,
        workdir: Path | None = None,
    ) -> Evaluation:
        cfg = config or target.evaluation
        return again_if_sets_changed(lambda: self._evaluate(target, source, cfg, workdir))

    def _evaluate(
        self, target: Target, source: str, cfg: EvalConfig, workdir: Path | None
    ) -> Evaluation:
        """Refuse, build, verify, time: the first step that does not pass ends it."""
        ev: dict[str, Any] = dict(
            target=target.name,
            runner=self.name,
            device=self.device,
            arch=self.arch(target),
            source_hash=source_hash(source),
            vendor=target.vendor_name,
        )
        flags, refused = self.flags(source, target.build.cflags)
        if refused:
            return Evaluation(status="rejected", message=refused, **ev)
        if _FILE_READS.search(source):
            return Evaluation(
                status="rejected",
                message="the source reads files outside "
                "itself (absolute or parent #include, .incbin, #embed)",
                **ev,
            )
        durations: dict[str, float] = {}
        with sandbox.scratch("cand", workdir) as tmp_name:
            tmp = Path(tmp_name)
            t0 = time.monotonic()
            compile_log = self._build(target, source, flags, cfg, tmp)
            durations["compile_s"] = time.monotonic() - t0
            if isinstance(compile_log, Evaluation):  # it did not build
                return compile_log.model_copy(update=ev | {"durations": durations})
            ev |= {"compile_log": compile_log, "durations": durations}
            baseline_lib = self._baseline_lib(target, cfg)
            job = self._job(target, cfg, tmp / "candidate.so")
            t0 = time.monotonic()
            res, run = self._harness(job, tmp, cfg)
            durations["verify_s"] = time.monotonic() - t0
            if res["status"] != "ok" or not cfg.timed:
                return Evaluation(
                    status=res["status"],
                    message=res["message"] if res["status"] != "ok" else VERIFIED_ONLY,
                    detail=res.get("detail", {}),
                    stderr=run.stderr,
                    **ev,
                )
            return self._time(target, cfg, job, baseline_lib, tmp, ev)

    def _build(
        self, target: Target, source: str, flags: list[str], cfg: EvalConfig, tmp: Path
    ) -> str | Evaluation:
        """`source` built into tmp/candidate.so (or the same build reused): the compiler's
        log, or the compile_error Evaluation (its target fields left to the caller)."""
        src = tmp / f"candidate{self.suffix}"
        src.write_text(source)
        cached = builds_dir() / f"cand-{self._build_key(target, source, flags)}"
        kept, kept_log = cached.with_suffix(".so"), cached.with_suffix(".log")
        compile_log = _reuse(kept, src.with_suffix(".so"))  # same source, flags, compiler
        if compile_log is not None:
            return compile_log
        built = self._compile(target, src, flags, cfg)
        if built.returncode != 0 or built.timed_out:
            log = built.stderr or built.stdout
            msg = "compiler timed out" if built.timed_out else _first_error(log)
            return Evaluation(
                status="compile_error",
                message=msg,
                compile_log=log,
                target=target.name,
                runner=self.name,
                device=self.device,
                source_hash=source_hash(source),
            )
        kept_log.write_text(built.stderr)
        keep_build(src.with_suffix(".so"), kept)
        maybe_prune()
        return built.stderr

    def _time(
        self,
        target: Target,
        cfg: EvalConfig,
        job: NativeJob,
        baseline_lib: Path,
        tmp: Path,
        ev: dict,
    ) -> Evaluation:
        """Time the verified candidate beside the baseline or vendor (or the anchor's one of
        them), under the device's lock; keep what the anchor and the race learn."""
        anchor_key = self._anchor_key(target, cfg, baseline_lib)
        anchor = Anchor.load(anchor_key) if target.vendor else None
        timed = self._timed(job, target, cfg, anchor_key, anchor, baseline_lib)
        with device_lock(self.lock_name):
            t0 = time.monotonic()
            res, run = self._harness(timed, tmp, cfg)
            ev["durations"]["time_s"] = time.monotonic() - t0
        if res["status"] != "ok":
            return Evaluation(
                status=res["status"],
                message=res["message"],
                detail=res.get("detail", {}),
                stderr=run.stderr,
                **ev,
            )
        detail = {"extra_cpu_s": res.get("extra_cpu_s", 0.0)} | sets_detail(job["sets"], cfg)
        if res.get("raced"):
            detail["raced"] = (
                f"timed for {cfg.race_rounds} rounds only on "
                f"{'; '.join(res['raced'])}: over {RACE_MARGIN:g}x slower "
                "than the best candidate so far"
            )
        if res.get("vendor_error"):
            detail["vendor_error"] = res["vendor_error"]
        detail |= self._learn(anchor_key, anchor, res, cfg)
        summary = summarize(target, res["workloads"], self.peaks)
        return Evaluation(
            status="ok",
            message="verified and timed",
            stderr=run.stderr,
            detail=detail,
            **summary,
            **ev,
        )

    def _timed(
        self,
        job: NativeJob,
        target: Target,
        cfg: EvalConfig,
        anchor_key: str,
        anchor: Anchor | None,
        baseline_lib: Path,
    ) -> NativeJob:
        """The verify job made a time job: what is timed beside the candidate (the anchor's
        kind alone, once one is stored) and the race against the best so far."""
        timed = {anchor.kind} if anchor else {"baseline", "vendor"}
        race_kind = anchor.kind if anchor else "vendor" if target.vendor else "baseline"
        best = self._best.get(anchor_key, {}).get(race_kind)
        out = job.copy()
        out["mode"] = "time"
        out["race"] = None
        if best and cfg.race_rounds:
            ratios = [RACE_MARGIN * b for b in best]
            out["race"] = {"kind": race_kind, "rounds": cfg.race_rounds, "ratios": ratios}
        out["baseline_lib"] = str(baseline_lib) if "baseline" in timed else None
        out["vendor"] = None
        if target.vendor and "vendor" in timed:
            vendor = str(target.path(target.vendor.file).resolve())
            out["vendor"] = {"file": vendor, "function": target.vendor.function}
        self.job_extra(out)
        return out

    def _learn(self, anchor_key: str, anchor: Anchor | None, res: dict, cfg: EvalConfig) -> dict:
        """Keep the best times for the race, and the anchor: scale by a stored one, or store
        one from a run that timed both; the detail to report (the scaled workloads)."""
        self._remember_best(anchor_key, res["workloads"])
        if anchor and all(anchor.kind in t for t in res["workloads"]):
            scaled = anchor.apply(res["workloads"])
            anchor.save(anchor_key)
            return {"scaled": scaled}
        if all("baseline" in t and "vendor" in t for t in res["workloads"]):
            Anchor.measure(
                res["workloads"], cfg.warmup + cfg.min_repeats, res.get("vendor_load_s", 0.0)
            ).save(anchor_key)
        return {}

    # -- pieces ------------------------------------------------------------------------------

    def _anchor_key(self, target: Target, cfg: EvalConfig, baseline_lib: Path) -> str:
        """What an anchor holds for: the baseline build (its key names the device), the
        vendor's source, the workloads (one ratio each), the timing settings."""
        vendor = target.path(target.vendor.file).read_text() if target.vendor else ""
        return hashlib.sha256(
            "\0".join(
                [
                    str(baseline_lib),
                    vendor,
                    json.dumps(target.workloads),
                    json.dumps(target.shapes),
                    cfg.model_dump_json(),
                ]
            ).encode()
        ).hexdigest()[:16]

    @property
    def _best(self) -> dict[str, dict[str, list[float]]]:
        """Per target and timing setup, per baseline/vendor: the lowest candidate latency
        relative to it seen on each workload (what a candidate must come near to be timed out)."""
        return self.__dict__.setdefault("_best_table", {})

    def _remember_best(self, key: str, timed: list[dict]) -> None:
        best = self._best.setdefault(key, {})
        for kind in ("baseline", "vendor"):
            if all(kind in t for t in timed):
                ratios = [t["candidate"]["median_s"] / t[kind]["median_s"] for t in timed]
                best[kind] = [min(a, b) for a, b in zip(best.get(kind, ratios), ratios)]

    def _build_key(self, target: Target, source: str, flags: list[str]) -> str:
        """Everything a build depends on: source, command, compiler, device (its arch), env."""
        cmd = self.compile_command(target, Path(f"candidate{self.suffix}"), flags)
        key = hashlib.sha256(
            "\0".join(
                [
                    source,
                    *cmd,
                    compiler_version(cmd[0]),
                    self.device,
                    *sorted(f"{k}={v}" for k, v in self.child_env().items()),
                ]
            ).encode()
        )
        return key.hexdigest()[:16]

    def _compile(
        self, target: Target, src: Path, flags: list[str], cfg: EvalConfig, out: Path | None = None
    ) -> sandbox.Completed:
        """Build `src` (into `out` with `self.preprocess`: preprocess it there)."""
        limits = sandbox.Limits(
            wall_s=cfg.compile_timeout_s,
            cpu_s=int(cfg.compile_timeout_s),
            address_space_bytes=cfg.memory_mb << 20,
        )
        cmd = self.compile_command(target, src, flags)
        if out is not None:
            cmd[cmd.index("-o") + 1] = str(out)
            cmd += self.preprocess
        return sandbox.run(
            cmd,
            cwd=src.parent,
            env=sandbox.clean_env(src.parent, self.child_env()),
            limits=limits,
        )

    def _baseline_lib(self, target: Target, cfg: EvalConfig) -> Path:
        source = target.baseline_source()
        flags, refused = self.flags(source, target.build.cflags)
        if refused:
            raise HarnessError(f"{target.baseline.file}: {refused}")
        return self._kept_lib(
            target,
            cfg,
            f"{target.name}-baseline",
            source,
            flags,
            f"{target.baseline.file} does not compile",
        )

    def _kept_lib(
        self,
        target: Target,
        cfg: EvalConfig,
        name: str,
        source: str,
        flags: list[str],
        failure: str,
    ) -> Path:
        """`source` built once per (source, command, compiler, device, env) into the builds
        folder, and again whenever the file there is not the one built; HarnessError(`failure`:
        the compiler's first error) when it does not build."""
        lib = builds_dir() / f"{name}-{self._build_key(target, source, flags)}.so"
        used(lib)  # a prune spares it while evaluations load it
        if not intact_build(lib):  # missing, changed since, or not eat's: replaced by a build
            # Built beside the builds: what a crash leaves there is a `.part` that prune removes.
            with tempfile.TemporaryDirectory(prefix="base-", suffix=".part", dir=lib.parent) as tmp:
                src = Path(tmp) / f"candidate{self.suffix}"
                src.write_text(source)
                built = self._compile(target, src, flags, cfg)
                if built.returncode != 0:
                    raise HarnessError(f"{failure}: {_first_error(built.stderr)}")
                keep_build(src.with_suffix(".so"), lib)  # atomic: racing builders agree
            maybe_prune()
        return lib

    def support_libs(self, target: Target, cfg: EvalConfig, job: NativeJob) -> None:  # noqa: B027
        """Name in `job` the libraries the harness needs besides the candidate (built here);
        none but the candidate's by default."""

    def _job(self, target: Target, cfg: EvalConfig, lib: Path) -> NativeJob:
        workloads = [
            {
                "params": w,
                "shapes": {
                    n: [int(eval_expr(d, w)) for d in dims] for n, dims in target.shapes.items()
                },
            }
            for w in target.workloads
        ]
        entry, ref, tolerance = target.kernel
        make: MakeSets = {
            "args": [a.model_dump() for a in target.args],
            "workloads": workloads,
            "reference": {
                "file": str(target.path(ref.file).resolve()),
                "function": ref.function,
                "inputs": ref.inputs,
            },
            "config": cfg.model_dump(),
        }
        job: NativeJob = {
            "nonce": secrets.token_hex(16),
            "mode": "verify",
            "entry": entry.name,
            "args": make["args"],
            "workloads": workloads,
            "reference": make["reference"],
            "tolerance": tolerance.model_dump(),
            "config": make["config"],
            "candidate_lib": str(lib),
            "lock_down": self.lock_down,
            "confine_writes": cfg.confine_writes,
            "unreadable": target.unreadable,
            "sets": self._input_sets(target, make),
        }
        self.job_extra(job)
        self.support_libs(target, cfg, job)
        return job

    def _input_sets(self, target: Target, make: MakeSets) -> Sets:
        """Where this target's input sets are and their fingerprints; made by a child on first
        use."""
        return input_sets(
            target.name,
            [
                *source_key(make["reference"], target.root),
                {"args": make["args"], "workloads": make["workloads"]},
            ],
            make,
            [sys.executable, "-m", "eat.runners.inputs"],
        )

    def _harness(
        self, job: NativeJob, tmp: Path, cfg: EvalConfig
    ) -> tuple[dict, sandbox.Completed]:
        env = sandbox.clean_env(tmp, self.child_env() | {"PYTHONPATH": eat_pythonpath()})
        run = sandbox.run(
            [sys.executable, "-m", self.harness_module],
            cwd=tmp,
            env=env,
            limits=grown(self.harness_limits(cfg), job["sets"], cfg, job["mode"]),
            stdin=json.dumps(job),
        )
        run.stderr = sandbox.truncate(run.stderr, 4000)
        return read_result(job, run, cfg), run


RACE_MARGIN = 2.0  # a workload's candidate this many times slower than the best is timed out


@dataclass
class Anchor:
    """Baseline and vendor latencies per workload, from one timing run that timed both.

    Until it is measured again, evaluations time the candidate beside the cheaper of the two
    only (`kind`, the anchor: the one whose calls, plus its loading where that is slow, as
    torch's import is, cost less) and scale the other's time by the ratio measured: a slow naive
    baseline, or a vendor that needs torch imported, is timed once per RECHECK evaluations
    instead of every time, and the anchor, timed beside every candidate, carries what the
    machine's state does to both. Measured again after RECHECK uses, as soon as the anchor's
    time moves by more than DRIFT from when it was measured, or once it is MAX_AGE_S old.
    Kept in the cache folder (anchors/), so runs and `eat eval` calls after the first share it.
    """

    RECHECK = 10
    DRIFT = 0.3
    MAX_AGE_S = 24 * 3600
    kind: str  # "baseline" or "vendor": the one still timed
    then: list[dict]  # per workload, both Stat dicts as measured
    uses: int = 0
    stale: bool = False
    measured_at: float = 0.0

    @classmethod
    def measure(cls, timed: list[dict], calls: int, vendor_load_s: float) -> Anchor:
        """From a run that timed both; `calls` per workload, what loading the vendor took."""
        cost = {k: calls * sum(t[k]["median_s"] for t in timed) for k in ("baseline", "vendor")}
        cost["vendor"] += vendor_load_s
        return cls(
            kind=min(cost, key=cost.__getitem__),
            measured_at=time.time(),
            then=[{k: t[k] for k in ("baseline", "vendor")} for t in timed],
        )

    @classmethod
    def load(cls, key: str) -> Anchor | None:
        """The anchor kept under `key`, unless it is stale or unreadable."""
        try:
            anchor = cls(**json.loads((anchors_dir() / f"{key}.json").read_text()))
        except (OSError, ValueError, TypeError):
            return None
        fresh = not anchor.stale and time.time() - anchor.measured_at < cls.MAX_AGE_S
        return anchor if fresh else None

    def save(self, key: str) -> None:
        """Keep it for later evaluations, or drop it once stale (atomically either way)."""
        path = anchors_dir() / f"{key}.json"
        if self.stale:
            path.unlink(missing_ok=True)
            return
        part = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}")
        part.write_text(json.dumps(asdict(self)))
        os.replace(part, path)

    @property
    def other(self) -> str:
        return "vendor" if self.kind == "baseline" else "baseline"

    def apply(self, timed: list[dict]) -> str:
        """Fill in each workload's untimed side from its anchor; says how, for the record."""
        self.uses += 1
        for t, then in zip(timed, self.then):
            scale = t[self.kind]["median_s"] / then[self.kind]["median_s"]
            self.stale |= abs(scale - 1) > self.DRIFT
            was = then[self.other]
            t[self.other] = was | {
                "median_s": was["median_s"] * scale,
                "iqr_s": was["iqr_s"] * scale,
            }
        self.stale |= self.uses >= self.RECHECK
        return (
            f"the {self.other}'s time is the {self.kind}'s scaled by their ratio, measured "
            f"{self.uses} evaluation(s) earlier"
        )
