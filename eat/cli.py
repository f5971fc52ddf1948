"""The `eat` command: parse, build objects, call one function, display.

Exit codes: 0 done (for `eval`: the candidate is ok), 1 the run failed (for `eval`: the
candidate is not ok), 2 bad input, with a one-line reason on stderr.
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from eat.errors import BadInput, EatError, RunnerUnavailable

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="Evolving Agent Teams: make kernels faster with supervised agent teams.")
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


def _read_file(path: Path) -> str:
    if not path.is_file():
        raise BadInput(f"{path}: file not found")
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise BadInput(f"{path}: cannot read: {e}") from None


def evaluate_file(target_dir: Path, candidate: Path):
    """Evaluate one candidate file against a target with this machine's runner."""
    from eat.doctor import load_peaks
    from eat.runners.base import get_runner
    from eat.target import load_target

    target = load_target(target_dir)
    source = _read_file(candidate)
    runner = get_runner(target.runner, peaks=load_peaks())
    why = runner.unavailable(target)
    if why:
        raise RunnerUnavailable(f"{target.name} needs the {target.runner} runner: {why}")
    return runner.evaluate(target, source)


@app.command("eval")
@_reports_errors
def eval_cmd(target: Path = typer.Argument(..., help="Target folder (with target.toml)."),
             candidate: Path = typer.Argument(..., help="Candidate source file."),
             as_json: bool = typer.Option(False, "--json", help="Print the Evaluation as JSON.")):
    """Build, verify and time one candidate against a target's baseline."""
    ev = evaluate_file(target, candidate)
    if as_json:
        sys.stdout.write(ev.model_dump_json(indent=2) + "\n")
    else:
        _print_evaluation(ev)
    raise typer.Exit(0 if ev.ok else 1)


def _ms(stat) -> str:
    return "-" if stat is None else f"{stat.median_s * 1e3:.3f} ±{stat.iqr_s * 1e3:.3f}"


def _print_evaluation(ev) -> None:
    if ev.workloads:
        table = Table(title=f"{ev.target} on {ev.device}; latency: median ±IQR")
        names = "×".join(ev.workloads[0].params)
        for col in (names, "candidate ms", "baseline ms", "vendor ms", "speedup",
                    "throughput", "% peak"):
            table.add_column(col, justify="right", no_wrap=True)
        for w in ev.workloads:
            thr = f"{w.gflops:.1f} GFLOP/s" if w.gflops else (
                f"{w.gbps:.1f} GB/s" if w.gbps else "-")
            peak = f"{w.peak_fraction * 100:.0f}%" if w.peak_fraction else "-"
            table.add_row("×".join(map(str, w.params.values())), _ms(w.candidate),
                          _ms(w.baseline), _ms(w.vendor),
                          f"{w.speedup:.2f}x" if w.speedup else "-", thr, peak)
        out.print(table)
    line = f"[bold]{ev.status}[/bold]"
    if ev.speedup:
        line += f"  speedup {ev.speedup:.2f}x over the baseline"
    if ev.vs_vendor:
        line += f", {ev.vs_vendor:.2f}x the speed of {ev.vendor}"
    out.print(line)
    if not ev.ok:
        out.print(ev.message, markup=False)


@app.command()
@_reports_errors
def doctor(refresh: bool = typer.Option(False, "--refresh", help="Measure the peaks again."),
           as_json: bool = typer.Option(False, "--json", help="Print as JSON.")):
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


def main() -> None:
    app()
