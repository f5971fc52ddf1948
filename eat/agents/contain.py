"""`python -m eat.agents.contain [--fence JSON] CMD...`: run an agent's command so that none of
it outlives eat, and, with a fence (eat.agents.fence.Fence), none of it writes or reads past it.

eat starts this in a new session (so it leads its process group) with SIGTERM as its
parent-death signal. It makes itself a child subreaper (orphans of the agent come back to it,
even those that left the group with setsid), starts CMD, and when CMD exits, or eat asks
(SIGTERM), or eat dies (the same SIGTERM, from the kernel), it kills every process below it and
in its group, then exits with CMD's status. The fence takes hold in this process before CMD
starts, so CMD and all it starts inherit it; a fence that cannot take hold ends it with 126
before CMD runs (an agent eat meant to fence never runs unfenced).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time

from eat.procs import descendants, stat

_PR_SET_CHILD_SUBREAPER = 36


def _others() -> list[int]:
    """Every process below this one or in its group, except itself."""
    me, group = os.getpid(), os.getpgrp()
    found = set(descendants(me))
    for entry in os.listdir("/proc"):
        if (
            entry.isdigit()
            and int(entry) != me
            and (fields := stat(entry))
            and int(fields[3]) == group
        ):
            found.add(int(entry))
    return sorted(found)


def end_all() -> None:
    """Kill everything the agent started, until nothing is left (a fork may race a kill)."""
    for _ in range(50):
        pids = [p for p in _others() if (f := stat(p)) and f[0] != "Z"]
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        while True:  # reap: our children and the orphans handed to us
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        if not pids:
            return
        time.sleep(0.02)


def main(argv: list[str]) -> int:
    ctypes.CDLL(None).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    if argv[:1] == ["--fence"]:
        from eat.runners.sandbox import confine

        fence = json.loads(argv[1])
        argv = argv[2:]
        why = confine(fence["writable"], fence["unreadable"], network=True)
        if why:
            print(
                f"eat: the agent's fence did not take hold, so it is not run: {why}",
                file=sys.stderr,
            )
            return 126

    def stop(*_) -> None:
        end_all()
        os._exit(143)

    signal.signal(signal.SIGTERM, stop)
    child = subprocess.Popen(argv)
    rc = child.wait()
    end_all()
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
