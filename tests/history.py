"""Synthetic run histories for tests of the supervisor's decisions: a RunState built event by
event, the way the log would build it."""

from __future__ import annotations

from eat.config import PlateauConfig
from eat.events import CandidateEvaluated, TeamSpawned
from eat.restructure import operation_events
from eat.state import RunState
from eat.team import load_presets

CFG = PlateauConfig(team_window=4, run_window=6, fail_window=3, min_gain=0.02, score_after=3)
PRESETS = load_presets()
STRATEGIES = ("coordinate", "explorer", "refiner", "model")


class History:
    """Teams named '<preset>-<n>' take that preset's strategy when it names one, else
    `strategy`."""

    def __init__(self, *teams: str, strategy: str = "coordinate", cfg: PlateauConfig = CFG):
        self.state = RunState(cfg)
        self.n = 0
        for t in teams:
            preset = t.split("-")[0]
            self.add(
                TeamSpawned(
                    team=t,
                    preset=preset,
                    directive="d",
                    strategy=preset if preset in STRATEGIES else strategy,
                )
            )

    def add(self, event):
        event.seq = self.state.seq + 1
        self.state.apply(event)
        return event

    def eval(
        self,
        team: str,
        speedup: float | None,
        status: str = "ok",
        noise: float = 0.01,
        digest: str | None = None,
        same_as: str | None = None,
        **knobs,
    ):
        """A candidate of `team`; `digest`: its source's hash (default: one no source has);
        `same_as`: the candidate whose program it builds (its result: not evaluated)."""
        self.n += 1
        return self.add(
            CandidateEvaluated(
                candidate=f"c{self.n:04d}",
                team=team,
                source_hash=digest or f"h{self.n}",
                status=status,
                speedup=speedup if status == "ok" else None,
                noise=noise,
                knobs=knobs or {"K": self.n},
                same_as=same_as,
            )
        )

    def apply(self, ops) -> None:
        """Record operations as the supervisor does."""
        for i, op in enumerate(ops):
            for e in operation_events(op, self.state, f"{self.state.seq}:{i}", 0, PRESETS):
                self.add(e)
