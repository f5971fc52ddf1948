"""How many of eat's modules does one iteration of the loop run through?

One iteration: a team's turn that proposes, evaluates and records one candidate, from the
moment the supervisor begins it (`Turn.begin`) until it is released. The real loop runs
(start_run on examples/cpu_matmul, offline agents, one worker) with bench/overhead.py's fake
runner, which answers at once: the runner's own modules (and its child processes) are left out,
so add the runner a target uses (runners/cpu.py or python.py, with native.py, sets.py, and the
harness child) to the count, or trace it with `--real` (the CPU runner; its children are not
traced). No display is attached: `eat start` adds cli.py, whose progress display each
recorded event calls. Every Python function called in that window, on any thread, is traced;
the modules are eat's files those functions live in.

    python bench/iteration_modules.py [--turn 3] [--real] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from overhead import FakeRunner  # noqa: E402

import eat  # noqa: E402
from eat.run import start_run  # noqa: E402
from eat.turn import Turn  # noqa: E402

PACKAGE = str(Path(eat.__file__).resolve().parent)


def traced(turn_number: int, real: bool = False) -> tuple[Counter, set[str]]:
    """Calls per eat module during the `turn_number`-th turn of a short run (the target's own
    runner when `real`, else the fake one), and the modules only the watcher's thread ran."""
    from watchdog.observers.api import BaseObserver

    calls: Counter = Counter()
    turn_modules: set[str] = set()
    window = {"on": False, "turns": 0}
    begin, release = Turn.begin.__func__, Turn.release

    def profile(frame, event, arg):
        if event == "call" and window["on"]:
            path = frame.f_code.co_filename
            if path.startswith(PACKAGE):
                module = str(Path(path).relative_to(Path(PACKAGE).parent))
                calls[module] += 1
                if not isinstance(threading.current_thread(), BaseObserver):
                    turn_modules.add(module)

    def begin_traced(cls, *args, **kwargs):
        window["turns"] += 1
        window["on"] = window["turns"] == turn_number
        return begin(cls, *args, **kwargs)

    def release_traced(self):
        release(self)
        window["on"] = False

    Turn.begin = classmethod(begin_traced)
    Turn.release = release_traced
    sys.setprofile(profile)
    threading.setprofile(profile)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            start_run(
                ROOT / "examples" / "cpu_matmul",
                Path(tmp) / "ws",
                runner=None if real else FakeRunner(),
                max_evals=turn_number + 1,
                workers=1,
            )
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
        Turn.begin, Turn.release = classmethod(begin), release
    return calls, set(calls) - turn_modules


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--turn", type=int, default=3, help="which turn of the run to trace")
    ap.add_argument("--real", action="store_true", help="time candidates with the target's runner")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    calls, watcher_only = traced(args.turn, args.real)
    lines = {m: sum(1 for _ in open(Path(PACKAGE).parent / m)) for m in calls}
    if args.json:
        print(
            json.dumps(
                {
                    "modules": len(calls),
                    "without_watcher": len(calls) - len(watcher_only),
                    "lines": sum(lines.values()),
                    "calls": dict(calls.most_common()),
                }
            )
        )
        return
    for module, n in calls.most_common():
        alone = "  (the watcher's thread only)" if module in watcher_only else ""
        print(f"{module:<32} {n:>7} calls  {lines[module]:>5} lines{alone}")
    print(
        f"{len(calls)} modules, {sum(lines.values())} lines, in turn {args.turn} "
        + ("(the target's runner)" if args.real else "(the fake runner's: add the target's runner)")
        + f"; {len(calls) - len(watcher_only)} without the watcher of people's edits"
    )


if __name__ == "__main__":
    main()
