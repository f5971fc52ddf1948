"""The knob space's geometry: how far apart two configurations are (`differs`, in knobs;
`region_radius`, where a region ends; `Fence`, where a team may pick), and `KnobIndex`, every
evaluated configuration in flat arrays for queries over a long run (`differing`: the best's
neighbours in LEARNING.md, plateau.promising_regions; `below`: the knob values the explorer
and the climbs count as settled)."""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass
from typing import Any

import numpy as np


class KnobIndex:
    """Every evaluated candidate that has knobs, as a row of small integer codes (one column per
    knob name; an unset knob has a code too) and its estimate (NaN: none), in flat arrays: a
    region query over a long run compares them all at once with numpy (plateau.py)."""

    def __init__(self) -> None:
        self.columns: dict[str, int] = {}  # knob name -> column
        self.codes: list[dict[Any, int]] = []  # per column: value -> code
        self.cids: list[str] = []  # row -> candidate
        self.rows: dict[str, int] = {}  # candidate -> row
        self.table = array("q")  # len(cids) x len(columns) codes, row by row
        self.estimates = array("d")

    def add(self, cid: str, knobs: dict[str, Any], estimate: float | None) -> None:
        if not knobs:
            return
        for name in knobs:
            if name not in self.columns:
                self._widen(name)
        self.rows[cid] = len(self.cids)
        self.cids.append(cid)
        self.table.extend([self._code(j, knobs.get(k)) for k, j in self.columns.items()])
        self.estimates.append(math.nan)
        self.update(cid, estimate)

    def copy(self) -> KnobIndex:
        new = KnobIndex()
        new.columns, new.codes = dict(self.columns), [dict(c) for c in self.codes]
        new.cids, new.rows = list(self.cids), dict(self.rows)
        new.table, new.estimates = array("q", self.table), array("d", self.estimates)
        return new

    def update(self, cid: str, estimate: float | None) -> None:
        """A candidate's estimate changed (a re-time)."""
        if (row := self.rows.get(cid)) is not None:
            self.estimates[row] = math.nan if estimate is None else estimate

    def by_knob(self) -> np.ndarray:
        """The codes as one row per knob and one column per candidate (rows' order): comparing a
        knob at a time is several times quicker than a candidate at a time."""
        return np.array(self.table, dtype=np.int32).reshape(len(self.cids), -1).T.copy()

    def below(self, times: int, level: float) -> dict[str, set[str]]:
        """Per knob, the values (as text) of at least `times` rows with an estimate, every one
        of them under `level`."""
        est = np.array(self.estimates)
        ok = ~np.isnan(est)
        out: dict[str, set[str]] = {}
        if not ok.any():
            return out
        for (name, column), codes in zip(self.columns.items(), self.by_knob()[:, ok]):
            size = len(self.codes[column])
            top = np.full(size, -np.inf)
            np.maximum.at(top, codes, est[ok])
            low = (np.bincount(codes, minlength=size) >= times) & (top < level)
            for value, code in self.codes[column].items():
                if low[code]:  # a list's key is ("unhashable", its repr): the repr is its text
                    out.setdefault(name, set()).add(
                        value[1] if isinstance(value, tuple) else str(value)
                    )
        return out

    def _code(self, column: int, value: Any) -> int:
        codes = self.codes[column]
        try:
            return codes.setdefault(value, len(codes))
        except TypeError:  # a list or table from TOML: compared by value, as differs() does
            return codes.setdefault(("unhashable", repr(value)), len(codes))

    def _widen(self, name: str) -> None:
        """A knob name not seen before (in practice, at the first candidate only): every row so
        far has it unset."""
        width = len(self.columns)
        self.columns[name] = width
        self.codes.append({})
        unset, old, self.table = self._code(width, None), self.table, array("q")
        for r in range(len(self.cids)):
            self.table.extend(old[r * width : (r + 1) * width])
            self.table.append(unset)


def differs(a: dict[str, Any], b: dict[str, Any]) -> int:
    """How many knobs two configurations set differently."""
    return sum(a.get(k) != b.get(k) for k in a.keys() | b.keys())


def differing(columns: np.ndarray, point: np.ndarray) -> np.ndarray:
    """`differs` over a KnobIndex at once: for each configuration (a column of
    `KnobIndex.by_knob()`), how many knobs it sets differently from `point` (one of them)."""
    count = np.zeros(columns.shape[1], dtype=np.int32)
    for knob, value in zip(columns, point):
        count += knob != value
    return count


def region_radius(knobs: int) -> int:
    """Configurations differing in fewer knobs than this are in the same region."""
    return max(2, (knobs + 1) // 2)


@dataclass(frozen=True)
class Fence:
    """Where a team may pick: configurations differing from `near` (anywhere when None) in
    fewer than `radius` knobs, and from each of `avoid` in at least `radius` (region_radius's
    regions)."""

    radius: int
    near: dict[str, Any] | None = None
    avoid: tuple[dict[str, Any], ...] = ()

    def admits(self, knobs: dict[str, Any]) -> bool:
        inside = self.near is None or differs(knobs, self.near) < self.radius
        return inside and all(differs(knobs, r) >= self.radius for r in self.avoid)

    def admits_rows(self, space: dict[str, list], rows: np.ndarray) -> np.ndarray:
        """`admits` for each configuration of `space` given as a row of value indices, at once:
        a searcher filters thousands of them a pick."""
        ok = np.ones(len(rows), dtype=bool)
        if self.near is not None:
            ok &= _differs_rows(space, rows, self.near) < self.radius
        for r in self.avoid:
            ok &= _differs_rows(space, rows, r) >= self.radius
        return ok


def _differs_rows(space: dict[str, list], rows: np.ndarray, config: dict[str, Any]) -> np.ndarray:
    """differs(row's configuration, config) for each row of value indices into `space`."""
    same = sum(
        np.array([v == config.get(name) for v in values], dtype=bool)[rows[:, k]]
        for k, (name, values) in enumerate(space.items())
    )
    return len(space) - same + sum(name not in space for name in config)
