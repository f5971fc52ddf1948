"""The local executor: teams' turns on worker threads, every write on the main thread.

A turn (agent proposal with its LLM calls, build, verification, timing) spends its time
waiting on a model or on child processes, so threads are enough. What a turn writes (an
event, a candidate folder, best/, notes, a commit) it hands to the main thread with
`on_main` and waits for: the main thread is the log's one writer, and it serves those calls
only while the supervisor is waiting for a turn to end, so the supervisor always decides on a
state no turn is changing. Timing keeps its own slot per device (eat.cache.device_lock).
"""

from __future__ import annotations

import functools
import os
import queue
import signal
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any


class Cancelled(Exception):
    """The run stopped while this turn was in flight: what it found is dropped."""


def default_workers() -> int:
    """One fewer than the cores (the main thread and the children need one), at least 1."""
    return max(1, (os.cpu_count() or 2) - 1)


class LocalExecutor:
    """Up to `workers` turns at once, one per team; `next_done` serves their writes."""

    def __init__(self, workers: int):
        self.workers = workers
        self.busy: dict[str, threading.Thread] = {}  # team id -> the thread of its turn
        self._inbox: queue.Queue = queue.Queue()
        self._main = threading.get_ident()
        self._closed = False
        self.interrupted = False  # a Ctrl-C came (see ctrl_c_at_waits)

    def free(self) -> int:
        return self.workers - len(self.busy)

    def start(self, team: str, turn: Callable[[], Any]) -> None:
        """Run `turn` for `team` on a worker thread. Daemon threads: a run that stops does not
        wait for a turn's model call to return (its child processes die with the process)."""

        def work() -> None:
            try:
                self._inbox.put(("done", team, turn(), None))
            except BaseException as e:  # handed to the main thread, which decides
                self._inbox.put(("done", team, None, e))

        thread = threading.Thread(target=work, name=f"eat-turn-{team}", daemon=True)
        self.busy[team] = thread
        thread.start()

    def on_main(self, fn: Callable[[], Any]) -> Any:
        """Run `fn` on the main thread and return what it returns (raises what it raises);
        on the main thread itself, at once."""
        if threading.get_ident() == self._main:
            return fn()
        if self._closed:
            raise Cancelled("the run has stopped")
        reply: Future = Future()
        self._inbox.put(("call", fn, reply, None))
        return reply.result()

    def post(self, fn: Callable[[], Any]) -> None:
        """Have the main thread run `fn` when it next serves the turns (another thread's news,
        e.g. a person's edit); the caller does not wait."""
        self._inbox.put(("post", fn, None, None))

    def next_done(self) -> tuple[str, Any, BaseException | None]:
        """Serve the turns' calls until one turn ends: (team, what it returned, what it raised)."""
        while True:
            if self.interrupted:
                raise KeyboardInterrupt
            try:  # a timeout lets a Ctrl-C be seen within half a second
                kind, a, b, c = self._inbox.get(timeout=0.5)
            except queue.Empty:
                continue
            if kind == "done":
                del self.busy[a]
                return a, b, c
            if kind == "post":
                if not self._closed:
                    a()
                continue
            if self._closed:
                b.set_exception(Cancelled("the run has stopped"))
                continue
            try:
                b.set_result(a())
            except BaseException as e:  # the worker raises it, as a direct call would
                b.set_exception(e)

    def interruptible(self, node: Callable[..., Any]) -> Callable[..., Any]:
        """`node` as a graph node that a Ctrl-C which came before it stops before it begins
        (a step's next node, e.g. a re-time, is not started after one)."""

        @functools.wraps(node)
        def run(*args: Any, **kwargs: Any) -> Any:
            if self.interrupted:
                raise KeyboardInterrupt
            return node(*args, **kwargs)

        return run

    def drain(self) -> list[tuple[str, Any, BaseException | None]]:
        """Let every turn in flight finish (serving its writes): what each ended with."""
        return [self.next_done() for _ in range(len(self.busy))]

    def close(self) -> None:
        """Refuse further writes: a turn still in flight gets Cancelled at its next one."""
        self._closed = True
        while True:  # answer the calls already waiting, so no worker waits forever
            try:
                kind, a, b, c = self._inbox.get_nowait()
            except queue.Empty:
                return
            if kind == "call" and b is not None:
                b.set_exception(Cancelled("the run has stopped"))


@contextmanager
def ctrl_c_at_waits(pool: LocalExecutor) -> Iterator[None]:
    """While the supervisor runs, a Ctrl-C stops it where the main thread next waits for turns
    (within half a second) or begins a graph node, not wherever it lands: an interrupt raised
    inside a library's code can leave it broken (a thread LangGraph's pool started but never
    registered, which the process then waits for at exit; a wake-up `queue.Queue.put` never
    sent, which left the git thread and `flush` waiting on each other). A second Ctrl-C raises
    at once, wherever the main thread is."""
    if (
        threading.current_thread() is not threading.main_thread()  # it alone gets signals
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield  # Ctrl-C ignored (a background job) or handled by whoever runs eat: theirs
        return

    def on_ctrl_c(signum: int, frame: object) -> None:
        if pool.interrupted:
            raise KeyboardInterrupt
        pool.interrupted = True

    previous = signal.signal(signal.SIGINT, on_ctrl_c)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
