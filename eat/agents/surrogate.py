"""A surrogate of the knob space: a Gaussian process over knob indices, with an exploration bonus.

The model team proposes the configuration with the highest upper confidence bound
(predicted log speedup + BONUS standard deviations) among those nobody has tried. It learns
from every candidate of the run, whichever team evaluated it, so the others' work is its data
(past FIT_POINTS of them, from the best and a sample of the rest).
Knob values are placed by their index in the knob's list, scaled to [0, 1]: the order a target
lists its values in is the one assumption (a larger tile next to a smaller one).
"""

from __future__ import annotations

import functools
import math
import random
from typing import Any

import numpy as np

from eat.knobspace import Fence

BONUS = 2.0  # exploration: standard deviations added to the predicted mean
NOISE = 0.05  # observation noise, in units of the standardized log speedup
LENGTHS = (0.12, 0.18, 0.27, 0.4, 0.6)  # kernel widths tried, by marginal likelihood
WIDE = 3.0  # a knob's width when the measurements say it hardly matters
ENUMERATE_UP_TO = 20_000  # configurations scored exhaustively; larger spaces are sampled
SAMPLES = 4_000
FAILED_PENALTY = math.log(2.0)  # a failed configuration counts as half the worst speedup
# The most measurements one fit uses (its cost grows with their cube, its memory with their
# square): the best FIT_BEST and a sample of the rest, so a long run's model stays quick.
FIT_POINTS, FIT_BEST = 400, 100
# The most of a fit's measurements the width search scores (evenly spaced past that): it
# factors some hundred kernel matrices where the fit factors one, and on all FIT_POINTS it
# took 70% of a pick.
WIDTH_POINTS = 200
# Widths change little from one measurement to the next: past RUNG_EVERY measurements a search
# is made on the first `_rung(n)` of the run's n, and the picks until the next rung reuse it.
# Early picks, which decide how soon a run gets near its best, and cheap searches, search anew.
RUNG_EVERY, RUNG_STEP = 60, 1.1


def _squared_distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Every row of `a` against every row of `b` (per leading index, where they are stacks), in
    memory len(a) x len(b): |a-b|^2 expanded, not a difference per dimension."""
    d2 = (a * a).sum(axis=-1)[..., :, None] + (b * b).sum(axis=-1)[..., None, :]
    d2 -= 2 * a @ np.swapaxes(b, -1, -2)
    return np.clip(d2, 0.0, None)


def _rbf(a: np.ndarray, b: np.ndarray, length: float) -> np.ndarray:
    return np.exp(-_squared_distances(a, b) / (2 * length * length))


def _fit(x: np.ndarray, z: np.ndarray, lengths: np.ndarray):
    """(evidence, lengths, inverse Cholesky factor, weights) of a GP with these widths per knob.
    The inverse is kept because predicting multiplies by it: a matrix product over the pool,
    where solving with the factor cost two to three times as much."""
    xs = x / lengths
    linv = np.linalg.inv(np.linalg.cholesky(_rbf(xs, xs, 1.0) + NOISE**2 * np.eye(len(xs))))
    w = linv @ z
    return -0.5 * w @ w + np.log(np.diag(linv)).sum(), lengths, linv, linv.T @ w


def _evidences(x: np.ndarray, z: np.ndarray, lengths: np.ndarray) -> list[float]:
    """The evidence of a GP per row of `lengths`, as `_fit` gives it within rounding, in one
    batched factorization: the width search makes some hundred fits per suggestion, and one
    call per fit cost more than its arithmetic. Each kernel matrix K is bordered by z, so the
    last row of the factor of [[K, z], [z', c]] is w = L^-1 z and z'K^-1 z = w.w: no solve."""
    n = len(x)
    xs = x[None, :, :] / lengths[:, None, :]
    bordered = np.empty((len(lengths), n + 1, n + 1))
    bordered[:, :n, :n] = _rbf(xs, xs, 1.0) + NOISE**2 * np.eye(n)
    bordered[:, n, :n] = bordered[:, :n, n] = z
    bordered[:, n, n] = z @ z / NOISE**2 + 1.0  # above z'K^-1 z: K's eigenvalues are >= NOISE^2
    chol = np.linalg.cholesky(bordered)
    w, diagonal = chol[:, n, :n], np.diagonal(chol, axis1=1, axis2=2)[:, :n]
    return list(-0.5 * (w * w).sum(axis=1) - np.log(diagonal).sum(axis=1))


def _widths(x: np.ndarray, z: np.ndarray) -> np.ndarray:
    """A width per knob, by evidence: one for all first, then each knob's in turn (a knob that
    matters little gets a wide one, so the model learns which knobs matter, as per-knob
    searches like TPE do). Widths already scored are not factored again: each knob's tries
    hold the current widths, and a second pass repeats every try the first left unchanged."""
    known: dict[tuple, float] = {}

    def evidences(tries: np.ndarray) -> list[float]:
        new = [t for t in dict.fromkeys(map(tuple, tries)) if t not in known]
        if new:
            known.update(zip(new, _evidences(x, z, np.array(new))))
        return [known[tuple(t)] for t in tries]

    tries = np.array([np.full(x.shape[1], w) for w in LENGTHS])
    evidence = evidences(tries)
    i = max(range(len(tries)), key=evidence.__getitem__)
    best, lengths = evidence[i], tries[i]
    for _ in range(2):
        for d in range(x.shape[1]):
            tries = np.repeat(lengths[None, :], len(LENGTHS) + 1, axis=0)
            tries[:, d] = (*LENGTHS, WIDE)
            for e, t in zip(evidences(tries), tries):
                if e > best + 1e-9:
                    best, lengths = e, t
    return lengths


def _rung(n: int) -> int:
    """The most measurements, at most `n`, that a width search is made on: every count up to
    RUNG_EVERY, then counts RUNG_STEP apart (some ten searches from 60 to 150 measurements,
    not ninety)."""
    if n <= RUNG_EVERY:
        return n
    return math.floor(RUNG_EVERY * RUNG_STEP ** math.floor(math.log(n / RUNG_EVERY, RUNG_STEP)))


@functools.lru_cache(maxsize=64)
def _searched(x: bytes, y: bytes, knobs: int) -> tuple[float, ...]:
    """`_widths` of these measurements (as bytes: a cache key), in the order of their value:
    the picks between two rungs share one search."""
    xs, ys = np.frombuffer(x).reshape(-1, knobs), np.frombuffer(y)
    return tuple(_widths(*_width_sample(xs, ys)))


def _width_sample(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """What a width search scores: past WIDTH_POINTS measurements an even sample of them
    (they come best first), the values standardized."""
    z = (y - y.mean()) / (float(y.std()) or 1.0)
    sample = np.linspace(0, len(x) - 1, min(len(x), WIDTH_POINTS)).round().astype(int)
    return x[sample], z[sample]


class GP:
    """Posterior of a zero-mean GP on standardized targets, with the widths `_widths` chooses
    (past WIDTH_POINTS measurements, on an even sample of them), or with `lengths`."""

    def __init__(self, x: np.ndarray, y: np.ndarray, lengths: np.ndarray | None = None):
        self.mean, self.scale = float(y.mean()), float(y.std()) or 1.0
        z = (y - self.mean) / self.scale
        if lengths is None:
            lengths = _widths(*_width_sample(x, y))
        _, self.lengths, self.linv, self.alpha = _fit(x, z, lengths)
        self.x = x / self.lengths

    def predict(self, xs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean and standard deviation of the log speedup at each row of `xs`."""
        ks = _rbf(xs / self.lengths, self.x, 1.0)
        mu = ks @ self.alpha
        v = self.linv @ ks.T
        var = np.clip(1.0 - (v * v).sum(axis=0), 1e-12, None)
        return self.mean + self.scale * mu, self.scale * np.sqrt(var)


def indexer(space: dict[str, list]):
    """knobs -> its index row: the index of each knob's value (its first value where a knob is
    missing), or None for a value the space does not list. Values compare as text, as TOML
    gives them. Callers keep a candidate's row: its knobs never change."""
    lookup = [
        (name, {str(v): i for i, v in reversed(list(enumerate(values)))}, str(values[0]))
        for name, values in space.items()
    ]

    def point(knobs: dict[str, Any]) -> tuple[int, ...] | None:
        idx = tuple(where.get(str(knobs.get(name, first)), -1) for name, where, first in lookup)
        return None if -1 in idx else idx

    return point


@functools.lru_cache(maxsize=8)
def _grid(sizes: tuple[int, ...]) -> np.ndarray:
    """Every configuration of a small space as index rows, in itertools.product's order."""
    grid = np.indices(sizes).reshape(len(sizes), -1).T
    grid.flags.writeable = False  # shared by every pick
    return grid


def _candidates(
    space: dict[str, list], tried: set, top: list[tuple], rng: random.Random, far: bool = False
) -> np.ndarray:
    """Untried index rows to score: every one in a small space; else a random sample plus
    the one-knob neighbours of the best points and, if `far`, each tried point's antipode
    (every knob at the end of its list farther from it: the point farthest from it alone,
    which a sample seldom holds)."""
    sizes = tuple(len(v) for v in space.values())
    if math.prod(sizes) <= ENUMERATE_UP_TO:
        grid, untried = _grid(sizes), np.ones(math.prod(sizes), dtype=bool)
        if tried:
            untried[np.ravel_multi_index(np.array(list(tried)).T, sizes)] = False
        return grid[untried]
    pool = {tuple(rng.randrange(n) for n in sizes) for _ in range(SAMPLES)}
    if far and tried:
        ends = np.array(sizes) - 1
        antipodes = np.where(2 * np.array(list(tried)) >= ends, 0, ends)
        pool.update(map(tuple, antipodes.tolist()))
    for p in top:
        for k, n in enumerate(sizes):
            pool.update(p[:k] + (v,) + p[k + 1 :] for v in range(n))
    return np.array(sorted(pool - tried), dtype=int).reshape(-1, len(sizes))


def _pool(
    space: dict[str, list],
    tried: set,
    top: list[tuple],
    rng: random.Random,
    far: bool,
    fence: Fence | None,
) -> np.ndarray:
    """_candidates that `fence` admits (None: all), as index rows."""
    pool = _candidates(space, tried, top, rng, far)
    return pool if fence is None else pool[fence.admits_rows(space, pool)]


def _knobs(space: dict[str, list], p) -> dict[str, Any]:
    """An index row as the configuration it names."""
    return {n: space[n][int(j)] for n, j in zip(space, p)}


def spread(
    space: dict[str, list],
    observed: list[tuple[int, ...] | None],
    rng: random.Random,
    count: int = 8,
    fence: Fence | None = None,
    settled: dict[str, set[str]] | None = None,
) -> list[dict[str, Any]]:
    """Up to `count` untried configurations that `fence` admits (None: any): those using the
    knob values measured least often first (a `settled` value, per knob, counts as measured
    more than any other), then farthest from every configuration measured (`observed`, index
    rows, None off the space: maximin in knob-index space, scaled to [0, 1]): coverage, so no
    value and no region stays unseen."""
    scale = np.array([max(1, len(v) - 1) for v in space.values()], dtype=float)
    points = {p for p in observed if p is not None}
    grid = _pool(space, points, [], rng, True, fence)
    if not len(grid):
        return []
    if not points:
        return [_knobs(space, grid[i]) for i in rng.sample(range(len(grid)), min(count, len(grid)))]
    measured = np.array(list(points))  # counted and measured against: any order will do
    # Maximin alone only ever picks the grid's boundary: on a landscape whose good values sit
    # inside the range the explorer then measures the same few values again and again.
    settled = settled or {}
    uses = sum(
        (
            np.bincount(measured[:, k], minlength=len(values))
            + len(measured) * np.array([str(v) in settled.get(name, ()) for v in values])
        )[grid[:, k]]
        for k, (name, values) in enumerate(space.items())
    )
    jitter = np.array([rng.random() for _ in range(len(grid))]) * 1e-9  # ties: the run's seed
    # Least used first: only rows used no more than the count-th least used can make the cut,
    # so only theirs are measured against every configuration (after 10,000 candidates the
    # distances from every row were most of a pick's half second).
    kth = min(count, len(uses)) - 1
    rows = np.flatnonzero(uses <= np.partition(uses, kth)[kth])
    xs, seen = grid[rows] / scale, measured / scale
    nearest = np.full(len(rows), np.inf)
    for start in range(0, len(seen), 2048):  # bounded memory on large histories
        nearest = np.minimum(nearest, _squared_distances(xs, seen[start : start + 2048]).min(1))
    order = np.lexsort((-(nearest + jitter[rows]), uses[rows]))[:count]
    return [_knobs(space, grid[i]) for i in rows[order]]


def suggest(
    space: dict[str, list],
    observed: list[tuple[tuple[int, ...] | None, float | None]],
    rng: random.Random,
    bonus: float = BONUS,
    count: int = 8,
    fence: Fence | None = None,
) -> list[dict[str, Any]]:
    """Up to `count` untried configurations that `fence` admits (None: any), best
    acquisition first.

    `observed` is every (index row, or None off the space; speedup, or None when it failed)
    the run has seen; with fewer successes than knobs there is nothing to fit yet, and the
    picks are random.
    """
    scale = np.array([max(1, len(v) - 1) for v in space.values()], dtype=float)
    ok = [s for _, s in observed if s]
    worst = math.log(min(ok)) if ok else 0.0
    points = [p for p, _ in observed if p is not None]
    values = [math.log(s) if s else worst - FAILED_PENALTY for p, s in observed if p is not None]
    order = sorted(range(len(points)), key=lambda i: -values[i])
    pool = _pool(space, set(points), [points[i] for i in order[:5]], rng, False, fence)
    if not len(pool):
        return []
    if len(ok) < max(3, len(space)):
        picks = rng.sample(range(len(pool)), min(count, len(pool)))
    else:
        fit = (
            order[:FIT_BEST] + rng.sample(order[FIT_BEST:], FIT_POINTS - FIT_BEST)
            if len(points) > FIT_POINTS
            else order
        )
        rung = sorted(range(_rung(len(points))), key=lambda i: -values[i])
        lengths = _searched(
            (np.array([points[i] for i in rung]) / scale).tobytes(),
            np.array([values[i] for i in rung], dtype=float).tobytes(),
            len(space),
        )
        gp = GP(
            np.array([points[i] for i in fit]) / scale,
            np.array([values[i] for i in fit]),
            np.array(lengths),
        )
        mu, sd = gp.predict(pool / scale)
        score = mu + bonus * sd
        picks = list(np.argsort(-score, kind="stable")[:count])
    return [_knobs(space, pool[i]) for i in picks]
