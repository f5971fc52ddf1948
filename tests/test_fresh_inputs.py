"""Input sets (eat/runners/inputs.py): fresh inputs for timed calls, made once per target, kept
on disk under a key of the target's content, made again when changed after they were made; and
the CPU runner's anchor (a slow baseline timed once, then scaled from the vendor's time).

Everything here is real: gcc, the contained harness processes, the files on disk.
"""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import numpy as np
import pytest

from eat.runners import inputs, native, runner_for, sets
from eat.runners.base import HarnessError
from eat.runners.cpu import CpuRunner
from eat.target import EvalConfig, load_target

ROOT = Path(__file__).resolve().parent.parent
KIT = ROOT / "tests" / "conformance" / "kits" / "cpu"
MEMO = (KIT / "memo_by_content.c").read_text()
QUICK = EvalConfig(seeds=1, warmup=1, min_repeats=5, max_repeats=8, budget_s=0.2)


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """A cache of this test's own, and no input sets remembered from other tests."""
    monkeypatch.setenv("EAT_CACHE_DIR", str(tmp_path / "cache"))
    sets.forget()


def _sets(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "cache" / "inputs").iterdir())


def test_a_memo_of_inputs_gains_only_when_inputs_repeat():
    """The content-keyed memo computes as the naive baseline does: with a fresh set for every
    timed call it is level with it; squeeze the pool to one set and it replays its way far
    ahead, which is what the fresh sets take away."""
    target = load_target(ROOT / "examples" / "cpu_matmul")
    fresh = CpuRunner().evaluate(target, MEMO, config=QUICK)
    repeating = CpuRunner().evaluate(target, MEMO, config=QUICK.model_copy(update={"pool_mb": 1}))
    assert fresh.status == repeating.status == "ok", (fresh.message, repeating.message)
    assert fresh.speedup < 2, fresh.speedup
    assert repeating.speedup > 10, repeating.speedup


def test_sets_are_made_once_and_remade_when_the_target_changes(tmp_path):
    """A second runner in the same cache reuses the sets; a changed reference gets new ones,
    and the baseline that matched the old reference is judged against the new one."""
    kit = tmp_path / "kit"
    shutil.copytree(KIT, kit)
    baseline = (kit / "baseline.c").read_text()
    assert CpuRunner().evaluate(load_target(kit), baseline, config=QUICK).status == "ok"
    (first,) = _sets(tmp_path)
    made = {p.name: p.stat().st_mtime_ns for p in first.iterdir()}
    sets.forget()  # as a new process would start
    assert CpuRunner().evaluate(load_target(kit), baseline, config=QUICK).status == "ok"
    assert {p.name: p.stat().st_mtime_ns for p in first.iterdir()} == made
    ref = kit / "reference.py"
    ref.write_text(ref.read_text().replace("return A", "return 2 * A", 1))
    ev = CpuRunner().evaluate(load_target(kit), baseline, config=QUICK)
    assert ev.status == "incorrect", ev.message
    assert len(_sets(tmp_path)) == 2


def test_timed_sets_are_new_seeds_one_per_call(tmp_path):
    """Verification takes seeds 0..seeds-1; timing a pool of others, warmup + max_repeats."""
    kit = load_target(KIT)
    assert CpuRunner().evaluate(kit, (KIT / "baseline.c").read_text(), config=QUICK).ok
    (folder,) = _sets(tmp_path)
    names = {p.name for p in folder.glob("w0-*.set")}
    assert "w0-s0.set" in names and "w0-s1.set" not in names
    timed = names - {"w0-s0.set"}
    assert len(timed) == QUICK.warmup + QUICK.max_repeats


def _change(path: Path, how: str) -> None:
    """Write into a set file as something other than eat might."""
    if how == "append":
        with open(path, "ab") as f:
            f.write(b"\0" * 8)
    else:  # rewritten in place, its size kept: one byte of the last expected value flipped
        data = bytearray(path.read_bytes())
        data[-9] ^= 0xFF
        path.write_bytes(bytes(data))


def _sizes(cfg: EvalConfig) -> tuple:
    """The pool sizes a manifest is kept for."""
    return tuple(getattr(cfg, k) for k in ("seeds", "warmup", "max_repeats", "pool_mb"))


@pytest.mark.parametrize("how", ["append", "rewrite"])
def test_a_set_changed_on_disk_is_made_again(tmp_path, how):
    """A set written into after it was made is found changed by the harness while this process
    holds its manifest: the sets are made again and the evaluation run once more. A later
    process (the memory cleared) makes it again too, rather than trust it. Either way the
    file is as made, and matches its manifest."""
    kit = load_target(KIT)
    runner = CpuRunner()
    baseline = kit.baseline_source()
    assert runner.evaluate(kit, baseline, config=QUICK).ok
    (folder,) = _sets(tmp_path)
    victim = folder / "w0-s0.set"
    made = victim.read_bytes()
    for later_process in (False, True):
        _change(victim, how)
        if later_process:
            sets.forget()
        ev = runner.evaluate(kit, baseline, config=QUICK)
        assert ev.ok, ev.message
        assert victim.read_bytes() == made
        assert inputs.read_manifest(folder, _sizes(QUICK))


def test_a_set_changed_again_once_made_anew_is_the_targets_error(monkeypatch):
    """The evaluation is run once more only: when the sets made anew are found changed too
    (here every manifest the harness gets names a fingerprint no file has), HarnessError."""
    made = []
    real_make = sets.make_sets

    def wrong(*args):
        manifest = real_make(*args)
        made.append(manifest)
        manifest["workloads"][0]["verify"][0][1] = "0:0:0"
        return manifest

    monkeypatch.setattr(sets, "make_sets", wrong)
    monkeypatch.setattr(sets.inputs, "read_manifest", lambda folder, sizes: None)
    kit = load_target(KIT)
    with pytest.raises(HarnessError, match="changed on disk"):
        CpuRunner().evaluate(kit, kit.baseline_source(), config=QUICK)
    assert len(made) == 2


def test_prepare_makes_again_what_changed_since_a_manifest_recorded_it(tmp_path):
    """A set file whose fingerprint none of the folder's manifests records for it is made
    again; one that matches any of them (another pool size's, made since) is kept."""
    folder = tmp_path / "sets"
    cfg = {"seeds": 2, "warmup": 0, "max_repeats": 1, "pool_mb": 1}
    calls = []

    def make(wi, seed):
        calls.append(seed)
        return {"inputs": {"x": np.full(4, seed, np.float32)}, "expected": {}}

    def files(made: dict) -> list:
        return [[w[mode] for mode in ("verify", "time")] for w in made["workloads"]]

    inputs.write_manifest(folder, (2, 0, 1, 1), inputs.prepare(folder, cfg, 1, make))
    _change(folder / "w0-s1.set", "append")
    calls.clear()
    again = inputs.prepare(folder, cfg, 1, make)
    assert calls == [0, 1]  # seed 0 is always made, in memory: what a set costs
    inputs.write_manifest(folder, (2, 0, 1, 2), again)  # the first manifest is stale now
    calls.clear()
    assert files(inputs.prepare(folder, cfg, 1, make)) == files(again) and calls == [0]


def test_a_workload_whose_sets_exceed_the_room_gets_seeds_not_files(tmp_path):
    """Over `room`, prepare writes nothing for the workload and names the seeds its harness
    makes; under it, files as before (each workload decided alone)."""
    folder = tmp_path / "sets"
    cfg = {"seeds": 2, "warmup": 1, "max_repeats": 3, "pool_mb": 1}

    def make(wi, seed):  # workload 1's set is 1 MiB, workload 0's 16 bytes
        return {
            "inputs": {"x": np.full(4 if wi == 0 else 1 << 18, seed, np.float32)},
            "expected": {},
        }

    made = inputs.prepare(folder, cfg, 2, make, room=1 << 20)
    small, big = made["workloads"]
    assert [name for name, _ in small["verify"]] == ["w0-s0.set", "w0-s1.set"]
    assert big["generate"] == {"verify": [0, 1], "time": [inputs.TIMED_SEED0]}  # 1 MiB: pool 1
    assert big["bytes"] == 1 << 20 and "verify" not in big
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        name for mode in ("verify", "time") for name, _ in small[mode]
    )
    sets = inputs.workload_sets(
        {"sets": made | {"dir": str(folder)}, "mode": "verify"}, 1, lambda seed: make(1, seed)
    )
    assert isinstance(sets, inputs.MadeSets) and [s["inputs"]["x"][0] for s in sets.sets] == [0, 1]


# A Python target's sets go through the same files and the same retry; torch on the CPU.
TORCH_TOML = """
name = "double"
runner = "cpu"
language = "pytorch"
[entry]
name = "double"
[reference]
file = "reference.py"
function = "reference"
inputs = "inputs"
[baseline]
file = "baseline.py"
[[workloads]]
n = 64
[tolerance]
rtol = 1e-6
[evaluation]
seeds = 1
timed = false
timeout_s = 60
"""

TORCH_REFERENCE = """
import torch

def inputs(seed, n):
    return [torch.randn(n, generator=torch.Generator().manual_seed(seed))]

def reference(x):
    return 2 * x
"""


@pytest.mark.slow  # five processes that import torch
def test_a_python_targets_set_changed_on_disk_is_made_again(tmp_path):
    pytest.importorskip("torch")
    kit = tmp_path / "double"
    kit.mkdir()
    for name, text in (
        ("target.toml", TORCH_TOML),
        ("reference.py", TORCH_REFERENCE),
        ("baseline.py", "def double(x):\n    return 2 * x\n"),
    ):
        (kit / name).write_text(textwrap.dedent(text))
    target = load_target(kit)
    runner = runner_for(target)
    source = target.baseline_source()
    assert runner.evaluate(target, source).ok
    (folder,) = _sets(tmp_path)
    victim = folder / "w0-s0.set"
    made = victim.read_bytes()
    _change(victim, "rewrite")
    ev = runner.evaluate(target, source)
    assert ev.ok, ev.message
    assert victim.read_bytes() == made


@pytest.mark.slow
def test_the_slow_baseline_is_timed_once_then_scaled_from_the_vendor():
    """On a target with a vendor, the first evaluation times both; the next ones time the
    candidate and the cheaper of the two (numpy's BLAS, not the naive loop) and scale the
    other's time by the ratio measured."""
    target = load_target(ROOT / "examples" / "cpu_matmul")
    runner = CpuRunner()
    source = target.baseline_source()
    first = runner.evaluate(target, source, config=QUICK)
    second = runner.evaluate(target, source, config=QUICK)
    assert first.ok and second.ok
    assert "scaled" not in first.detail
    assert "the baseline's time is the vendor's scaled" in second.detail["scaled"]
    for a, b in zip(first.workloads, second.workloads):
        ratio = b.baseline.median_s / b.vendor.median_s
        assert ratio == pytest.approx(a.baseline.median_s / a.vendor.median_s)
    # Measured again after RECHECK uses at the latest (sooner if the vendor's time drifts).
    later = [runner.evaluate(target, source, config=QUICK) for _ in range(native.Anchor.RECHECK)]
    assert any("scaled" not in ev.detail for ev in later)


def test_the_anchor_outlives_the_runner_and_is_dropped_when_the_vendor_changes(tmp_path):
    """`eat eval` is one evaluation per process: a second runner (another process, as far as
    the anchor knows) finds the ratio the first measured in the cache and times only the
    anchor; an edit of the vendor's file measures both again."""
    kit = tmp_path / "matmul"
    shutil.copytree(ROOT / "examples" / "cpu_matmul", kit)
    target = load_target(kit)
    source = target.baseline_source()
    assert "scaled" not in CpuRunner().evaluate(target, source, config=QUICK).detail
    assert "scaled" in CpuRunner().evaluate(target, source, config=QUICK).detail
    vendor = kit / target.vendor.file
    vendor.write_text(vendor.read_text() + "\n# edited\n")
    assert "scaled" not in CpuRunner().evaluate(target, source, config=QUICK).detail


def test_the_anchor_counts_what_loading_the_vendor_costs():
    """A vendor whose calls are cheaper but whose loading (torch's import, say) costs more than
    the baseline's calls would take is not the anchor."""
    timed = [
        {
            "baseline": {"median_s": 1e-3, "iqr_s": 0.0, "n": 30},
            "vendor": {"median_s": 1e-5, "iqr_s": 0.0, "n": 30},
        }
    ] * 4
    assert native.Anchor.measure(timed, 32, vendor_load_s=0.0).kind == "vendor"
    assert native.Anchor.measure(timed, 32, vendor_load_s=3.0).kind == "baseline"


def test_a_vendor_that_cannot_load_is_left_out(tmp_path):
    """A vendor whose module fails to import (torch missing, say) is not timed; the candidate
    is still judged and timed against the baseline, and the evaluation says why."""
    kit = tmp_path / "matmul"
    shutil.copytree(ROOT / "examples" / "cpu_matmul", kit)
    (kit / "vendor.py").write_text("import eat_no_such_module\n")
    toml = kit / "target.toml"
    toml.write_text(
        toml.read_text().replace(
            'file = "reference.py"\nfunction = "vendor"', 'file = "vendor.py"\nfunction = "vendor"'
        )
    )
    target = load_target(kit)
    assert target.vendor.file == "vendor.py"
    ev = CpuRunner().evaluate(target, target.baseline_source(), config=QUICK)
    assert ev.ok and ev.speedup and ev.vs_vendor is None
    assert "eat_no_such_module" in ev.detail["vendor_error"]


def test_a_candidate_far_slower_than_the_best_is_timed_out_early():
    """Once the runner has timed a fast candidate, an unoptimised one (30 to 60 times slower,
    so a busy machine's noise cannot close the gap) stops after race_rounds rounds on each
    workload, before its floor of rounds, and says so; a runner that has timed nothing faster
    times it in full."""
    target = load_target(ROOT / "examples" / "cpu_matmul")
    cfg = QUICK.model_copy(update={"race_rounds": 3})
    naive = target.baseline_source()
    fast = f"// eat:cflags -O3 -march=native\n#define LOOP_ORDER IKJ\n{naive}"
    runner = CpuRunner()
    assert runner.evaluate(target, fast, config=cfg).ok
    lost = runner.evaluate(target, f"// eat:cflags -O0\n{naive}", config=cfg)
    assert lost.ok and "raced" in lost.detail
    # Stopped before its floor of min_repeats rounds, which only the race does: at round 3,
    # or a round later where a loaded machine's noise blurred three rounds' medians.
    assert all(3 <= w.candidate.n < cfg.min_repeats for w in lost.workloads)
    alone = CpuRunner().evaluate(target, naive, config=cfg)
    assert alone.ok and "raced" not in alone.detail
    assert all(w.candidate.n >= cfg.min_repeats for w in alone.workloads)


class _Stub:
    """Just enough of a harness Workload for time_all: a pool of sets, nothing to check."""

    label, sets = "stub", [None] * 200

    def load(self, i):
        pass

    def check_inputs(self, i, when):
        pass

    def check_outputs(self, i, tol, when):
        pass


class _Clock:
    """A timer whose calls report the time they return: no clock, no noise but what is given."""

    def flush(self):
        pass

    def time(self, call):
        return call()


def test_a_baseline_already_timed_precisely_is_timed_no_more():
    """The candidate gets min_repeats timed calls; a baseline whose median is sure to within
    target_rse stops at harness.REFERENCE_MIN; a noisy one goes on with the candidate."""
    from itertools import cycle

    from eat.runners import harness

    job = {
        "config": QUICK.model_dump()
        | {"min_repeats": 30, "max_repeats": 60, "budget_s": 60.0, "target_rse": 0.01},
        "tolerance": {"rtol": 1e-3, "atol": 0.0},
    }
    noisy = cycle([1.0, 1.5, 0.7, 1.3])
    impls = {
        "candidate": lambda w: lambda: next(noisy),
        "baseline": lambda w: lambda: 2.0,
        "vendor": lambda w: lambda: next(noisy),
    }
    res = harness.time_all(job, [_Stub()], impls, _Clock(), watch_others=False)
    (timed,) = res["workloads"]
    assert timed["baseline"]["n"] == harness.REFERENCE_MIN
    assert timed["candidate"]["n"] == timed["vendor"]["n"] >= 30


def test_a_later_process_finds_the_sets_without_asking_the_reference(tmp_path, monkeypatch):
    """The sets' manifest is kept beside them: a new process (here: the per-process memory
    cleared) checks every file's fingerprint and starts no child; once a file no longer
    matches, the child is asked again."""
    kit = load_target(KIT)
    runner, baseline = CpuRunner(), kit.baseline_source()
    assert runner.evaluate(kit, baseline, config=QUICK).ok
    started = []
    real_run = native.sandbox.run
    monkeypatch.setattr(
        native.sandbox, "run", lambda cmd, **kw: started.append(cmd[-1]) or real_run(cmd, **kw)
    )
    sets.forget()
    assert runner.evaluate(kit, baseline, config=QUICK).ok
    assert "eat.runners.inputs" not in started
    (folder,) = _sets(tmp_path)
    next(folder.glob("w0-s0.set")).touch()  # a new ctime: not the file that was made
    sets.forget()
    assert runner.evaluate(kit, baseline, config=QUICK).ok
    assert "eat.runners.inputs" in started


def test_a_check_verifies_without_timing():
    """timed=False (what `eat check` asks for): a correct candidate is ok with no speedup and
    no time spent timing; a wrong one is still caught."""
    kit = load_target(KIT)
    check = QUICK.model_copy(update={"timed": False})
    ok = CpuRunner().evaluate(kit, kit.baseline_source(), config=check)
    assert ok.status == "ok" and ok.speedup is None and "time_s" not in ok.durations
    wrong = CpuRunner().evaluate(kit, (KIT / "wrong.c").read_text(), config=check)
    assert wrong.status == "incorrect"


def test_an_anchor_is_kept_per_workload_list(tmp_path):
    """Two copies of a target that differ only in their workloads share the baseline's build
    but not an anchor: one ratio per workload, so another list's would not fit."""
    kits = []
    for name, rows in (("a", [8, 16]), ("b", [8, 16, 24])):
        kit = tmp_path / name / "matmul"
        shutil.copytree(ROOT / "examples" / "cpu_matmul", kit)
        toml = kit / "target.toml"
        text = toml.read_text()
        text = (
            text[: text.index("[[workloads]]")]
            + "".join(f"[[workloads]]\nM = {n}\nN = {n}\nK = {n}\n\n" for n in rows)
            + text[text.index("[tolerance]") :]
        )
        toml.write_text(text)
        kits.append(load_target(kit))
    a, b = kits
    runner = CpuRunner()
    assert runner.evaluate(a, a.baseline_source(), config=QUICK).ok
    ev = runner.evaluate(b, b.baseline_source(), config=QUICK)
    assert ev.ok and "scaled" not in ev.detail and all(w.speedup for w in ev.workloads)
