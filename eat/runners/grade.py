"""The grading child: a program target's grader and its candidate in one contained process.

The grader's module is imported first, while files beneath the target's private/ can still be
read (its held-out data); then the fence closes (writes only in this folder, nothing beneath
private/ readable, no network, no processes) and the grader scores each folder on seed after
seed, until the metric's median is steady. One tagged line reports the grades.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

from eat.runners.harness import Outcome, rse, serve
from eat.runners.inputs import load_py
from eat.runners.job import GradeJob


def _setup(job: GradeJob):
    grader = job["grader"]
    if grader["file"] is None:
        return None
    sys.path.insert(0, job["root"])  # the grader's own helpers beside it
    module = load_py(grader["file"], "grader")
    return getattr(module, grader["function"])


def _command(job: GradeJob, folder: str, seed: int) -> object:
    cmd = [*(job["grader"]["command"] or []), folder, job["split"], str(seed)]
    out = subprocess.run(cmd, cwd=job["root"], capture_output=True, text=True)
    sys.stderr.write(out.stderr[-2000:])
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or [""])[-1][:300]
        raise Outcome("crash", f"the grader command exited with {out.returncode}: {last}")
    lines = out.stdout.strip().splitlines()
    try:
        return json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        raise Outcome("crash", f"the grader printed no JSON object: {lines[-1][:200]!r}") from None


def _metrics(job: GradeJob, got: object) -> dict[str, float]:
    if not isinstance(got, dict):
        raise Outcome("crash", f"the grader returned {type(got).__name__}, not a dict of metrics")
    if job["metric"] not in got:
        raise Outcome("crash", f"the grader's result lacks the metric {job['metric']!r}")
    out = {}
    for key, value in got.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue  # other facts a grader reports are not metrics
        if not math.isfinite(value):
            raise Outcome("crash", f"the grader's {key} is {value}")
        out[str(key)] = float(value)
    if job["metric"] not in out:
        raise Outcome("crash", f"the grader's {job['metric']} is not a number")
    return out


def _hidden(job: GradeJob, path: object) -> bool:
    """Whether `path` lies beneath a folder the candidate may not read (held-out data)."""
    real = os.path.realpath(str(path)) if path else ""
    return any(real.startswith(os.path.realpath(u) + os.sep) for u in job["unreadable"])


def _check(job: GradeJob, grade) -> dict:
    grades: list[list[dict[str, float]]] = [[] for _ in job["folders"]]
    pairs = list(enumerate(zip(job["folders"], grades)))
    for k, seed in enumerate(job["seeds"]):
        # a rotating order, as in timing: whoever goes first (cold caches, the other's garbage
        # collected) is not always the candidate
        for i, (folder, kept) in pairs[k % len(pairs) :] + pairs[: k % len(pairs)]:
            try:
                got = grade(folder, job["split"], seed) if grade else _command(job, folder, seed)
                kept.append(_metrics(job, got))
            except Exception as e:
                if i:  # the baseline beside it: the target is broken, not the candidate
                    why = e.message if isinstance(e, Outcome) else f"{type(e).__name__}: {e}"
                    return {"status": "harness_error", "message": f"the baseline: {why}"[:300]}
                if isinstance(e, PermissionError) and _hidden(job, e.filename):
                    why = f"the candidate read {e.filename}, which is hidden"
                    raise Outcome("rejected", why) from None
                if isinstance(e, AssertionError):
                    why = f"seed {seed}: {e or 'the grader check failed'}"
                    raise Outcome("incorrect", why[:300]) from None
                raise
        n = len(grades[0])
        if n >= job["min_seeds"] and all(
            rse([g[job["metric"]] for g in kept]) < job["target_rse"] for kept in grades
        ):
            break
    return {"status": "ok", "message": "graded", "grades": grades}


if __name__ == "__main__":
    serve(_setup, _check)
