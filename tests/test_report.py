"""`eat report`: one self-contained HTML file whose charts and tables match the run's log, and
that a real browser loads without errors."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pytest
import serial_run
from typer.testing import CliRunner

from eat.cli import app
from eat.events import LLMCalled
from eat.report import write_report
from eat.workspace import Workspace

CHROMIUM = Path("/usr/bin/chromium")


class Page(HTMLParser):
    """Every element's tag, attributes, enclosing team group and text (<title>s included)."""

    def __init__(self, html: str):
        super().__init__()
        self.elements: list[dict] = []
        self.open: list[dict] = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        team = next(
            (e["attrs"].get("data-team") for e in reversed(self.open) if e["tag"] == "g"), None
        )
        el = {
            "tag": tag,
            "attrs": dict(attrs),
            "team": team,
            "text": "",
            "parent": self.open[-1] if self.open else None,
        }
        self.elements.append(el)
        if tag not in ("meta", "br", "hr", "img", "input", "link"):  # HTML's void elements
            self.open.append(el)

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if self.open and self.open[-1] is self.elements[-1]:
            self.open.pop()

    def handle_endtag(self, tag):
        while self.open:
            if self.open.pop()["tag"] == tag:
                break

    def handle_data(self, data):
        for el in self.open:
            el["text"] += data

    def find(self, tag: str, **attrs) -> list[dict]:
        return [
            e
            for e in self.elements
            if e["tag"] == tag
            and all(e["attrs"].get(k.replace("_", "-")) == v for k, v in attrs.items())
        ]


@pytest.fixture(scope="module")
def run60(tmp_path_factory) -> Path:
    """60 evaluations of the scripted landscape by the offline teams, supervision on."""
    ws = tmp_path_factory.mktemp("report") / "ws"
    serial_run.run(ws, max_evals=60)
    return ws


def _events(ws: Path) -> list:
    return Workspace.open(ws).read_events()[0]


def test_the_report_of_a_60_evaluation_run_matches_its_log(run60):
    events = _events(run60)
    out = write_report(run60, None)
    assert out == Workspace.open(run60).paths.report
    html = out.read_text()
    assert out.stat().st_size < 2 * 1024 * 1024
    page = Page(html)
    for el in page.elements:  # nothing is loaded from anywhere
        for key in ("src", "href", "xlink:href"):
            assert key not in el["attrs"], el
        assert el["tag"] not in ("link", "img", "iframe", "object", "embed"), el
    assert "url(" not in html and "@import" not in html
    assert "http://" not in html and "https://" not in html

    cands = [e for e in events if e.type == "candidate_evaluated"]
    assert len(cands) >= 55  # a few of the 60 are re-times of the elite
    # The team lines: a point at each evaluation of a team that has a best by then.
    expected, has_best = [], set()
    for c in cands:
        if c.status == "ok":
            has_best.add(c.team)
        if c.team in has_best:
            expected.append(c)
    assert len(expected) >= len(cands) - 3  # few failures come before a team's first success
    points = page.find("circle", **{"class": "pt"})
    assert Counter(p["team"] for p in points) == Counter(c.team for c in expected)
    in_order = sorted(points, key=lambda p: float(p["attrs"]["cx"]))
    assert [p["text"].split()[0] for p in in_order] == [c.candidate for c in expected]
    run_line = page.find("g", **{"class": "run"})
    assert len(run_line) == 1  # the run's best
    best = max(c.speedup for c in cands if c.speedup)
    assert "run best" == run_line[0]["attrs"]["data-team"] and f"{best:.2f}x" in html

    plateaus = [e for e in events if e.type == "plateau_detected"]
    restructures = [e for e in events if e.type == "restructured"]
    assert plateaus and restructures
    marks = page.find("polygon", **{"class": "plateaus"})
    assert len(marks) == len(plateaus)
    assert all(p.message in m["text"] for p, m in zip(plateaus, marks))
    marks = page.find("polygon", **{"class": "restructures"})
    assert len(marks) == len(restructures)
    assert all(r.reason in m["text"] for r, m in zip(restructures, marks))

    # Lineage: every candidate a node, one edge each, to its parent (or the baseline).
    nodes = page.find("circle", **{"class": "node"})
    assert [n["attrs"]["data-cid"] for n in nodes] == [c.candidate for c in cands]
    for n, c in zip(nodes, cands):
        assert f"from {c.parent or 'the baseline'}" in n["text"]
    lineage = page.find("svg", data_chart="lineage")[0]
    path = next(e for e in page.elements if e["tag"] == "path" and e["parent"] is lineage)
    assert path["attrs"]["d"].count("M") == len(cands)

    # Per-workload bars of the best: the fake runner times the baseline and the candidate.
    bars = page.find("rect", **{"class": "bar"})
    assert len(bars) == 2 * 3 and sum("baseline" in b["text"] for b in bars) == 3

    # Restructure decisions with their scores.
    table = page.find("table", **{"class": "restructures"})[0]
    rows = [e for e in page.elements if e["tag"] == "tr" and e["parent"] is table][1:]
    assert len(rows) == len(restructures)
    scores = {e.restructure: e for e in events if e.type == "restructure_scored"}
    for row, r in zip(rows, restructures):
        cells = [e["text"] for e in page.elements if e["tag"] == "td" and e["parent"] is row]
        assert cells[0] == str(r.seq) and cells[2] == r.op and cells[3] == (r.team or "-")
        s = scores.get(r.seq)
        if s is not None:
            verdict = "helped" if s.helped else "did not help"
        elif r.op == "retire":  # judged by the evidence it rests on, never scored
            verdict = "not scored: it changed no team whose results could judge it"
        else:  # the run stopped before the window its teams had to judge it
            verdict = "not scored yet: the run stopped"
        assert cells[-1].startswith(verdict), cells
    unscored = [r.op for r in restructures if r.seq not in scores]
    assert "retire" in unscored and {"retire"} < set(unscored)  # both kinds are in this run

    text = html.replace("&#x27;", "'")
    assert "No LLM calls" in text  # an offline run says so instead of an empty chart
    assert "## Lessons" not in html and "<h4>Lessons</h4>" in html  # LEARNING.md, rendered
    assert "eat:begin" not in html
    assert len(page.find("svg", **{"class": "chart"})) == 3


def _with_llm_calls(run60: Path, dst: Path) -> Path:
    """A copy of the run with a few LLM calls appended, one from a team named to break HTML."""
    shutil.copytree(run60, dst)
    ws = Workspace.open(dst)
    ws.load()
    for i in range(1, 6):
        ws.append(
            LLMCalled(
                agent="<script>alert(1)</script>/coder",
                model="openai/m",
                prompt_tokens=1000 * i,
                completion_tokens=100,
                cost_usd=0.01 * i,
                elapsed_s=30.0 * i,
            )
        )
    with open(ws.paths.learning, "a") as f:
        f.write("\nA person's note: <b>keep PACK=2</b> & **bold** `code`\n")
    return dst


def test_llm_calls_are_charted_and_text_is_escaped(run60, tmp_path):
    ws = _with_llm_calls(run60, tmp_path / "ws")
    html = write_report(ws, tmp_path / "r.html").read_text()
    page = Page(html)
    assert [s["attrs"]["data-chart"] for s in page.find("svg", **{"class": "chart"})] == [
        "progress",
        "lineage",
        "workloads",
        "tokens",
        "cost",
    ]
    tokens = page.find("svg", data_chart="tokens")[0]
    line = next(e for e in page.elements if e["tag"] == "polyline" and e["parent"] is tokens)
    assert len(line["attrs"]["points"].split()) == 5
    assert "5 LLM calls, 15500 tokens" in html and "$0.1500" in html
    assert "<script>alert" not in html and "&lt;b&gt;keep PACK=2&lt;/b&gt; &amp;" in html
    assert "<strong>bold</strong> <code>code</code>" in html


def test_a_running_run_with_a_torn_log_is_read_and_left_as_it_is(run60, tmp_path):
    ws = tmp_path / "ws"
    shutil.copytree(run60, ws)
    history = Workspace.open(ws).paths.history
    with open(history, "ab") as f:
        f.write(b'{"type": "candidate_evaluated", "seq": 99')  # a write in progress
    before = history.read_bytes()
    html = write_report(ws, tmp_path / "r.html").read_text()
    assert history.read_bytes() == before
    assert len(Page(html).find("circle", **{"class": "node"})) == len(
        [e for e in _events(run60) if e.type == "candidate_evaluated"]
    )


def test_bad_input_exits_2_and_damages_nothing(run60, tmp_path):
    ws = tmp_path / "ws"
    shutil.copytree(run60, ws)
    (tmp_path / "empty").mkdir()
    before = {p: p.read_bytes() for p in ws.rglob("*") if p.is_file()}
    for args, words in [
        ([str(tmp_path / "nope")], "no such workspace"),
        ([str(tmp_path / "empty")], "not an eat workspace"),
        ([str(ws), "-o", str(tmp_path / "no" / "r.html")], "no such folder"),
        ([str(ws), "-o", str(ws / "teams")], "is a folder"),
        ([str(ws), "-o", str(ws / "eat.toml" / "r.html")], "no such folder"),
        ([str(ws), "-o", "/proc/eat-report.html"], "cannot write"),
    ]:
        done = CliRunner().invoke(app, ["report", *args])
        assert done.exit_code == 2, (args, done.output)
        assert done.stderr.count("\n") == 1 and words in done.stderr, done.stderr
    after = {p: p.read_bytes() for p in ws.rglob("*") if p.is_file()}
    assert after == before and not (tmp_path / "no").exists()
    ok = CliRunner().invoke(app, ["report", str(ws)])
    assert ok.exit_code == 0 and (ws / "report.html").is_file()


def _dump_dom(pages: list[Path], tmp_path: Path) -> list[str]:
    """Each page's DOM after its scripts ran, from headless Chromium (run side by side)."""
    procs = []
    for i, page in enumerate(pages):
        argv = [
            str(CHROMIUM),
            "--headless",
            "--disable-gpu",
            "--no-first-run",
            f"--user-data-dir={tmp_path / f'chromium-{i}'}",
            "--virtual-time-budget=5000",
            "--dump-dom",
            page.as_uri(),
        ]
        if os.geteuid() == 0:
            argv.insert(1, "--no-sandbox")  # Chromium refuses to sandbox as root
        procs.append(
            subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        )
    return [p.communicate(timeout=120)[0] for p in procs]


@pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="needs Debian's chromium (/usr/bin/chromium) for the headless-browser check",
)
@pytest.mark.slow
def test_a_browser_loads_the_page_without_errors_and_draws_every_chart(run60, tmp_path):
    report = write_report(_with_llm_calls(run60, tmp_path / "ws"), tmp_path / "r.html")
    # The same page with a broken script: proves the page's error recorder reports errors.
    broken = tmp_path / "broken.html"
    broken.write_text(
        report.read_text().replace("</body>", "<script>notDefinedAnywhere();</script></body>")
    )
    good, bad = _dump_dom([report, broken], tmp_path)

    body = Page(good).find("body")[0]["attrs"]
    charts = Page(good).find("svg", **{"class": "chart"})
    assert body.get("data-errors") == "", body.get("data-errors")
    assert len(charts) == 5 and body.get("data-charts") == "5"
    assert all(c["attrs"].get("data-drawn") == "1" for c in charts)
    assert "notDefinedAnywhere" in Page(bad).find("body")[0]["attrs"].get("data-errors", "")
