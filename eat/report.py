"""`eat report`: one self-contained HTML file about a run, read-only and safe while it runs.

Its charts are inline SVG (charts.py); the page loads nothing else (no CDN, fonts or
scripts), so it opens anywhere, offline, years later. Its one small script only notes errors
and toggles a team's lines; hover texts are SVG <title>s, which need no script.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from html import escape
from pathlib import Path

from eat.charts import (
    COLORS,
    PLATEAU,
    RESTRUCTURE,
    lineage_chart,
    llm_charts,
    progress_chart,
    workloads_chart,
)
from eat.events import (
    CandidateEvaluated,
    HeldOutGraded,
    LLMCalled,
    PlateauDetected,
    Restructured,
    RestructureScored,
    RunResumed,
    RunStopped,
    TeamSpawned,
    gflops_text,
    speedup_text,
    verdict_text,
)
from eat.state import RunState
from eat.status import sealed_target
from eat.steer import read_settled
from eat.workspace import Workspace, tampered, write_output


def write_report(workspace: Path, out: Path | None = None) -> Path:
    """Write the run's report (default: report.html in the workspace); returns its path."""
    ws = Workspace.open(workspace)
    out = Path(out) if out else ws.paths.report
    write_output(out, render(ws))  # a reader sees the old report or the new one, never half
    return out


# -- what the run did, from its log ----------------------------------------------------------


@dataclass
class Facts:
    """The series the charts draw, folded from the log in one pass."""

    state: RunState  # the log folded as `eat status` does
    teams: dict[str, str] = field(default_factory=dict)  # team -> color
    team_points: dict[str, list] = field(default_factory=dict)  # team -> [(x, best, event)]
    run_points: list = field(default_factory=list)  # [(x, run best)]
    candidates: list[CandidateEvaluated] = field(default_factory=list)
    plateaus: list = field(default_factory=list)  # [(x, event)]
    restructures: list = field(default_factory=list)  # [(x, event)]
    scores: dict[int, RestructureScored] = field(default_factory=dict)
    llm: list[LLMCalled] = field(default_factory=list)
    stopped: RunStopped | None = None  # the last session's end, None while one runs or crashed
    label: str = "speedup"  # what the headline is: a kernel's speedup, a program's metric gain
    vendor: str | None = None  # how the target names the library it is compared with
    held_out: HeldOutGraded | None = None  # a program's best graded on its held-out split

    @property
    def best(self) -> str | None:
        """The run's best candidate's id."""
        return self.state.best.cid if self.state and self.state.best else None


def collect(events, config) -> Facts:
    """Fold the events as `eat status` does, noting each team's and the run's best after
    every candidate (re-times and noise thresholds included, so the lines agree with it)."""
    state = RunState(config.windows())
    facts = Facts(state=state)
    for e in events:
        state.apply(e)
        x = state.evaluations
        match e:
            case TeamSpawned():
                facts.teams.setdefault(e.team, COLORS[len(facts.teams) % len(COLORS)])
            case CandidateEvaluated():
                facts.candidates.append(e)
                team = state.teams.get(e.team)
                if team and team.best_estimate is not None:
                    facts.team_points.setdefault(e.team, []).append((x, team.best_estimate, e))
                if state.best_speedup is not None:
                    facts.run_points.append((x, state.best_speedup))
            case PlateauDetected():
                facts.plateaus.append((x, e))
            case Restructured():
                facts.restructures.append((x, e))
            case RestructureScored():
                facts.scores[e.restructure] = e
            case LLMCalled():
                facts.llm.append(e)
            case RunStopped():
                facts.stopped = e
            case HeldOutGraded():
                facts.held_out = e
            case RunResumed():
                facts.stopped = None
    return facts


# -- text ------------------------------------------------------------------------------------


def markdown(text: str) -> str:
    """Headings, lists, paragraphs, `code` and **bold**; everything escaped first."""
    html: list[str] = []
    items: list[str] = []
    para: list[str] = []

    def inline(s: str) -> str:
        s = escape(s)
        s = re.sub(r"`([^`]+)`", r"<code>\1</code>", s)
        return re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", s)

    def flush() -> None:
        if items:
            html.append("<ul>" + "".join(f"<li>{i}</li>" for i in items) + "</ul>")
            items.clear()
        if para:
            html.append(f"<p>{' '.join(para)}</p>")
            para.clear()

    for line in text.splitlines():
        s = line.strip()
        if s.startswith("<!--") and s.endswith("-->"):
            continue  # eat's markers around its own block
        if m := re.match(r"(#{1,6})\s+(.*)", s):
            flush()
            level = min(len(m.group(1)) + 2, 6)
            html.append(f"<h{level}>{inline(m.group(2))}</h{level}>")
        elif m := re.match(r"[-*]\s+(.*)", s):
            if para:
                flush()
            items.append(inline(m.group(1)))
        elif not s:
            flush()
        elif items and line.startswith((" ", "\t")):
            items[-1] += " " + inline(s)
        else:
            if items:
                flush()
            para.append(inline(s))
    flush()
    return "".join(html)


def _table(head: list[str], rows: list[list[str]], cls: str = "") -> str:
    """A table of cells already escaped."""
    return (
        f'<table class="{cls}"><tr>'
        + "".join(f"<th>{h}</th>" for h in head)
        + "</tr>"
        + "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
        + "</table>"
    )


def restructure_table(f: Facts) -> str:
    rows = []
    waiting = {p.seq for p in f.state.pending}
    for x, e in f.restructures:
        s = f.scores.get(e.seq)
        if s is not None:
            head, _, why = verdict_text(s).partition(": ")  # "helped" / "did not help": why
            verdict = f'<b class="{"yes" if s.helped else "no"}">{head}</b>: {escape(why)}'
        elif e.seq not in waiting:  # retires, and rebalances that raised no team's share
            verdict = "not scored: it changed no team whose results could judge it"
        elif f.stopped is not None:
            verdict = "not scored yet: the run stopped before its teams' window (a resume goes on)"
        else:
            verdict = "not scored yet"
        rows.append(
            [
                str(e.seq),
                str(x),
                escape(e.op),
                escape(e.team or "-"),
                escape(e.reason),
                escape(", ".join(dict.fromkeys(e.evidence))),
                speedup_text(e.best_before),
                verdict,
            ]
        )
    return _table(
        ["seq", "after", "op", "team", "reason", "evidence", "best then", "score"],
        rows,
        "restructures",
    )


def _best_result(ws: Workspace, f: Facts) -> dict | None:
    """The best candidate's evaluation, from its folder (best/ may be mid-swap)."""
    best = next((c for c in f.candidates if c.candidate == f.best), None)
    for path in ([ws.paths.result(best.team, best.candidate)] if best else []) + [
        ws.paths.best / "result.json"
    ]:
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            continue
    return None


# -- the page --------------------------------------------------------------------------------


def _grades(result: dict, f: Facts) -> str:
    """A program's best against its baseline: every metric's median over the seeds graded,
    and the held-out split's figures where the run graded it."""
    score, base = result["score"], result.get("baseline_score") or {}
    rows = [
        [escape(k), f"{v:.4g}", f"{base.get('metrics', {}).get(k, float('nan')):.4g}"]
        for k, v in score["metrics"].items()
    ]
    held = f.held_out
    if held and held.status == "ok" and held.score is not None and held.baseline_score is not None:
        rows.append(
            [
                f"{escape(result.get('metric') or '')} on {escape(held.split)} ({held.candidate})",
                f"{held.score:.4g}",
                f"{held.baseline_score:.4g}",
            ]
        )
    elif held:
        rows.append([f"on {escape(held.split)}", escape(held.status), escape(held.message[:200])])
    return (
        f'<p class="note">Medians over {score["n"]} seeds of {escape(result.get("split") or "?")} '
        f"(IQR {score['iqr']:.3g}); the baseline graded on the same seeds.</p>"
        + _table(["metric", "best", "baseline"], rows)
    )


def _summary(ws: Workspace, f: Facts, max_evals: int) -> str:
    st, stop = f.state, f.stopped
    now = (
        "running"
        if ws.is_locked()
        else f"stopped ({stop.code or 'no code'}): {stop.reason}"
        if stop
        else "not running (stopped without a record, e.g. crashed)"
    )
    best = "none yet"
    if st.best:
        flops = gflops_text(st.best.gflops, st.best.vendor_gflops, f.vendor)
        best = f"{speedup_text(st.best_speedup)} ({st.best.cid}{'; ' + flops if flops else ''})"
    teams = _table(
        ["team", "preset", "strategy", "state", "evaluations", "best"],
        [
            [
                f'<span class="sw" style="background:{f.teams.get(t.id, "#777")}"></span>'
                + escape(t.id),
                escape(t.preset),
                escape(t.strategy),
                escape(t.state),
                str(t.evaluated),
                speedup_text(t.best_estimate),
            ]
            for t in st.teams.values()
        ],
    )
    return (
        f"<p><b>{escape(st.target)}</b>: {escape(now)}<br>Best <b>{escape(best)}</b> after "
        f"{st.spent_evals} of {max_evals} evaluations ({st.retimes} re-times); "
        f"{st.plateaus} plateaus, {st.restructures} restructures, {st.elapsed_s:.0f} s of "
        "run time.</p>" + teams
    )


def _usage(f: Facts) -> str:
    u = f.state.usage
    unpriced = f" ({u.unpriced_calls} calls without a known price)" if u.unpriced_calls else ""
    return (
        f'<p class="note">{u.calls} LLM calls, {u.prompt + u.completion} tokens '
        f"({u.cached} of the prompt's cached), ${u.cost_usd:.4f}{unpriced}</p>"
        f'<div class="pair">{llm_charts(f.llm)}</div>'
    )


def render(ws: Workspace) -> str:
    log = ws.read_log()  # a torn last line (a run writing it now) is left out
    config = ws.config()
    f = collect(log.events, config)
    if target := sealed_target(ws):
        f.label = target.grader.label if target.grader else f.label
        f.vendor = target.vendor_name
    legend = "".join(
        f'<button class="key" data-team="{escape(t)}"><span class="sw" '
        f'style="background:{c}"></span>{escape(t)}</button>'
        for t, c in f.teams.items()
    )
    bad = tampered(log.bad)
    sections = [
        (
            "Run",
            (f'<p class="no">tampered: {escape(bad)}</p>' if bad else "")
            + _summary(ws, f, config.max_evals),
        )
    ]
    if f.candidates:
        sections.append(
            (
                f"Best {f.label} over evaluations",
                f'<p class="note">Each team\'s best so far (solid; click a team to hide '
                f"it) and the run's best (dashed). Markers above: "
                f'<span style="color:{PLATEAU}">▼ plateaus</span> and '
                f'<span style="color:{RESTRUCTURE}">◆ restructures</span>; hover for '
                f"their reasons.</p><div>{legend}</div>{progress_chart(f)}",
            )
        )
        sections.append(
            (
                "Lineage of candidates",
                '<p class="note">Parent → child, left to right in the order they were '
                "evaluated (a candidate whose agent named no parent hangs from the "
                "baseline, at 0); hollow: failed; ringed: the run's best. Hover a "
                f"candidate for what it tried.</p>{lineage_chart(f)}",
            )
        )
    else:
        sections.append((f"Best {f.label} over evaluations", "<p>No candidate evaluated yet.</p>"))
    result = _best_result(ws, f) if f.best else None
    if f.best and result and result.get("workloads"):
        vendor = f" Vendor: {escape(result['vendor'])}." if result.get("vendor") else ""
        missing = [
            what
            for what, key in (
                ("no vendor timed", "vendor"),
                ("no measured peak (eat doctor)", "peak_fraction"),
            )
            if not any(w.get(key) for w in result["workloads"])
        ]
        sections.append(
            (
                f"Per-workload times of the best ({escape(f.best)})",
                f'<p class="note">Median latency on {escape(result.get("device") or "?")}'
                f' (log scale); speedup over the baseline in brackets; "at peak": '
                f"the time at the device's measured peak throughput.{vendor}"
                f"{' (' + ', '.join(missing) + '.)' if missing else ''}</p>"
                f"{workloads_chart(result)}",
            )
        )
    elif f.best and result and result.get("score"):
        sections.append((f"Grades of the best ({escape(f.best)})", _grades(result, f)))
    else:
        sections.append(("Per-workload times of the best", "<p>No timed best candidate yet.</p>"))
    if f.llm:
        sections.append(("Tokens and cost", _usage(f)))
    else:
        sections.append(
            (
                "Tokens and cost",
                f"<p>No LLM calls: this run's agents and "
                f"supervisor worked offline (model {escape(config.model)}), so it "
                "spent no tokens and nothing.</p>",
            )
        )
    sections.append(
        (
            "Restructure decisions",
            restructure_table(f) if f.restructures else "<p>No restructure yet.</p>",
        )
    )
    learning = read_settled(ws.paths.learning)
    sections.append(
        (
            "LEARNING.md",
            f'<div class="md">{markdown(learning)}</div>' if learning else "<p>No LEARNING.md.</p>",
        )
    )
    body = "".join(f"<section><h2>{title}</h2>{html}</section>" for title, html in sections)
    return PAGE.format(title=escape(f"eat report: {f.state.target}"), css=CSS, js=JS, body=body)


CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1000px;color:#222;
  padding:0 12px}
h1{font-size:22px}
h2{font-size:17px;border-bottom:1px solid #ddd;padding-bottom:3px;margin-top:28px}
svg.chart{width:100%;height:auto;display:block;font-size:11px}
svg text{fill:#333}svg .label,svg .rail{font-size:12px}
.grid{stroke:#e6e6e6}.axis,.tick{stroke:#888}
.pair{display:flex;gap:12px}.pair svg.chart{width:50%}
table{border-collapse:collapse;margin:8px 0;font-size:13px}
td,th{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f5f5f5}
.sw{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:5px}
.key{font:inherit;border:1px solid #ccc;background:#fff;border-radius:4px;margin:0 4px 4px 0;
  cursor:pointer}
.key.off{opacity:.4}.note{color:#555}.yes{color:#1a7f37}.no{color:#b42318}
.md{background:#fafafa;border:1px solid #eee;padding:4px 14px}code{background:#eee;padding:0 3px}
"""

# Errors and the charts drawn are noted on <body> (data-errors, data-charts) so a headless
# browser's dumped DOM shows whether the page worked.
JS = """
(function(){
  var errors=[];
  function note(m){errors.push(String(m));
    if(document.body)document.body.setAttribute('data-errors',errors.join(' | '));}
  window.addEventListener('error',function(e){note(e.message);});
  var original=console.error;
  console.error=function(){note([].join.call(arguments,' '));original.apply(console,arguments);};
  document.addEventListener('DOMContentLoaded',function(){
    var drawn=0;
    document.querySelectorAll('svg.chart').forEach(function(svg){
      var box=svg.getBoundingClientRect();
      if(box.width>0&&box.height>0&&svg.querySelector('[data-mark]')){
        svg.setAttribute('data-drawn','1');drawn++;}
    });
    document.querySelectorAll('button.key').forEach(function(b){
      b.addEventListener('click',function(){
        b.classList.toggle('off');
        document.querySelectorAll('g.team').forEach(function(g){
          if(g.getAttribute('data-team')===b.getAttribute('data-team'))
            g.style.display=b.classList.contains('off')?'none':'';});
      });
    });
    document.body.setAttribute('data-errors',errors.join(' | '));
    document.body.setAttribute('data-charts',String(drawn));
  });
})();
"""

PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title><style>{css}</style><script>{js}</script></head>
<body><h1>{title}</h1>{body}</body></html>
"""
