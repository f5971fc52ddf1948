"""The `eat` command as a user runs it: exit codes, one-line errors, JSON keys."""

import json
import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).parent.parent
MATMUL = ROOT / "examples" / "cpu_matmul"


def eat(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "eat", *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


def _one_line_error(done: subprocess.CompletedProcess, *words: str) -> None:
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    for w in words:
        assert w in lines[0]
    assert done.stdout == ""


def test_missing_target_and_candidate_exit_2(tmp_path):
    _one_line_error(eat("eval", str(tmp_path / "none"), "x.c"), "none", "no such target folder")
    _one_line_error(eat("eval", str(MATMUL), str(tmp_path / "gone.c")), "gone.c", "not found")
    _one_line_error(eat("eval", str(MATMUL), str(tmp_path)), str(tmp_path), "is a folder")


def test_malformed_target_names_file_and_field(tmp_path):
    (tmp_path / "target.toml").write_text(
        (MATMUL / "target.toml").read_text().replace("rtol = 1e-4", 'rtol = "tight"')
    )
    for f in ("reference.py", "baseline.c"):
        (tmp_path / f).write_text((MATMUL / f).read_text())
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    _one_line_error(
        eat("eval", str(tmp_path), str(MATMUL / "baseline.c")), "target.toml", "tolerance.rtol"
    )
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_a_bad_option_names_the_flag_the_user_typed(tmp_path):
    import typer.main

    from eat.cli import app
    from eat.config import FLAGGED, flag

    ws = tmp_path / "ws"
    _one_line_error(
        eat("start", str(MATMUL), "-w", str(ws), "--max-time", "-5"),
        "max_time_s (--max-time)",
        "greater than 0",
    )
    assert not ws.exists()
    # every option named by its flag is one `eat start` takes
    start = typer.main.get_command(app).commands["start"]
    assert {flag(f) for f in FLAGGED} <= {o for p in start.params for o in p.opts}


@pytest.mark.slow
def test_eval_baseline_json_reports_speedups_from_its_own_medians():
    done = eat("eval", str(MATMUL), str(MATMUL / "baseline.c"), "--json")
    assert done.returncode == 0, done.stderr
    ev = json.loads(done.stdout)
    assert ev["status"] == "ok"
    rows = ev["workloads"]
    assert len(rows) == 3 and all(w["gflops"] > 0 for w in rows)
    assert rows[0]["vendor"]["n"] >= 7
    # The figures follow from the medians printed beside them; how near 1 the baseline against
    # itself lands is the machine's noise (a shared CI machine gave 0.75), not eat's behaviour.
    ratios = [w["baseline"]["median_s"] / w["candidate"]["median_s"] for w in rows]
    assert [w["speedup"] for w in rows] == pytest.approx(ratios)
    assert ev["speedup"] == pytest.approx(math.prod(ratios) ** (1 / 3))
    vendor = [w["baseline"]["median_s"] / w["vendor"]["median_s"] for w in rows]
    assert ev["vendor_speedup"] == pytest.approx(math.prod(vendor) ** (1 / 3))
    # Where the wall time went, the command's own setup (target, peaks, device probe) first.
    assert list(ev["durations"]) == ["setup_s", "compile_s", "verify_s", "time_s"]
    assert all(v >= 0 for v in ev["durations"].values())


def test_eval_compile_error_exits_1_with_message(tmp_path):
    bad = tmp_path / "bad.c"
    bad.write_text(
        "void matmul(const float *A, const float *B, float *C, int M, int N, int K)"
        " { this is not C }\n"
    )
    done = eat("eval", str(MATMUL), str(bad), "--json")
    assert done.returncode == 1
    ev = json.loads(done.stdout)
    assert ev["status"] == "compile_error" and "error" in ev["message"]
    assert ev["speedup"] is None


def test_doctor_reports_peaks_as_json():
    done = eat("doctor", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["cores"] >= 1 and report["peak_gflops_1core"] > 0
    assert report["peak_gbps_1core"] > 0


@pytest.mark.parametrize("example", ["cuda_matmul", "rocm_softmax"])
def test_start_on_a_gpu_target_without_the_gpu_is_one_line_and_writes_nothing(tmp_path, example):
    """The machines that run the tests have no GPU: the run must not begin (no workspace)."""
    from eat.runners import runner_for
    from eat.target import load_target

    if runner_for(load_target(ROOT / "examples" / example)).unavailable() is None:
        pytest.skip(f"this machine can run {example}")
    done = eat("start", str(ROOT / "examples" / example), "--workspace", str(tmp_path / "ws"))
    _one_line_error(done, example, "needs the")
    assert not (tmp_path / "ws").exists()


def test_eval_report_shows_the_arch_and_the_vendor_against_the_baseline_and_the_peak(monkeypatch):
    """What `eat eval` prints for a GPU target with a vendor (an Evaluation made up here: the
    figures are an H200's kind, not measured)."""
    from rich.console import Console

    from eat import cli
    from eat.runners.base import Evaluation, Stat, WorkloadResult

    def row(cand, base, vend, gbps, peak):
        return WorkloadResult(
            params={"rows": 4096, "cols": 4096},
            candidate=Stat(median_s=cand, iqr_s=0, n=30),
            baseline=Stat(median_s=base, iqr_s=0, n=30),
            vendor=Stat(median_s=vend, iqr_s=0, n=30),
            speedup=base / cand,
            gbps=gbps,
            peak_fraction=peak,
        )

    ev = Evaluation(
        status="ok",
        message="verified and timed",
        target="cuda_softmax",
        runner="cuda",
        device="cuda:0 NVIDIA H200",
        arch="sm_90a",
        vendor="torch.softmax (PyTorch's CUDA kernel)",
        speedup=20.0,
        vs_vendor=0.5,
        vendor_speedup=40.0,
        workloads=[row(1e-4, 2e-3, 5e-5, 1342.0, 0.33)],
    )
    monkeypatch.setattr(cli, "out", Console(record=True, width=160))
    cli._print_evaluation(ev)
    text = cli.out.export_text()
    assert "cuda:0 NVIDIA H200 (sm_90a)" in text
    assert "vendor % peak" in text and "33%" in text and "66%" in text  # 0.33 * 1e-4 / 5e-5
    assert (
        "speedup 20.00x over the baseline, 0.50x the speed of torch.softmax (PyTorch's CUDA "
        "kernel) (which is 40.00x over the baseline)"
    ) in " ".join(text.split())


def _commands(group=None, path=()):
    """(path, click command) for every command and group of the CLI, depth first."""
    import typer.main

    from eat.cli import app

    for name, cmd in (group or typer.main.get_command(app)).commands.items():
        yield (*path, name), cmd
        if hasattr(cmd, "commands"):
            yield from _commands(cmd, (*path, name))


def test_every_help_text_reaches_the_user_whole():
    """The help is rich markup: an unescaped [word] is taken for a tag and vanishes (the
    --executor help printed "pip install 'eat'")."""
    import re

    every = list(_commands())
    texts = [
        (path, p.name, p.help)
        for path, cmd in every
        for p in cmd.params
        if getattr(p, "help", None)
    ] + [(path, None, cmd.help) for path, cmd in every]
    assert len(texts) > 50
    eaten = [(p, n, t) for p, n, t in texts if t and re.search(r"(?<!\\)\[[a-z][\w,-]*\]", t)]
    assert not eaten
    done = eat("start", "--help")
    assert "eat[ray]" in done.stdout


def test_each_command_is_summed_up_in_one_line_of_the_list():
    """`eat --help` lists a command by its help's first paragraph with its line breaks: a
    summary wrapped in the source broke mid-sentence there ("... latest candidates, the" and
    "supervisor's plateaus ..." on a line of its own)."""
    summaries = {" ".join(path): (cmd.help or "").split("\n\n")[0] for path, cmd in _commands()}
    assert len(summaries) > 15 and all(summaries.values())
    assert not {p: s for p, s in summaries.items() if "\n" in s.strip()}


def test_what_a_target_names_is_printed_as_written(capsys):
    """A program's metric and split and a vendor's name are the target's words: rich markup
    would drop a [word] in them."""
    from eat import cli
    from eat.runners.base import Evaluation, Grade, Stat, WorkloadResult

    grade = Grade(median=0.9, iqr=0.01, n=5)
    ev = Evaluation(
        status="ok",
        speedup=1.2,
        metric="f1[macro]",
        split="dev[small]",
        score=grade,
        baseline_score=grade,
        vendor="lib[fast]",
        vs_vendor=1.1,
        target="t[x]",
        device="cpu",
        workloads=[WorkloadResult(params={"n": 4}, candidate=Stat(median_s=1e-3, iqr_s=0.0, n=3))],
    )
    cli._print_evaluation(ev)
    shown = capsys.readouterr().out
    assert all(w in shown for w in ("f1[macro]", "dev[small]", "lib[fast]", "t[x]")), shown


def test_the_live_display_shows_what_agents_and_people_wrote_as_written():
    """The last event's line quotes agents' ideas and people's steering: a '[/tmp]' in it was
    taken for a closing markup tag and raised, ending the display."""
    import io

    from rich.console import Console

    from eat import cli
    from eat.events import HumanSteered
    from eat.state import RunState

    screen = Console(file=io.StringIO(), width=200)
    progress = cli._Progress(SimpleNamespace(update=screen.print), max_evals=10, max_time=None)
    event = HumanSteered(source="steer", text="keep scratch files out of [/tmp] [bold]")
    progress(event, RunState())
    assert "keep scratch files out of [/tmp] [bold]" in screen.file.getvalue()


def test_the_live_display_puts_the_best_beside_the_vendor():
    import io

    from history import History
    from rich.console import Console

    from eat import cli
    from eat.events import CandidateEvaluated

    run = History("coordinate-1")
    event = run.add(
        CandidateEvaluated(
            candidate="c0001",
            team="coordinate-1",
            source_hash="h1",
            status="ok",
            speedup=40.0,
            gflops=110.7,
            vendor_gflops=100.74,
        )
    )
    screen = Console(file=io.StringIO(), width=200)
    progress = cli._Progress(SimpleNamespace(update=screen.print), max_evals=10, max_time=None)
    progress(event, run.state)
    shown = screen.file.getvalue()
    assert "best: 40.00x (c0001; 110.7 GFLOP/s, the vendor 100.7 GFLOP/s)" in shown
