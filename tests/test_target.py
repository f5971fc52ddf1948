"""The target contract: loading, validation errors that name file and field, formulas."""

import shutil
from pathlib import Path

import pytest

from eat.errors import TargetError
from eat.target import eval_expr, load_target, parse_signature

EXAMPLE = Path(__file__).parent.parent / "examples" / "cpu_matmul"


def test_example_loads_with_args_roles_and_metrics():
    t = load_target(EXAMPLE)
    assert [(a.name, a.role) for a in t.args] == [
        ("A", "input"),
        ("B", "input"),
        ("C", "output"),
        ("M", "scalar"),
        ("N", "scalar"),
        ("K", "scalar"),
    ]
    assert t.metric("flops", {"M": 2, "N": 3, "K": 4}) == 48
    assert len(t.workloads) >= 3
    assert t.vendor is not None and "numpy" in t.vendor.name


@pytest.fixture
def target_copy(tmp_path):
    dst = tmp_path / "t"
    shutil.copytree(EXAMPLE, dst)
    return dst


def _edit(folder: Path, old: str, new: str) -> None:
    f = folder / "target.toml"
    text = f.read_text()
    assert old in text, old
    f.write_text(text.replace(old, new, 1))


@pytest.mark.parametrize(
    "old,new,field,words",
    [
        ('runner = "cpu"', 'runner = "tpu"', "runner", "cpu"),
        ("rtol = 1e-4", "rtol = -1", "tolerance.rtol", "greater than 0"),
        ('[entry]\nname = "matmul"', '[entry]\nname = "mm"', "entry.signature", "matmul"),
        ("int M, int N, int K)", "int M, int N, int K, quux Q)", "entry.signature", "quux"),
        ('C = ["M", "N"]', "", "shapes", "'C'"),
        ("M = 511", "Q = 511", "workloads.2", "missing M"),
        ('flops = "2*M*N*K"', 'flops = "2*M*N*Z"', "flops", "'Z'"),
        ('flops = "2*M*N*K"', 'flops = "__import__(1)"', "flops", "unsupported"),
        ('file = "baseline.c"', 'file = "gone.c"', "baseline.file", "gone.c"),
        ('language = "c"\n', "", "language", "Field required"),
        ("[tolerance]", "[tolerance]\nbogus = 1", "tolerance.bogus", "Extra"),
    ],
)
def test_malformed_field_is_named(target_copy, old, new, field, words):
    _edit(target_copy, old, new)
    with pytest.raises(TargetError) as e:
        load_target(target_copy)
    msg = str(e.value)
    assert msg.startswith(str(target_copy / "target.toml") + f": {field}: "), msg
    assert words in msg and "\n" not in msg


def test_missing_folder_file_and_bad_toml(tmp_path):
    with pytest.raises(TargetError, match="no such target folder"):
        load_target(tmp_path / "nope")
    with pytest.raises(TargetError, match="target.toml: file not found"):
        load_target(tmp_path)
    (tmp_path / "target.toml").write_text("name = [")
    with pytest.raises(TargetError, match="not valid TOML"):
        load_target(tmp_path)


@pytest.mark.parametrize(
    "sig,expect",
    [
        (
            "void f(const float *x, float *y, int n)",
            [("x", "input"), ("y", "output"), ("n", "scalar")],
        ),
        ("void f(const double * __restrict__ a, int64_t *b)", [("a", "input"), ("b", "output")]),
        ("void f(float* restrict out, size_t n);", [("out", "output"), ("n", "scalar")]),
    ],
)
def test_parse_signature(sig, expect):
    assert [(a.name, a.role) for a in parse_signature(sig, "f")] == expect


@pytest.mark.parametrize("sig", ["int f(float *x)", "void f(struct s *x)", "void g(float *x)"])
def test_parse_signature_refuses(sig):
    with pytest.raises(ValueError):
        parse_signature(sig, "f")


@pytest.mark.parametrize(
    "expr,value", [("2*M*N*K", 2 * 3 * 4 * 5), ("(M+1)//2", 2), ("M**2 - N", 5), (7, 7), ("-M", -3)]
)
def test_eval_expr(expr, value):
    assert eval_expr(expr, {"M": 3, "N": 4, "K": 5}) == value


def test_a_knobs_help_wrapped_over_lines_reads_as_one_line():
    """Prompts, SKILL.md and the report quote it inline (cpu_matmul's TILE help broke mid-line)."""
    target = load_target(Path(__file__).parent.parent / "examples" / "cpu_matmul")
    raw = (target.root / "target.toml").read_text()
    assert "Micro-kernel: depth of the\nk blocks" in raw  # wrapped by its author
    assert "depth of the k blocks. 0 disables blocking." in target.knobs["TILE"].help
    assert all("\n" not in k.help and "  " not in k.help for k in target.knobs.values())
