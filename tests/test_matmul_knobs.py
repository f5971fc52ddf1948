"""cpu_matmul's knobs: a representative set of combinations builds and is correct on the real CPU
runner, edge blocks included (every value of every knob at least once, every micro-kernel shape,
the largest blocks with every packing)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import EXAMPLES, QUICK_EVALUATION

from eat.agents.offline import render
from eat.runners import runner_for
from eat.runners.native import program_text
from eat.target import load_target

NATIVE = "-O3 -march=native"
# The loop nest (MR 0): every order, tile, unroll factor and set of flags.
LOOP_NEST = [
    {},  # the baseline's own configuration
    {"LOOP_ORDER": "IKJ", "TILE": 16, "UNROLL": 2, "CFLAGS": "-O3"},
    {"LOOP_ORDER": "JIK", "TILE": 32, "UNROLL": 4, "CFLAGS": NATIVE},
    {"LOOP_ORDER": "JKI", "TILE": 64, "UNROLL": 8, "CFLAGS": NATIVE + " -ffast-math"},
    {"LOOP_ORDER": "KIJ", "TILE": 128, "UNROLL": 1, "CFLAGS": NATIVE + " -funroll-loops"},
    {"LOOP_ORDER": "KJI", "TILE": 256, "UNROLL": 2, "CFLAGS": "-O2"},
]
# The micro-kernel: every MR x NR shape, packing, k-block depth, unroll factor and set of flags
# taken in turn (-O2 and -O3 build its vectors from SSE halves).
_CYCLES = {
    "PACK": [0, 1, 2],
    "TILE": [0, 16, 32, 64, 128, 256],
    "UNROLL": [1, 2, 4, 8],
    "CFLAGS": [NATIVE, "-O2", NATIVE + " -ffast-math", "-O3", NATIVE + " -funroll-loops"],
    "VEC": [8, 16, 16],  # 16 where NR is not a multiple of it falls back to 8
}
MICRO = [
    {"MR": mr, "NR": nr, **{k: v[n % len(v)] for k, v in _CYCLES.items()}}
    for n, (mr, nr) in enumerate((mr, nr) for mr in (2, 4, 6, 8) for nr in (8, 16, 24, 32))
]
# The corners: the largest block with each packing, k blocks deeper than the odd K and shallow,
# in 8- and 16-float vectors.
CORNERS = [
    {"MR": 8, "NR": 32, "PACK": p, "TILE": t, "UNROLL": 8, "CFLAGS": NATIVE}
    for p, t in ((0, 256), (1, 256), (2, 256), (2, 16))
] + [{"MR": 8, "NR": 32, "PACK": p, "TILE": 16, "VEC": 16, "CFLAGS": NATIVE} for p in (0, 2)]
CONFIGS = LOOP_NEST + MICRO + CORNERS
# Besides the target's own (511x257x129 among them): a matrix smaller than one block, and a K
# deeper than the deepest k block with a remainder.
EXTRA_WORKLOADS = """
[[workloads]]
M = 3
N = 5
K = 7

[[workloads]]
M = 13
N = 33
K = 300
"""


def _id(knobs: dict) -> str:
    return "-".join(f"{k}{v}".replace(" ", "") for k, v in knobs.items()) or "baseline"


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    """examples/cpu_matmul with the quick evaluation settings and the extra workloads."""
    dst = tmp_path_factory.mktemp("knobs") / "cpu_matmul"
    shutil.copytree(EXAMPLES / "cpu_matmul", dst)
    with open(dst / "target.toml", "a") as f:
        f.write(QUICK_EVALUATION + EXTRA_WORKLOADS)
    return load_target(dst)


def test_the_set_takes_every_value_of_every_knob():
    knobs = load_target(Path(EXAMPLES) / "cpu_matmul").knobs
    for name, knob in knobs.items():
        seen = {c.get(name, knob.values[0]) for c in CONFIGS}
        assert seen == set(knob.values), name


@pytest.mark.slow
@pytest.mark.parametrize("knobs", CONFIGS, ids=_id)
def test_knob_combination_is_correct(target, knobs):
    runner = runner_for(target)
    if why := runner.unavailable(target):
        pytest.skip(why)
    source = render(target, knobs)
    for name, value in knobs.items():
        if name != "CFLAGS":
            assert f"#define {name} {value}\n" in source
    ev = runner.evaluate(target, source)
    assert ev.status == "ok", (ev.message, ev.detail, ev.compile_log[-2000:])
    assert len(ev.workloads) == len(target.workloads) == 5
    assert all(w.speedup and w.speedup > 0 for w in ev.workloads)


def test_configurations_that_build_one_program_get_one_key(target):
    """The CPU runner's program key (the real compiler's preprocessor): a knob the
    micro-kernel does not build (LOOP_ORDER) or a comment leaves it; a knob it builds, a flag,
    or a macro a pragma reads changes it."""
    runner = runner_for(target)
    key = lambda knobs, extra="": runner.program(target, render(target, knobs) + extra)  # noqa: E731
    kernel = {"MR": 6, "NR": 16, "CFLAGS": NATIVE}
    one = key(kernel)
    assert one and key({**kernel, "LOOP_ORDER": "IKJ"}) == one
    assert key(kernel, "\n/* a note */\n") == one
    assert key({**kernel, "MR": 4}) != one and key({**kernel, "CFLAGS": "-O3"}) != one
    assert key({**kernel, "UNROLL": 4}) != one
    assert key({"LOOP_ORDER": "IKJ"}) != key({})  # the loop nest builds it
    # The preprocessor leaves `#pragma GCC unroll N` as it is and drops N's definition.
    pragma = "\n#define N {}\n#pragma GCC unroll N\nint f(int *a) {{ return a[0]; }}\n"
    assert key(kernel, pragma.format(2)) != key(kernel, pragma.format(8))
    assert runner.program(target, render(target, kernel) + '\n#include "/etc/passwd"\n') is None


def test_program_text_keeps_the_macros_a_pragma_reads():
    text = "#define N 4\n#define M 2\n#pragma GCC unroll N\nint x = 2;\n#undef N\n#pragma omp N\n"
    assert program_text(text).splitlines() == [
        "#pragma GCC unroll N",
        "#define N 4",
        "int x = 2;",
        "#pragma omp N",
    ]
