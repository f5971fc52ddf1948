"""The Ray executor: builds, verification and timing as Ray work, on this machine or a cluster.

Teams' turns stay threads of the local executor (they mostly wait on a model); what a turn
sends to Ray is its runner's evaluate(). `RayRunner` stands in for the runner: an actor holds
the real one (so its caches of input sets, builds and baseline/vendor anchors live across
evaluations), runs up to `workers` evaluations at once on its own threads, and asks Ray for
the device's resource (a GPU for CUDA and ROCm targets), so Ray places it where one is. Timing
still takes the device's slot (eat.cache.device_lock) inside the actor.

The target's folder must be readable at the same path where the actor runs (the local
machine, or a shared filesystem on a cluster). Ray is an extra (`pip install 'eat[ray]'`),
imported only here, only when `--executor ray` asks for it.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from functools import partial
from pathlib import Path

from eat.cache import cache_dir
from eat.errors import BadInput, RunnerUnavailable
from eat.procs import descendants, proc_start
from eat.runners import get_runner
from eat.runners.base import Evaluation, Runner
from eat.target import EvalConfig, Target

READY_S = 120.0  # longest wait for the actor to be placed: a resource no node has waits forever
# A local Ray instance stays on loopback, sends no usage reports and asks for no token.
_LOCAL_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_AUTH_MODE": "disabled",
}


def _ray():
    try:
        import ray
    except ImportError:
        raise BadInput("--executor ray needs Ray: pip install 'eat[ray]'") from None
    return ray


class _Evaluator:
    """The actor's body: one runner, made where the actor runs."""

    def __init__(self, make_runner: Callable[[], Runner]):
        self.runner = make_runner()

    def unavailable(self, target: Target) -> str | None:
        return self.runner.unavailable(target)

    def evaluate(
        self, target: Target, source: str, config: EvalConfig | None, **kwargs
    ) -> Evaluation:
        return self.runner.evaluate(target, source, config=config, **kwargs)

    def program(self, target: Target, source: str) -> str | None:
        return self.runner.program(target, source)


class RayRunner:
    """A runner whose evaluations run in a Ray actor (see the module's docstring)."""

    def __init__(
        self,
        target: Target,
        workers: int,
        address: str | None = None,
        make_runner: Callable[[], Runner] | None = None,
        **runner_kwargs,
    ):
        """`make_runner` (sent to the actor, so picklable) makes the runner there; default:
        the target's, with `runner_kwargs`."""
        ray = self.ray = _ray()
        self.name = target.runner
        self.started = not ray.is_initialized()
        if self.started:
            if address:
                ray.init(address=address, log_to_driver=False)
            else:
                os.environ.update({k: v for k, v in _LOCAL_ENV.items() if k not in os.environ})
                ray.init(
                    num_cpus=max(2, workers),
                    include_dashboard=False,
                    log_to_driver=False,
                    object_store_memory=128 << 20,
                )
        gpu = 1 if target.runner in ("cuda", "rocm") else 0
        actor = ray.remote(num_cpus=0, num_gpus=gpu, max_concurrency=workers)(_Evaluator)
        self.actor = actor.remote(
            make_runner or partial(get_runner, target.runner, target.language, **runner_kwargs)
        )
        ready, _ = ray.wait([self.actor.unavailable.remote(target)], timeout=READY_S)
        if not ready:
            self.close()
            raise RunnerUnavailable(
                f"Ray placed no {target.runner} evaluator within "
                f"{READY_S:g} s (does a node have a GPU?)"
            )
        self._why = ray.get(ready[0])
        if self.started and not address:
            self._leftovers = _record_local_instance()

    def unavailable(self, target: Target | None = None) -> str | None:
        return self._why

    def program(self, target: Target, source: str) -> str | None:
        """Asked where evaluations run (the compiler is there); None if it does not answer."""
        ref = self.actor.program.remote(target, source)
        ready, _ = self.ray.wait([ref], timeout=target.evaluation.compile_timeout_s + 60)
        if not ready:
            self.ray.cancel(ref, force=True)
            return None
        return self.ray.get(ready[0])

    def evaluate(
        self,
        target: Target,
        source: str,
        *,
        config: EvalConfig | None = None,
        workdir: Path | None = None,
        **kwargs,
    ) -> Evaluation:
        """`kwargs`: what the runner's own evaluate takes besides (a program's `split`)."""
        cfg = config or target.evaluation
        # Compile, verify and time each have their own limits; the wait covers them all.
        limit = cfg.compile_timeout_s + 2 * cfg.timeout_s + 600
        ref = self.actor.evaluate.remote(target, source, config, **kwargs)
        ready, _ = self.ray.wait([ref], timeout=limit)
        if not ready:
            self.ray.cancel(ref, force=True)
            raise RunnerUnavailable(f"a Ray evaluation did not return within {limit:g} s")
        return self.ray.get(ready[0])

    def close(self) -> None:
        """End the actor, and the local Ray instance if this runner started it."""
        self.ray.kill(self.actor)
        if self.started:
            self.ray.shutdown()
            if getattr(self, "_leftovers", None):
                self._leftovers.unlink(missing_ok=True)


# -- what a killed run leaves ----------------------------------------------------------------
# A kill -9 of eat takes a local instance's raylet and GCS with it, but not the agents the
# raylet started. Each run that starts a local instance writes down its processes; the next
# one ends those of runs that are gone (a resume after a crash, or any later Ray run).


def _record_local_instance() -> Path:
    """Write down this process's Ray processes; end those a killed earlier run left."""
    folder = cache_dir() / "ray-runs"
    folder.mkdir(exist_ok=True)
    end_leftovers(folder)
    me = os.getpid()
    procs = {pid: proc_start(pid) for pid in descendants(me)}
    record = folder / f"{me}.json"
    record.write_text(
        json.dumps(
            {
                "pid": me,
                "start": proc_start(me),
                "procs": {str(p): s for p, s in procs.items() if s},
            }
        )
    )
    return record


def end_leftovers(folder: Path) -> list[int]:
    """Kill the recorded Ray processes of runs no longer alive; the PIDs killed."""
    killed = []
    for record in folder.glob("*.json"):
        try:
            run = json.loads(record.read_text())
        except (OSError, ValueError):
            continue
        if proc_start(run["pid"]) == run["start"]:
            continue  # that run is still going
        for pid, start in run["procs"].items():
            if proc_start(int(pid)) == start:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                    killed.append(int(pid))
                except OSError:
                    pass
        record.unlink(missing_ok=True)
    return killed
