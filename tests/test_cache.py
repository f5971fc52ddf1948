"""The cache's cap (eat/cache.py): builds and input sets removed least recently used first,
never one used within the last hour, never locks, anchors or doctor.json; a real evaluation
that finds its input sets and builds pruned makes them again; and a build changed in the cache
(not the file eat built there) is built again, never loaded.

Real files throughout; ages are set with os.utime, never waited for.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from eat import cache
from eat.errors import BadInput
from eat.runners import sets
from eat.runners.cpu import CpuRunner
from eat.target import load_target

HOUR = 3600


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch) -> Path:
    """A cache of this test's own, and no input sets remembered from other tests."""
    monkeypatch.setenv("EAT_CACHE_DIR", str(tmp_path / "cache"))
    sets.forget()
    return tmp_path / "cache"


def _aged(path: Path, hours: float) -> Path:
    """`path`, last used `hours` ago."""
    then = time.time() - hours * HOUR
    os.utime(path, (then, then))
    return path


def _build(name: str, size: int, hours: float) -> Path:
    path = cache.builds_dir() / name
    path.write_bytes(b"x" * size)
    return _aged(path, hours)


def _set_folder(name: str, sizes: list[int], hours: float) -> Path:
    folder = cache.inputs_dir() / name
    folder.mkdir()
    for i, size in enumerate(sizes):
        (folder / f"w0-s{i}.set").write_bytes(b"x" * size)
    return _aged(folder, hours)


def test_the_least_recently_used_go_first_until_under_the_cap():
    """A folder counts the bytes of its files; removal goes oldest first and stops as soon as
    the rest fits."""
    oldest = _set_folder("t-0000000000000001", [150, 150], hours=6)
    a = _build("cand-a.so", 100, hours=5)
    b = _build("cand-b.so", 100, hours=4)
    newer = _set_folder("t-0000000000000002", [200], hours=3)
    assert cache.prune(limit_bytes=400) == [oldest]  # 700 - 300 fits
    assert cache.prune(limit_bytes=250) == [a, b]
    assert cache.prune(limit_bytes=250) == []
    assert sorted(cache.inputs_dir().iterdir()) == [newer]  # no trash left behind
    assert list(cache.builds_dir().iterdir()) == []


def test_what_was_used_within_the_hour_stays_even_over_the_cap(monkeypatch):
    """Entries used in the last idle_s are kept at any size; so is one a reader marks used
    after prune listed it; crash leftovers go once they are as old."""
    old = _build("cand-old.so", 10, hours=2)
    fresh = _set_folder("t-0000000000000003", [1000], hours=2)
    cache.used(fresh)
    raced = _build("cand-raced.so", 10, hours=3)
    stale_part = _build("cand-x.1-2.part", 10, hours=2)
    live_part = _build("cand-y.1-2.part", 10, hours=0.5)
    trash = _set_folder(f"{cache.TRASH}t-0000000000000004.1", [10], hours=2)
    listing = cache.listing
    monkeypatch.setattr(cache, "listing", lambda: (listing(), cache.used(raced))[0])
    assert sorted(cache.prune(limit_bytes=0)) == sorted([stale_part, trash, old])
    assert fresh.is_dir() and raced.exists() and live_part.exists()


def test_a_builds_sha256_goes_with_it_and_one_left_alone_is_a_leftover():
    """A build's sha256 is no entry of its own: it is removed with its build; one whose build
    is gone is removed once it is as old as a crash's `.part` must be."""
    build = _build("cand-a.so", 100, hours=2)
    _build("cand-a.so.sha256", 64, hours=5)  # written when built, never marked used since
    lone = _build("cand-gone.so.sha256", 64, hours=2)
    on_its_way = _build("cand-new.so.sha256", 64, hours=0.5)  # keep_build writes it first
    assert cache.prune(limit_bytes=100) == [lone]  # the build alone is within the cap
    assert cache.prune(limit_bytes=0) == [build]
    assert list(cache.builds_dir().iterdir()) == [on_its_way]


def test_locks_anchors_and_the_doctors_file_are_never_removed(own_cache):
    with cache.device_lock("cpu0"):
        pass
    (cache.anchors_dir() / "k.json").write_text("{}")
    cache.doctor_file().write_text("{}")
    litter = cache.inputs_dir() / ".cache"  # what a child with HOME there leaves
    litter.mkdir()
    kept = [
        own_cache / "locks" / "cpu0.lock",
        cache.anchors_dir() / "k.json",
        cache.doctor_file(),
        litter,
    ]
    for path in kept:
        _aged(path, hours=24 * 30)
    assert cache.prune(limit_bytes=0, idle_s=0) == []
    assert all(path.exists() for path in kept)


def test_an_evaluation_after_its_sets_and_builds_were_pruned_makes_them_again(quick_matmul):
    """The process keeps the sets' manifest; once another process has pruned the folder it is
    made again, and the candidate is compiled again, in the same process and runner."""
    target = load_target(quick_matmul)
    runner = CpuRunner()
    source = f"// eat:cflags -O2\n{target.baseline_source()}"
    assert runner.evaluate(target, source).status == "ok"
    (folder,) = cache.inputs_dir().iterdir()
    builds = sorted(cache.builds_dir().iterdir())
    removed = cache.prune(limit_bytes=0, idle_s=0)
    assert sorted(removed) == sorted([folder, *(b for b in builds if b.suffix != cache.SIDECAR)])
    assert list(cache.builds_dir().iterdir()) == []  # each sha256 went with its build
    again = runner.evaluate(target, source)
    assert again.status == "ok", again.message
    assert folder.is_dir() and sorted(cache.builds_dir().iterdir()) == builds


# Another build of the baseline, whose loading leaves a mark (before the harness confines writes).
IMPOSTOR = """
#include <stdio.h>
__attribute__((constructor)) static void loaded(void) { fclose(fopen("%s", "w")); }
"""


@pytest.mark.parametrize(
    "build, change",
    [
        ("baseline", "another build"),
        ("baseline", "garbage"),
        ("baseline", "no sha256"),
        ("candidate", "garbage"),
    ],
)
def test_a_build_changed_in_the_cache_is_built_again_never_loaded(
    quick_matmul, tmp_path, build, change
):
    """Each use checks the library kept in the cache against the sha256 recorded when it was
    built: replaced by another build or by garbage, or with no sha256 beside it, it is built
    again and the evaluation is as on an untouched cache."""
    target = load_target(quick_matmul)
    runner = CpuRunner()
    source = f"// eat:cflags -O2\n{target.baseline_source()}"
    assert runner.evaluate(target, source).ok
    pattern = f"{target.name}-baseline-*.so" if build == "baseline" else "cand-*.so"
    (lib,) = cache.builds_dir().glob(pattern)
    mark = tmp_path / "loaded"
    if change == "another build":
        impostor = tmp_path / "impostor.c"
        impostor.write_text(target.baseline_source() + IMPOSTOR % mark)
        subprocess.run(
            ["gcc", "-shared", "-fPIC", "-O0", "-o", str(lib), str(impostor)], check=True
        )
    elif change == "garbage":
        lib.write_bytes(b"\x7fELF not a library")
    else:
        lib.with_name(lib.name + cache.SIDECAR).unlink()
    shutil.rmtree(cache.anchors_dir())  # so the baseline is timed, not scaled from the vendor
    ev = runner.evaluate(target, source)
    assert ev.ok and ev.speedup, ev.message
    assert cache.intact_build(lib) and not mark.exists()


def test_maybe_prune_prunes_once_per_interval_unless_forced_and_never_raises_oserror(monkeypatch):
    calls = []

    def prune():
        calls.append(1)
        raise OSError("disk gone")

    monkeypatch.setattr(cache, "prune", prune)
    cache.forget_prunes()
    cache.maybe_prune()
    cache.maybe_prune()
    assert len(calls) == 1
    cache.maybe_prune(force=True)
    assert len(calls) == 2


@pytest.mark.parametrize("value", ["abc", "0", "-1", "nan", "inf"])
def test_a_cap_that_is_not_a_positive_number_is_refused(monkeypatch, value):
    monkeypatch.setenv("EAT_CACHE_MAX_GB", value)
    with pytest.raises(BadInput, match="EAT_CACHE_MAX_GB.*positive number"):
        cache.prune()


def test_the_cap_is_in_gigabytes(monkeypatch):
    assert cache.max_bytes() == 20 * 10**9
    monkeypatch.setenv("EAT_CACHE_MAX_GB", "0.5")
    assert cache.max_bytes() == 5 * 10**8


def test_eat_eval_and_start_refuse_a_bad_cap_before_anything_is_written(
    tmp_path, quick_matmul, monkeypatch
):
    """One line and exit 2, no workspace made; an evaluation already running never sees it
    (maybe_prune keeps it to itself)."""
    import subprocess
    import sys

    env = os.environ | {"EAT_CACHE_MAX_GB": "lots"}
    for args in (
        ["eval", str(quick_matmul), str(quick_matmul / "baseline.c")],
        ["start", str(quick_matmul), "-w", str(tmp_path / "ws")],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "eat", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert "EAT_CACHE_MAX_GB='lots'" in done.stderr
    assert not (tmp_path / "ws").exists()
    monkeypatch.setenv("EAT_CACHE_MAX_GB", "lots")
    cache.maybe_prune(force=True)
