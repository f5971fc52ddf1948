"""The Ray executor (eat/executors/ray.py) on a real local Ray instance on 127.0.0.1.

Real: Ray (started by the run on loopback, ended with it), the CPU runner in a Ray actor, gcc,
the harness processes, the loop. Nothing is faked.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from eat.errors import BadInput
from eat.run import run_status, start_run
from eat.target import EvalConfig

ray = pytest.importorskip("ray", reason="the ray extra is not installed")
# One worker runs them all: they count Ray's daemons on the machine.
pytestmark = pytest.mark.xdist_group("ray")

ROOT = Path(__file__).resolve().parent.parent
QUICK = EvalConfig(seeds=1, warmup=1, min_repeats=3, max_repeats=5, budget_s=0.1)


def _ray_processes() -> list[str]:
    """Command lines of Ray's own daemons alive on this machine."""
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "raylet" in cmd or "gcs_server" in cmd:
                found.append(cmd[:120])
    return found


@pytest.mark.slow
def test_a_run_on_the_ray_executor_evaluates_in_an_actor_and_leaves_nothing_behind(tmp_path):
    before = _ray_processes()
    ws, stop = start_run(
        ROOT / "examples" / "cpu_matmul",
        tmp_path / "ws",
        executor="ray",
        workers=2,
        max_evals=4,
        eval_config=QUICK,
    )
    assert stop.code == "max_evals"
    st = run_status(ws)
    assert st["evaluations"] == 4 and st["best_speedup"] > 0
    assert not ray.is_initialized()
    assert _gone_but(before)


@pytest.mark.slow
def test_a_program_run_on_ray_grades_in_the_actor_and_its_best_on_held_out(tmp_path):
    ws, stop = start_run(
        ROOT / "examples" / "pendulum_policy", tmp_path / "ws", executor="ray", max_evals=4
    )
    assert stop.code == "max_evals"
    st = run_status(ws)
    assert st["evaluations"] == 4 and st["metric"] == "return" and st["best_gain"] > 0
    assert st["held_out"]["status"] == "ok"  # the split reached the runner in the actor
    assert not ray.is_initialized()


def _gone_but(before: list[str], wait_s: float = 30.0) -> bool:
    """Whether Ray's daemons other than `before` exit (they take a moment after shutdown
    returns, longer on a loaded machine: a bound on waiting, not on speed)."""
    deadline = time.monotonic() + wait_s
    while _ray_processes() != before and time.monotonic() < deadline:
        time.sleep(0.2)
    return _ray_processes() == before


def test_the_ray_executor_without_ray_says_how_to_get_it(monkeypatch):
    from eat.executors import ray as ray_executor

    monkeypatch.setitem(sys.modules, "ray", None)  # as if the extra were not installed
    with pytest.raises(BadInput, match=r"pip install 'eat\[ray\]'"):
        ray_executor._ray()


@pytest.mark.slow
def test_a_killed_run_leaves_ray_processes_the_next_ray_run_ends(tmp_path):
    """kill -9 of eat mid-run: a local instance's agents outlive it (seen on Ray 2.60); the run
    wrote its Ray processes down, and the next Ray run's start ends every one still alive."""
    import json
    import os
    import signal
    import subprocess
    import time

    from eat.executors.ray import end_leftovers
    from eat.procs import stat

    cache = tmp_path / "cache"
    env = os.environ | {"EAT_CACHE_DIR": str(cache)}
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "eat",
            "start",
            str(ROOT / "examples" / "cpu_matmul"),
            "-w",
            str(tmp_path / "ws"),
            "--executor",
            "ray",
            "--max-evals",
            "60",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    record = cache / "ray-runs" / f"{run.pid}.json"
    deadline = time.monotonic() + 240
    while not record.exists() and time.monotonic() < deadline and run.poll() is None:
        time.sleep(0.5)
    assert record.exists(), "the run did not write down its Ray processes"
    procs = json.loads(record.read_text())["procs"]
    assert procs
    os.kill(run.pid, signal.SIGKILL)
    run.wait()
    end_leftovers(cache / "ray-runs")
    time.sleep(0.5)  # SIGKILL is delivered at once; the reaping is not ours to wait for

    def running(pid: str, start: str) -> bool:  # alive, and not a zombie awaiting its reaper
        fields = stat(pid)
        return bool(fields) and fields[19] == start and fields[0] != "Z"

    assert [p for p, start in procs.items() if running(p, start)] == []
    assert not record.exists()
