"""The report's charts, drawn as inline SVG from what `report.collect` folds from the log: the
run's progress with the supervisor's plateaus and restructures, each team's lineage, the best
candidate's workloads and the LLM spend."""

from __future__ import annotations

import math
from html import escape
from typing import TYPE_CHECKING

from eat.events import (
    LLMCalled,
    describe,
    speedup_text,
)

if TYPE_CHECKING:
    from eat.report import Facts

COLORS = [
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#9467bd",
    "#ff7f0e",
    "#17becf",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
]
PLATEAU, RESTRUCTURE, RUN = "#e69f00", "#7b3294", "#111"


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round values covering [lo, hi], about n of them."""
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


def _num(v: float) -> str:
    return f"{v:g}" if abs(v) < 1e5 else f"{v:.3g}"


class Plot:
    """A chart's frame: data ranges mapped to an SVG box, with its axes."""

    def __init__(
        self,
        xs: tuple[float, float],
        ys: tuple[float, float],
        *,
        w: int = 960,
        h: int = 320,
        top: int = 16,
        left: int = 60,
    ):
        self.w, self.h, self.top, self.left, self.right, self.bottom = w, h, top, left, 20, 40
        self.xt, self.yt = _ticks(*xs), _ticks(*ys)
        self.x0, self.x1 = min(xs[0], self.xt[0]), max(xs[1], self.xt[-1])
        self.y0, self.y1 = min(ys[0], self.yt[0]), max(ys[1], self.yt[-1])

    def sx(self, x: float) -> float:
        span = (self.x1 - self.x0) or 1
        return round(self.left + (x - self.x0) / span * (self.w - self.left - self.right), 1)

    def sy(self, y: float) -> float:
        span = (self.y1 - self.y0) or 1
        return round(
            self.h - self.bottom - (y - self.y0) / span * (self.h - self.top - self.bottom), 1
        )

    def axes(self, xlabel: str, ylabel: str | None) -> str:
        """Ticks and grid on x, and on y unless there is no y label (no y scale)."""
        parts = []
        for t in self.yt if ylabel else []:
            y = self.sy(t)
            parts.append(
                f'<line class="grid" x1="{self.left}" x2="{self.w - self.right}" '
                f'y1="{y}" y2="{y}"/><text x="{self.left - 6}" y="{y + 4}" '
                f'text-anchor="end">{_num(t)}</text>'
            )
        for t in self.xt:
            x = self.sx(t)
            parts.append(
                f'<line class="tick" x1="{x}" x2="{x}" y1="{self.h - self.bottom}" '
                f'y2="{self.h - self.bottom + 4}"/><text x="{x}" '
                f'y="{self.h - self.bottom + 17}" text-anchor="middle">{_num(t)}</text>'
            )
        bottom = self.h - self.bottom
        parts.append(
            f'<line class="axis" x1="{self.left}" x2="{self.w - self.right}" '
            f'y1="{bottom}" y2="{bottom}"/>'
            f'<text x="{(self.left + self.w - self.right) / 2}" y="{self.h - 6}" '
            f'text-anchor="middle" class="label">{escape(xlabel)}</text>'
            f'<text transform="translate(14 {(self.top + bottom) / 2}) rotate(-90)" '
            f'text-anchor="middle" class="label">{escape(ylabel or "")}</text>'
        )
        return "".join(parts)

    def svg(self, name: str, body: str) -> str:
        return (
            f'<svg class="chart" data-chart="{name}" viewBox="0 0 {self.w} {self.h}" '
            f'role="img">{body}</svg>'
        )


def _steps(points: list[tuple[float, float]], plot: Plot) -> str:
    """A step line through the points: a best holds until the next one replaces it."""
    out, last = [], None
    for x, y in points:
        if last is not None:
            out.append(f"{plot.sx(x)},{plot.sy(last)}")
        out.append(f"{plot.sx(x)},{plot.sy(y)}")
        last = y
    return " ".join(out)


def _title(text: str) -> str:
    return f"<title>{escape(text)}</title>"


def progress_chart(f: Facts) -> str:
    """The run's best and each team's best after every candidate, with the supervisor's
    plateaus and restructures on two rails above the plot."""
    n = len(f.candidates)
    top = max([y for _, y in f.run_points], default=1.0)
    rail = 24
    plot = Plot((0, max(n, 1)), (0, top * 1.05), h=380, top=16 + 2 * rail, left=96)
    body = [plot.axes("candidates evaluated", f"best {f.label} (x)")]
    for team, pts in f.team_points.items():
        color = f.teams[team]
        dots = "".join(
            f'<circle class="pt" data-mark="1" cx="{plot.sx(x)}" cy="{plot.sy(y)}" r="2.6" '
            f'fill="{color}">'
            + _title(
                f"{e.candidate} ({team}): {e.status} "
                f"{speedup_text(e.speedup)}; team best {speedup_text(y)}"
            )
            + "</circle>"
            for x, y, e in pts
        )
        line = _steps([(x, y) for x, y, _ in pts], plot)
        body.append(
            f'<g class="team" data-team="{escape(team)}"><polyline fill="none" '
            f'stroke="{color}" stroke-width="1.6" points="{line}"/>{dots}</g>'
        )
    if f.run_points:
        body.append(
            f'<g class="run" data-team="run best"><polyline data-mark="1" fill="none" '
            f'stroke="{RUN}" stroke-width="2.6" stroke-dasharray="6 3" '
            f'points="{_steps(f.run_points, plot)}"/></g>'
        )
    for row, (label, color, marks, shape) in enumerate(
        (
            ("plateaus", PLATEAU, f.plateaus, "tri"),
            ("restructures", RESTRUCTURE, f.restructures, "dia"),
        )
    ):
        y = 12 + row * rail + rail / 2
        body.append(
            f'<text x="{plot.left - 6}" y="{y + 4}" text-anchor="end" '
            f'class="rail">{label}</text><line class="grid" x1="{plot.left}" '
            f'x2="{plot.w - plot.right}" y1="{y}" y2="{y}"/>'
        )
        for x, e in marks:
            cx = plot.sx(x)
            s = 5
            corners = (
                f"{cx - s},{y - s} {cx + s},{y - s} {cx},{y + s}"
                if shape == "tri"
                else f"{cx},{y - s} {cx + s},{y} {cx},{y + s} {cx - s},{y}"
            )
            body.append(
                f'<polygon class="{label}" data-mark="1" points="{corners}" fill="{color}" '
                f'fill-opacity="0.75">{_title(f"after {x} candidates: {describe(e)}")}'
                "</polygon>"
            )
            body.append(
                f'<line x1="{cx}" x2="{cx}" y1="{y + s}" y2="{plot.h - plot.bottom}" '
                f'stroke="{color}" stroke-opacity="0.12"/>'
            )
    return plot.svg("progress", "".join(body))


def lineage_chart(f: Facts) -> str:
    """Candidates as a tree over time: x is when a candidate was evaluated, each branch a row
    (a node continues its first child's row), an elbow from parent to child."""
    nodes = {c.candidate: c for c in f.candidates}
    children: dict[str | None, list[str]] = {}
    for c in f.candidates:  # a parent not (yet) in the log hangs from the baseline
        children.setdefault(c.parent if c.parent in nodes else None, []).append(c.candidate)
    row: dict[str | None, int] = {}
    rows = 0
    stack: list[tuple[str | None, bool]] = [(None, False)]
    while stack:  # post-order without recursion: a deep chain must not hit Python's limit
        node, done = stack.pop()
        kids = children.get(node, [])
        if done:
            row[node] = row[kids[0]]
        elif not kids:
            row[node], rows = rows, rows + 1
        else:
            stack.append((node, True))
            stack.extend((k, False) for k in reversed(kids))
    step = max(3.0, min(16.0, 900 / max(rows, 1)))
    plot = Plot((0, max(len(f.candidates), 1)), (0, 1), h=int(rows * step + 70), top=20)
    order: dict[str | None, int] = {c.candidate: i + 1 for i, c in enumerate(f.candidates)}
    order[None] = 0

    def x(cid: str | None) -> float:
        return plot.sx(order[cid])

    def y(cid: str | None) -> float:
        return round(plot.top + 8 + row[cid] * step, 1)

    body = [plot.axes("candidates evaluated", None)]
    edges, dots = [], []
    for parent, kids in children.items():
        for k in kids:
            edges.append(f"M{x(parent)},{y(parent)}V{y(k)}H{x(k)}")
    body.append(f'<path d="{"".join(edges)}" fill="none" stroke="#999" stroke-width="1"/>')
    r = max(1.5, min(4.5, step / 2.6))
    dots.append(
        f'<circle data-mark="1" cx="{x(None)}" cy="{y(None)}" r="{r + 1}" fill="#444">'
        f"{_title('the baseline (candidates without a parent start here)')}</circle>"
    )
    for c in f.candidates:
        ok, color = c.status == "ok", f.teams.get(c.team, "#777")
        ring = (
            f'<circle cx="{x(c.candidate)}" cy="{y(c.candidate)}" r="{r + 3}" fill="none" '
            f'stroke="{RUN}" stroke-width="1.5"/>'
            if c.candidate == f.best
            else ""
        )
        what = ", ".join(f"{k}={v}" for k, v in c.knobs.items()) or c.idea
        text = (
            f"{c.candidate} by {c.team}, from {c.parent or 'the baseline'}: {c.status} "
            f"{speedup_text(c.speedup) if ok else c.message[:160]}\n{what[:300]}"
        )
        dots.append(
            f'{ring}<circle class="node" data-mark="1" data-cid="{c.candidate}" '
            f'cx="{x(c.candidate)}" cy="{y(c.candidate)}" r="{r}" '
            f'fill="{color if ok else "#fff"}" stroke="{color}" stroke-width="1.2">'
            f"{_title(text)}</circle>"
        )
    body.extend(dots)
    return plot.svg("lineage", "".join(body))


def _ms(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:.3g} ms" if ms >= 0.01 else f"{seconds * 1e6:.3g} µs"


def workloads_chart(result: dict) -> str:
    """Per workload: the best candidate's median latency beside the baseline's, the vendor's
    and the time it would take at the device's measured peak, on one log scale (a baseline
    can be 100x slower than the best: a linear bar would hide the rest)."""
    bars = (("baseline", "#999"), ("vendor", "#1f77b4"), ("best", "#2ca02c"), ("at peak", "#fff"))
    rows = []
    for w in result.get("workloads", []):
        cand = w["candidate"]["median_s"]
        times = {
            "baseline": (w.get("baseline") or {}).get("median_s"),
            "vendor": (w.get("vendor") or {}).get("median_s"),
            "best": cand,
            "at peak": cand * w["peak_fraction"] if w.get("peak_fraction") else None,
        }
        rows.append(
            (
                " ".join(f"{k}={v}" for k, v in w["params"].items()),
                [(what, color, times[what]) for what, color in bars if times[what]],
                times["baseline"],
            )
        )
    every = [t for _, shown, _ in rows for _, _, t in shown]
    # A decade of room below the fastest bar, so that it is not a sliver at the axis.
    lo = 10 ** math.floor(math.log10(min(every) / 3))
    hi = 10 ** math.ceil(math.log10(max(every)))
    bar_h, left, right, gap = 16, 170, 960 - 190, 14

    def sx(t: float) -> float:
        return round(left + math.log10(t / lo) / math.log10(hi / lo) * (right - left), 1)

    body, top = [], 22
    for name, shown, base in rows:
        body.append(
            f'<text x="{left - 10}" y="{top + len(shown) * bar_h / 2 + 4}" '
            f'text-anchor="end" class="label">{escape(name)}</text>'
        )
        for what, color, t in shown:
            dash = ' stroke-dasharray="4 2"' if what == "at peak" else ""
            ratio = f" ({base / t:.2f}x)" if base else ""
            body.append(
                f'<rect data-mark="1" class="bar" x="{left}" y="{top}" '
                f'width="{sx(t) - left}" height="{bar_h - 3}" fill="{color}" '
                f'stroke="#333" stroke-width="0.6"{dash}>'
                f"{_title(f'{name}: {what} {_ms(t)}')}</rect>"
                f'<text x="{sx(t) + 6}" y="{top + bar_h - 5}">{what} {_ms(t)}{ratio}'
                "</text>"
            )
            top += bar_h
        top += gap
    decades = round(math.log10(hi / lo))
    for i in range(decades + 1):
        x = sx(lo * 10**i)
        body.insert(
            0,
            f'<line class="grid" x1="{x}" x2="{x}" y1="16" y2="{top - gap}"/>'
            f'<text x="{x}" y="11" text-anchor="middle">{_ms(lo * 10**i)}</text>',
        )
    return (
        f'<svg class="chart" data-chart="workloads" viewBox="0 0 960 {top}" '
        f'role="img">{"".join(body)}</svg>'
    )


def llm_charts(calls: list[LLMCalled]) -> str:
    """Cumulative tokens and cost against run time."""
    minutes = max(c.elapsed_s for c in calls) > 120
    unit = 60 if minutes else 1
    tokens, cost, t_sum, c_sum = [], [], 0, 0.0
    for c in calls:
        t_sum += c.prompt_tokens + c.completion_tokens
        c_sum += c.cost_usd or 0.0
        tokens.append((c.elapsed_s / unit, t_sum))
        cost.append((c.elapsed_s / unit, c_sum))
    xlabel = "run time (min)" if minutes else "run time (s)"
    out = []
    for name, pts, ylabel, color in (
        ("tokens", tokens, "tokens (prompt + completion)", "#1f77b4"),
        ("cost", cost, "cost (USD, priced calls)", "#d62728"),
    ):
        xmax, ymax = max(p[0] for p in pts), max(p[1] for p in pts)
        plot = Plot((0, xmax or 1), (0, (ymax or 1) * 1.05), w=470, h=260, left=70)
        line = " ".join(f"{plot.sx(x)},{plot.sy(y)}" for x, y in pts)
        out.append(
            plot.svg(
                name,
                plot.axes(xlabel, ylabel) + f'<polyline data-mark="1" '
                f'fill="none" stroke="{color}" stroke-width="2" points="{line}"/>',
            )
        )
    return "".join(out)
