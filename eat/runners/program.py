"""The program runner: a program target's candidate graded by the target's grader.

A candidate is the target's file (its baseline's), or its files bundled, written alone into a
fresh folder. One
contained child (`python -m eat.runners.grade`) imports the grader, closes the fence and grades
the folder on seed after seed (0, 1, ...) until the metric's median is steady; the baseline is
graded on the same seeds, beside it in the same child where the grader says `paired`, else once
per session and kept. The headline is the gain: higher is better whichever the goal.
"""

from __future__ import annotations

import json
import secrets
import shutil
import statistics
import sys
import time
from pathlib import Path

from eat.runners import sandbox
from eat.runners.base import (
    VERIFIED_ONLY,
    Evaluation,
    Grade,
    HarnessError,
    eat_pythonpath,
    read_result,
    source_hash,
)
from eat.runners.cpu import cpu_model
from eat.runners.harness import rse
from eat.runners.job import GradeJob
from eat.target import TRAIN, EvalConfig, Grader, Target


def gain(score: float, base: float, goal: str) -> float | None:
    """How much better `score` is than `base` (>1: better), as a ratio of magnitudes where both
    have one sign (a return of -200 against -800 is a gain of 4), else relative to |base|."""
    better, worse = (score, base) if goal == "max" else (base, score)
    if base == 0:
        return None
    if score > 0 and base > 0:
        return better / worse
    if score < 0 and base < 0:
        return worse / better
    return 1 + (better - worse) / abs(base)


def grade_of(grades: list[dict[str, float]], metric: str) -> Grade:
    """The median and spread of the metric over the seeds, and every metric's median."""
    values = sorted(g[metric] for g in grades)
    q = (
        statistics.quantiles(values, n=4, method="inclusive")
        if len(values) > 1
        else [values[0]] * 3
    )
    medians = {k: statistics.median(g[k] for g in grades if k in g) for k in grades[0]}
    return Grade(median=statistics.median(values), iqr=q[2] - q[0], n=len(values), metrics=medians)


class ProgramRunner:
    """Runner for program targets: grades folders with the target's grader, on this machine."""

    name = "program"

    def __init__(self, **_: object):
        # The baseline's grades this session, by (grader's target, split, baseline, seed).
        self._baseline: dict[tuple[str, str, str, int], dict[str, float]] = {}

    @property
    def device(self) -> str:
        return f"cpu: {cpu_model()}"

    def unavailable(self, target: Target | None = None) -> str | None:
        return None

    def program(self, target: Target, source: str) -> str | None:
        return None  # a program is its source

    def evaluate(
        self,
        target: Target,
        source: str,
        *,
        config: EvalConfig | None = None,
        workdir: Path | None = None,
        split: str | None = None,
    ) -> Evaluation:
        """Grade `source` on `split` (the agents' split by default) against the baseline."""
        cfg, grader, split = config or target.evaluation, target.grader, split or TRAIN
        assert grader is not None, "not a program target"
        ev = dict(
            target=target.name,
            runner=self.name,
            device=self.device,
            source_hash=source_hash(source),
            metric=grader.metric,
            split=split,
        )
        try:
            files = target.unbundle(source)
            for name, text in files.items():
                if target.language == "python":
                    compile(text, name, "exec")
        except (SyntaxError, ValueError) as e:
            return Evaluation(status="compile_error", message=f"{type(e).__name__}: {e}", **ev)
        with sandbox.scratch("prog", workdir) as tmp_name:
            tmp = Path(tmp_name)
            folders = [self._folder(tmp / "candidate", files)]
            if grader.paired and cfg.timed:
                baseline = target.unbundle(target.baseline_source())
                folders.append(self._folder(tmp / "baseline", baseline))
            seeds = list(range(grader.max_seeds if cfg.timed else 1))
            t0 = time.monotonic()
            res, run = self._grade(target, cfg, tmp, folders, split, seeds, grader.min_seeds)
            durations = {"grade_s": time.monotonic() - t0}
            if res["status"] != "ok":
                return Evaluation(
                    status=res["status"],
                    message=res["message"],
                    detail=res.get("detail", {}),
                    stderr=run.stderr,
                    durations=durations,
                    **ev,
                )
            grades = res["grades"]
            score = grade_of(grades[0], grader.metric)
            if not cfg.timed:
                return Evaluation(
                    status="ok", message=VERIFIED_ONLY, score=score, durations=durations, **ev
                )
            if len(grades) > 1:
                base_grades = grades[1]
            else:
                base_grades = self._baseline_grades(target, cfg, tmp, split, len(grades[0]))
            base = grade_of(base_grades, grader.metric)
            per_seed = [
                g
                for c, b in zip(grades[0], base_grades)
                if (g := gain(c[grader.metric], b[grader.metric], grader.goal)) is not None
            ]
            durations["total_s"] = time.monotonic() - t0
        return Evaluation(
            status="ok",
            speedup=gain(score.median, base.median, grader.goal),
            score=score,
            baseline_score=base,
            # undefined where a seed's baseline scored 0
            gain_rse=rse(per_seed) if len(per_seed) == score.n else None,
            message=f"{grader.metric} {score.median:.4g} (baseline {base.median:.4g}) "
            f"over {score.n} seeds of {split}",
            stderr=run.stderr,
            durations=durations,
            **ev,
        )

    def _baseline_grades(
        self, target: Target, cfg: EvalConfig, tmp: Path, split: str, n: int
    ) -> list[dict[str, float]]:
        """The baseline's grades on seeds 0..n-1, graded once per session."""
        key = (str(target.root), split, source_hash(target.baseline_source()))
        missing = [s for s in range(n) if (*key, s) not in self._baseline]
        if missing:
            folder = self._folder(tmp / "baseline", target.unbundle(target.baseline_source()))
            res, _ = self._grade(target, cfg, tmp, [folder], split, missing, len(missing))
            if res["status"] != "ok":
                raise HarnessError(f"target {target.name}: the baseline: {res['message']}")
            for s, g in zip(missing, res["grades"][0]):
                self._baseline[(*key, s)] = g
        return [self._baseline[(*key, s)] for s in range(n)]

    @staticmethod
    def _folder(path: Path, files: dict[str, str]) -> str:
        path.mkdir()
        for name, text in files.items():
            (path / name).write_text(text)
        return str(path)

    def _grade(
        self,
        target: Target,
        cfg: EvalConfig,
        tmp: Path,
        folders: list[str],
        split: str,
        seeds: list[int],
        min_seeds: int,
    ) -> tuple[dict, sandbox.Completed]:
        grader: Grader = target.grader  # type: ignore[assignment]
        root, private = target.root.resolve(), target.root.resolve() / "private"
        if grader.command:  # a command runs after the fence closes: it gets its own copy
            root = tmp / "target"
            if not root.exists():
                shutil.copytree(target.root, root, ignore=shutil.ignore_patterns("private"))
        job: GradeJob = {
            "nonce": secrets.token_hex(16),
            "mode": "grade",
            "entry": target.name,
            "root": str(root),
            "grader": {
                "file": str(target.path(grader.file).resolve()) if grader.file else None,
                "function": grader.function,
                "command": grader.command,
            },
            "folders": folders,
            "split": split,
            "seeds": seeds,
            "min_seeds": min_seeds,
            "target_rse": grader.target_rse,
            "metric": grader.metric,
            "lock_down": not (cfg.allow_processes or grader.command),
            "confine_writes": cfg.confine_writes,
            # the target's private/ (its held-out data) whether or not a run sealed it
            "unreadable": [*target.unreadable, *([str(private)] if private.is_dir() else [])],
        }
        run = sandbox.run(
            [sys.executable, "-m", "eat.runners.grade"],
            cwd=tmp,
            env=sandbox.clean_env(tmp, {"PYTHONPATH": eat_pythonpath()}),
            limits=sandbox.Limits(
                wall_s=cfg.timeout_s,
                cpu_s=cfg.cpu_s,
                address_space_bytes=cfg.memory_mb << 20,
                max_output_chars=64_000,
            ),
            stdin=json.dumps(job),
        )
        run.stderr = sandbox.truncate(run.stderr, 4000)
        return read_result(job, run, cfg), run
