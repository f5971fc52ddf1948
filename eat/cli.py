"""The `eat` command: parse, build objects, call one function, display.

Exit codes: 0 done (for `eval`: the candidate is ok), 1 the run failed (for `eval`: the
candidate is not ok), 2 bad input, with a one-line reason on stderr.
"""

from __future__ import annotations

import functools
import json
import sys
import time
from pathlib import Path

import typer
from rich.console import Console, Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from eat.errors import EatError, RunnerUnavailable, read_file

# No locals in tracebacks: they may hold keys.
app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
    help="Evolving Agent Teams: make kernels faster with supervised agent teams.",
)
# Piped output would otherwise wrap at 80 columns and break table rows apart.
out = Console(highlight=False, width=None if sys.stdout.isatty() else 120)


def _reports_errors(fn):
    """Turn EatErrors into a one-line message and their exit code."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except EatError as e:
            print("error: " + " ".join(str(e).split()), file=sys.stderr)
            raise typer.Exit(e.exit_code) from None

    return wrapper


def evaluate_file(target_dir: Path, candidate: Path, split: str | None = None):
    """Evaluate one candidate file against a target with this machine's runner (a program
    target's on `split`, by default the one agents are graded on)."""
    from eat.cache import max_bytes
    from eat.doctor import load_peaks
    from eat.errors import BadInput
    from eat.runners import runner_for
    from eat.target import load_target

    t0 = time.monotonic()
    target = load_target(target_dir)
    max_bytes()  # a bad $EAT_CACHE_MAX_GB is refused before anything is built
    source = read_file(candidate)
    runner = runner_for(target, peaks=load_peaks(target.runner))
    why = runner.unavailable(target)
    if why:
        raise RunnerUnavailable(f"{target.name} needs the {target.runner} runner: {why}")
    splits = target.grader.splits if target.grader else []
    if split is not None and split not in splits:
        has = f"has the splits {', '.join(splits)}" if target.program else "is a kernel: no splits"
        raise BadInput(f"--split {split}: {target.name} {has}")
    setup_s = time.monotonic() - t0  # the target, the measured peaks, the device's probe
    if split:
        from eat.runners.program import ProgramRunner

        assert isinstance(runner, ProgramRunner)  # only program targets have splits
        ev = runner.evaluate(target, source, split=split)
    else:
        ev = runner.evaluate(target, source)
    ev.durations = {"setup_s": setup_s} | ev.durations
    return ev


@app.command("eval")
@_reports_errors
def eval_cmd(
    target: Path = typer.Argument(..., help="Target folder (with target.toml)."),
    candidate: Path = typer.Argument(..., help="Candidate source file."),
    as_json: bool = typer.Option(False, "--json", help="Print the Evaluation as JSON."),
    split: str | None = typer.Option(
        None, "--split", help="Program targets: the split to grade on (e.g. held_out)."
    ),
):
    """Build, verify and time one candidate against a target's baseline (a program: grade it)."""
    ev = evaluate_file(target, candidate, split)
    if as_json:
        sys.stdout.write(ev.model_dump_json(indent=2) + "\n")
    else:
        _print_evaluation(ev)
    raise typer.Exit(0 if ev.ok else 1)


def _ms(stat) -> str:
    return "-" if stat is None else f"{stat.median_s * 1e3:.3f} ±{stat.iqr_s * 1e3:.3f}"


def _pct(fraction: float | None) -> str:
    return f"{fraction * 100:.0f}%" if fraction else "-"


def _vendor_peak(w) -> float | None:
    """The vendor's fraction of peak: the candidate's, scaled by their latencies (same work)."""
    if w.peak_fraction and w.vendor:
        return w.peak_fraction * w.candidate.median_s / w.vendor.median_s
    return None


def _print_evaluation(ev) -> None:
    if ev.workloads:
        arch = f" ({ev.arch})" if ev.arch else ""
        # What a target names (its workloads' parameters, metric, vendor) is shown escaped: rich
        # markup would take a [word] in it for a tag and drop it.
        table = Table(title=escape(f"{ev.target} on {ev.device}{arch}; latency: median ±IQR"))
        names = escape("×".join(ev.workloads[0].params))
        vendor_peak = any(_vendor_peak(w) for w in ev.workloads)
        for col in (
            names,
            "candidate ms",
            "baseline ms",
            "vendor ms",
            "speedup",
            "throughput",
            "% peak",
            *(["vendor % peak"] if vendor_peak else []),
        ):
            table.add_column(col, justify="right", no_wrap=True)
        for w in ev.workloads:
            thr = (
                f"{w.gflops:.1f} GFLOP/s" if w.gflops else (f"{w.gbps:.1f} GB/s" if w.gbps else "-")
            )
            table.add_row(
                escape("×".join(map(str, w.params.values()))),
                _ms(w.candidate),
                _ms(w.baseline),
                _ms(w.vendor),
                f"{w.speedup:.2f}x" if w.speedup else "-",
                thr,
                _pct(w.peak_fraction),
                *([_pct(_vendor_peak(w))] if vendor_peak else []),
            )
        out.print(table)
    line = f"[bold]{ev.status}[/bold]"
    if ev.score and ev.baseline_score:
        line += (
            f"  {escape(str(ev.metric))} {ev.score.median:.4g} ±{ev.score.iqr:.2g} against the "
            f"baseline's {ev.baseline_score.median:.4g} over {ev.score.n} seeds of "
            f"{escape(str(ev.split))}: "
            f"gain {ev.speedup:.2f}x"
        )
    elif ev.speedup:
        line += f"  speedup {ev.speedup:.2f}x over the baseline"
    if ev.vs_vendor:
        line += f", {ev.vs_vendor:.2f}x the speed of {escape(str(ev.vendor))}"
    if ev.vendor_speedup:
        line += f" (which is {ev.vendor_speedup:.2f}x over the baseline)"
    out.print(line)
    if not ev.ok:
        out.print(ev.message, markup=False)


@app.command()
@_reports_errors
def doctor(
    refresh: bool = typer.Option(False, "--refresh", help="Measure the peaks again."),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
):
    """Show the hardware and toolchains eat can use, and this machine's measured peaks."""
    from eat.doctor import machine_report

    report = machine_report(refresh=refresh)
    if as_json:
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
        return
    for key, value in report.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in value.items())
        out.print(f"{key:>18}  {'-' if value is None else value}", markup=False)


class _Progress:
    """The live display of a run: evaluations, best speedup, teams and budget left."""

    def __init__(self, live, max_evals: int, max_time: float | None):
        self.live, self.max_evals, self.max_time = live, max_evals, max_time

    def __call__(self, event, state) -> None:
        from eat.events import describe, gflops_text

        table = Table(show_header=True, header_style="bold", box=None)
        for col in ("team", "strategy", "state", "evals", "best"):
            table.add_column(col)
        for t in state.teams.values():
            table.add_row(
                t.id,
                t.strategy,
                t.state + (" (exhausted)" if t.exhausted else ""),
                str(t.evaluated),
                f"{t.best_estimate:.2f}x" if t.best_estimate else "-",
            )
        best = state.best
        budget = f"{state.spent_evals}/{self.max_evals} evaluations"
        if self.max_time:
            budget += f", {max(0.0, self.max_time - state.elapsed_s):.0f} s left"
        shown = "-"
        if best:
            flops = gflops_text(best.gflops, best.vendor_gflops, None)
            shown = f"{best.estimate:.2f}x ({best.cid}{'; ' + flops if flops else ''})"
        head = (
            f"[bold]{budget}[/bold]   best: {shown}"
            f"   plateaus {state.plateaus}, restructures {state.restructures}"
        )
        # Text, not markup: the line quotes agents and people ("[/tmp]" broke the display).
        self.live.update(Group(head, table, Text(f"last: {describe(event)}"[:200])))


def _warn_unfenced(config) -> None:
    """Say on stderr, before the run starts, when its external agents will not be fenced."""
    from eat.agents.fence import warning

    if line := warning(config):
        Console(stderr=True, highlight=False).print(line, style="bold yellow", markup=False)


def _best_line(st: dict) -> str:
    """The run's best as `eat status` and the end of a run say it: its gain and, where the
    target counts its flops, its GFLOP/s beside the vendor's from the same evaluation."""
    from eat.events import gflops_text

    if not st["best_gain"]:
        return "best: none yet"
    cid, gain = st["best_candidate"], st["best_gain"]
    if st["best_score"] is not None:
        return (
            f"best: {cid}, {st['metric']} gain {gain:.2f}x, {st['metric']} {st['best_score']:.4g}"
        )
    flops = gflops_text(st["best_gflops"], st["vendor_gflops"], st["vendor"])
    return f"best: {cid}, {gain:.2f}x the baseline" + (f"; {flops}" if flops else "")


def _run_with_progress(fn, *args, shown_evals: int, shown_time: float | None, **kwargs):
    from rich.live import Live

    from eat.status import run_status

    with Live(console=out, refresh_per_second=4, transient=False) as live:
        path, stop = fn(*args, on_event=_Progress(live, shown_evals, shown_time), **kwargs)
    out.print()
    out.print(f"stopped: {stop}", markup=False)
    out.print(_best_line(run_status(path)), markup=False)
    out.print(f"workspace: {path}   (eat status {path}; eat resume {path})", markup=False)
    raise typer.Exit(stop.exit_code)


_MAX_EVALS = typer.Option(None, "--max-evals", help="Evaluations in the whole run.")
_MAX_TIME = typer.Option(None, "--max-time", help="Seconds in the whole run (all sessions).")
_MAX_COST = typer.Option(None, "--max-cost", help="LLM spend cap in USD for the whole run.")
_MAX_CALLS = typer.Option(
    None,
    "--max-llm-calls",
    help="LLM calls in the whole run (default: 10 per evaluation of --max-evals).",
)
_WORKERS = typer.Option(
    None,
    "--workers",
    help="Teams' turns running at once, one per team "
    "(default: one fewer than the cores, at least 1).",
)
_EXECUTOR = typer.Option(
    None,
    "--executor",
    # \\[: the help is rich markup, which took [ray] for a tag and printed 'eat'
    help="'local' (default) or 'ray': builds, "
    "verification and timing in a Ray actor (pip install 'eat\\[ray]').",
)
_RAY_ADDRESS = typer.Option(
    None,
    "--ray-address",
    help="A running Ray cluster (default with --executor ray: a local instance on loopback).",
)


@app.command()
@_reports_errors
def start(
    target: Path = typer.Argument(..., help="Target folder (with target.toml)."),
    workspace: Path = typer.Option(
        None, "--workspace", "-w", help="New workspace folder (default: workspaces/...)."
    ),
    model: str = typer.Option(None, "--model", help="'offline' (default) or a litellm model."),
    supervisor_model: str = typer.Option(
        None, "--supervisor-model", help="litellm model for the supervisor (default: rules)."
    ),
    api_base: str = typer.Option(
        None, "--api-base", help="OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1."
    ),
    max_evals: int = _MAX_EVALS,
    max_time: float = _MAX_TIME,
    max_cost: float = _MAX_COST,
    max_llm_calls: int = _MAX_CALLS,
    workers: int = _WORKERS,
    executor: str = _EXECUTOR,
    ray_address: str = _RAY_ADDRESS,
    seed: int = typer.Option(None, "--seed", help="Seed of the offline agents' choices."),
    agent: str = typer.Option(
        None,
        "--agent",
        help="Agent runtime of every team: "
        "prompt, tools, command, claude-code, codex, aider, "
        "mini-swe-agent (default: each preset's).",
    ),
    agent_command: str = typer.Option(
        None, "--agent-command", help="The command the `command` runtime runs in a team's worktree."
    ),
    config: Path = typer.Option(
        None,
        "--config",
        help="TOML file of run settings (default: ./eat.toml if present); flags override it.",
    ),
    skill: Path = typer.Option(
        None,
        "--skill",
        help="SKILL.md of an earlier run on the "
        "same knobs (eat skill export): every agent and the "
        "supervisor get it; offline teams start from its best.",
    ),
):
    """Start a run on a target in a new workspace."""
    from eat.config import make_config, settings_file
    from eat.target import load_target

    flags = {
        k: v
        for k, v in [
            ("model", model),
            ("seed", seed),
            ("max_evals", max_evals),
            ("max_time_s", max_time),
            ("max_cost_usd", max_cost),
            ("api_base", api_base),
            ("supervisor_model", supervisor_model),
            ("max_llm_calls", max_llm_calls),
            ("workers", workers),
            ("executor", executor),
            ("ray_address", ray_address),
            ("agent", agent),
            ("agent_command", agent_command),
        ]
        if v is not None
    }
    if agent_command is not None and agent is None:
        flags["agent"] = "command"
    options = settings_file(config) | flags
    shown = make_config(target=str(target), **options)
    load_target(target)  # a bad target is said at once, not after the loop's imports (~2 s)
    _warn_unfenced(shown)
    from eat.run import start_run

    _run_with_progress(
        start_run,
        target,
        workspace,
        shown_evals=shown.max_evals,
        shown_time=shown.max_time_s,
        skill=skill,
        **options,
    )


@app.command()
@_reports_errors
def resume(
    workspace: Path = typer.Argument(..., help="Workspace folder of the run."),
    max_evals: int = _MAX_EVALS,
    max_time: float = _MAX_TIME,
    max_cost: float = _MAX_COST,
    max_llm_calls: int = _MAX_CALLS,
    workers: int = _WORKERS,
    executor: str = _EXECUTOR,
    ray_address: str = _RAY_ADDRESS,
    accept_target_change: bool = typer.Option(
        False,
        "--accept-target-change",
        help="Go on although the target folder "
        "changed since the run started: it is the run's target from here on.",
    ),
):
    """Continue a stopped or crashed run; budgets are totals for the run, not increments."""
    from eat.run import resume_run
    from eat.workspace import Workspace

    config = Workspace.open(workspace).config()
    _warn_unfenced(config)
    _run_with_progress(
        resume_run,
        workspace,
        shown_evals=max_evals or config.max_evals,
        shown_time=max_time or config.max_time_s,
        accept_target_change=accept_target_change,
        **{
            k: v
            for k, v in [
                ("max_evals", max_evals),
                ("max_time_s", max_time),
                ("max_cost_usd", max_cost),
                ("max_llm_calls", max_llm_calls),
                ("workers", workers),
                ("executor", executor),
                ("ray_address", ray_address),
            ]
            if v is not None
        },
    )


@app.command()
@_reports_errors
def status(
    workspace: Path = typer.Argument(..., help="Workspace folder of the run."),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
):
    """Show a run's progress: evaluations, best speedup, teams (safe while it runs)."""
    from eat.status import run_status

    st = run_status(workspace)
    if as_json:
        sys.stdout.write(json.dumps(st, indent=2) + "\n")
        return
    state = (
        "running"
        if st["running"]
        else f"stopped: {st['stopped']}: {st['stop_reason']}"
        if st["stopped"]
        else "stopped: crashed"
    )
    out.print(f"{st['target']}  {state}", markup=False)
    if st["tampered"]:
        out.print(f"tampered: {st['tampered']}", markup=False)
    if st["skill"]:
        out.print(
            f"started from the skill {st['skill']['name']} ({st['skill']['file']}: "
            f"{st['skill']['best']} at {st['skill']['best_speedup']:.2f}x)",
            markup=False,
        )
    out.print(_best_line(st), markup=False)
    out.print(
        f"evaluations {st['evaluations']}/{st['max_evals']} ({st['retimes']} re-times), "
        + (f"{st['copies']} copies of an evaluated program, " if st["copies"] else "")
        + f"plateaus {st['plateaus']}, restructures {st['restructures']}, "
        f"LLM calls {st['llm_calls']}/{st['max_llm_calls']}",
        markup=False,
    )
    if held := st.get("held_out"):
        figures = (
            f"{st['metric']} {held['score']:.4g} against "
            f"the baseline's {held['baseline_score']:.4g} (gain {held['gain']:.2f}x)"
            if held["status"] == "ok"
            else f"{held['status']}: {held['message']}"
        )
        out.print(f"held-out ({held['split']}) of {held['candidate']}: {figures}", markup=False)
    table = Table(box=None)
    for col in ("team", "strategy", "state", "evals", "near top", "best"):
        table.add_column(col)
    for t in st["teams"]:
        table.add_row(
            t["id"],
            t["strategy"],
            t["state"],
            str(t["evaluations"]),
            str(t["near_top"]),
            f"{t['best_gain']:.2f}x ({t['best_candidate']})" if t["best_gain"] else "-",
        )
    out.print(table)
    if any((t["best_gain"] or 0) > (st["best_gain"] or 0) for t in st["teams"]):
        out.print(
            "(a team's best is its highest median; the run's is ranked by median less measured "
            "spread, so one lucky timing does not lead the run)",
            markup=False,
        )


@app.command()
@_reports_errors
def watch(
    workspace: Path = typer.Argument(..., help="Workspace folder of the run."),
    once: bool = typer.Option(False, "--once", help="Print one frame and exit."),
):
    """Watch a run live: its best and curve, teams, plateaus, restructures, LLM spend.

    Each team shows its latest candidates; the view is redrawn as events land (Ctrl-C leaves)."""
    from eat.watch import watch as watch_run

    raise typer.Exit(watch_run(workspace, out, once=once))


@app.command()
@_reports_errors
def steer(
    workspace: Path = typer.Argument(..., help="Workspace folder of the run."),
    text: str = typer.Argument(..., help="What to tell the agents and the supervisor."),
    team: str = typer.Option(None, "--team", help="Tell one team only."),
):
    """Tell a run something: its next prompts carry it, and history.jsonl records it.

    The team's prompts, or every team's and the supervisor's; the event is human_steered."""
    from eat.steer import send

    _, running = send(workspace, text, team)
    out.print(
        "sent: the run picks it up within 2 s"
        if running
        else "queued: the run picks it up when it resumes (eat resume)",
        markup=False,
    )


@app.command()
@_reports_errors
def report(
    workspace: Path = typer.Argument(..., help="Workspace folder of the run."),
    output: Path = typer.Option(
        None, "--output", "-o", help="HTML file to write (default: report.html in the workspace)."
    ),
):
    """Write one self-contained HTML file about a run (safe while it runs).

    Progress, lineage, per-workload times, tokens and cost, restructures, LEARNING.md."""
    from eat.report import write_report

    out.print(f"wrote {write_report(workspace, output)}", markup=False)


skill_app = typer.Typer(no_args_is_help=True, help="What a run learned, as a reusable SKILL.md.")
app.add_typer(skill_app, name="skill")


@skill_app.command("export")
@_reports_errors
def skill_export(
    workspace: Path = typer.Argument(..., help="Workspace folder of the run."),
    out_file: Path = typer.Option(None, "--out", "-o", help="File to write (default: ./SKILL.md)."),
):
    """Write what a run learned as a SKILL.md, for people and for `eat start --skill`.

    Lessons with evidence, knob effects, dead ends, the best candidate and its best
    configurations."""
    from eat.skill import export

    out.print(f"wrote {export(workspace, out_file)}", markup=False)


def _agent_request(kind: str, message: str, as_json: bool) -> None:
    from eat.desk import ask

    reply = ask(kind, message)
    if as_json:
        sys.stdout.write(json.dumps(reply, indent=2) + "\n")
    else:
        head = reply["status"] + (f" {reply['candidate']}" if reply.get("candidate") else "")
        if reply.get("metric") and reply.get("score"):  # a program's grades
            head += f"  {reply['metric']} {reply['score']['median']:.4g}"
            if reply.get("baseline_score"):
                head += f" (baseline {reply['baseline_score']['median']:.4g})"
            if reply.get("gain"):
                head += f", gain {reply['gain']:.2f}x"
        elif reply.get("speedup"):
            head += f"  speedup {reply['speedup']:.2f}x"
        if reply.get("new_best"):
            head += "  (the run's new best)"
        out.print(head, markup=False)
        for line in reply.get("workloads", []):
            out.print(f"  {line}", markup=False)
        if reply.get("status") != "ok" or kind != "submit":
            for key in ("message", "log", "profile"):
                if reply.get(key):
                    out.print(str(reply[key]).rstrip(), markup=False)
    raise typer.Exit(0 if reply.get("status") == "ok" else 1)


_AS_JSON = typer.Option(False, "--json", help="Print the reply as JSON.")


@app.command()
@_reports_errors
def submit(
    message: str = typer.Option("", "--message", "-m", help="What this candidate tries."),
    as_json: bool = _AS_JSON,
):
    """Inside a team's worktree (an agent): evaluate the candidate, keep it as the team's.

    Exit 0 when it is correct."""
    _agent_request("submit", message, as_json)


@app.command()
@_reports_errors
def check(as_json: bool = _AS_JSON):
    """Inside a team's worktree (an agent): build and verify the candidate, untimed.

    Exit 0 when it is correct."""
    _agent_request("check", "", as_json)


@app.command()
@_reports_errors
def profile(as_json: bool = _AS_JSON):
    """Inside a team's worktree (an agent): the candidate's times and tools' view of it.

    Its per-workload times (once submitted) and what the compiler or the GPU profiler says."""
    _agent_request("profile", "", as_json)


import_app = typer.Typer(
    no_args_is_help=True,
    help="Turn a KernelBench, GPU MODE or FlashInfer-Bench problem into a target folder.",
)
app.add_typer(import_app, name="import")
_OUT = typer.Option(
    None,
    "--out",
    "-o",
    help="Target folder to write (default: ./NAME); it must not exist or be empty.",
)
_RUNNER = typer.Option("cuda", "--runner", help="cuda, rocm or cpu (torch's CPU build).")


def _imported(path: Path) -> None:
    out.print(f"wrote {path}   (eat eval {path} {path / 'baseline.py'})", markup=False)


@import_app.command("kernelbench")
@_reports_errors
def import_kernelbench_cmd(
    file: Path = typer.Argument(
        ..., help="Problem file: class Model, get_inputs, get_init_inputs."
    ),
    out_dir: Path = _OUT,
    runner: str = _RUNNER,
    sizes: str = typer.Option(
        None,
        "--sizes",
        help="published (the problem's own) or fit "
        "(scaled to what one CPU core holds and runs quickly; the "
        "default with --runner cpu).",
    ),
):
    """A KernelBench problem; candidates define class ModelNew."""
    from eat.formats.kernelbench import import_kernelbench

    _imported(import_kernelbench(file, out_dir, runner, sizes))


@import_app.command("gpumode")
@_reports_errors
def import_gpumode_cmd(
    task_dir: Path = typer.Argument(..., help="Task folder with task.yml and reference.py."),
    out_dir: Path = _OUT,
    runner: str = _RUNNER,
):
    """A GPU MODE reference-kernels task; candidates define custom_kernel(data)."""
    from eat.formats.gpumode import import_gpumode

    _imported(import_gpumode(task_dir, out_dir, runner))


@import_app.command("flashinfer")
@_reports_errors
def import_flashinfer_cmd(
    definition: Path = typer.Argument(..., help="Definition JSON."),
    workloads: Path = typer.Argument(
        None, help="Workloads JSONL (needed when the definition has var axes)."
    ),
    out_dir: Path = _OUT,
    runner: str = _RUNNER,
):
    """A FlashInfer-Bench definition; candidates define run(*inputs, *outputs)."""
    from eat.formats.flashinfer_bench import import_flashinfer

    _imported(import_flashinfer(definition, workloads, out_dir, runner))


def main() -> None:
    app()
