"""The program-target examples' graders, called directly on real candidates: pendulum_policy
(a control policy's return) and tokenizer_throughput (a BPE tokenizer's tokens per second).

Nothing here times anything: a speed comparison belongs in bench. The throughput target is
checked for correctness instead, on every configuration of its knobs."""

from __future__ import annotations

import ast
import importlib.util
import itertools
import math
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from eat.target import assign_knobs, marked_knobs

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
PENDULUM = EXAMPLES / "pendulum_policy"
TOKENIZER = EXAMPLES / "tokenizer_throughput"


def load_grader(example: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"{example.name}_grader", example / "grader.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def knobs(source: str) -> dict[str, list]:
    """The marked lines' knobs, as the offline search reads them: name -> allowed values."""
    return {name: list(knob.values) for name, knob in marked_knobs(source).items()}


def candidate(folder: Path, example: Path, file: str, extra: str = "", **values) -> str:
    """Write the baseline into `folder` with the marked lines of `values` rewritten (and
    `extra` appended), as the search writes a configuration; returns the folder."""
    source = (example / file).read_text()
    assert set(values) <= set(marked_knobs(source)), f"no marked line for {sorted(values)}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / file).write_text(assign_knobs(source, values) + extra)
    return str(folder)


@pytest.fixture(scope="module")
def pendulum() -> ModuleType:
    return load_grader(PENDULUM)


@pytest.fixture(scope="module")
def tokenizer() -> ModuleType:
    return load_grader(TOKENIZER)


@pytest.mark.parametrize(
    "example, file",
    [(PENDULUM, "policy.py"), (TOKENIZER, "tokenizer.py")],
    ids=["pendulum_policy", "tokenizer_throughput"],
)
def test_knobs_are_marked_with_the_baseline_value_first(example: Path, file: str):
    source = (example / file).read_text()
    found = knobs(source)
    assert len(found) >= 3
    namespace: dict = {}
    exec(compile(source, file, "exec"), namespace)  # the current values, as the program sees them
    for name, values in found.items():
        assert 2 <= len(values) <= 8 and len(set(values)) == len(values), name
        assert values[0] == namespace[name], name
    # each mark's own list starts with the line's value (eat would put it first otherwise)
    written = [
        ast.literal_eval(line.split("# eat:knob")[1].strip())
        for line in source.splitlines()
        if "# eat:knob" in line
    ]
    assert [w[0] for w in written] == [namespace[name] for name in found]


# pendulum_policy


TUNED_POLICY = {"SWING_GAIN": 2.0, "SWITCH_ANGLE": 0.6, "KP": 12.0, "KD": 3.0}


def test_pendulum_baseline_grades_to_a_finite_return(pendulum, tmp_path):
    folder = candidate(tmp_path, PENDULUM, "policy.py")
    for split in ("train", "held_out"):
        result = pendulum.grade(folder, split, 0)
        assert math.isfinite(result["return"])
        # Doing nothing scores about -1200, a strong controller about -140.
        assert -1500 < result["return"] < -100
        assert result["worst_return"] <= result["return"]
        assert 0 <= result["success_rate"] <= 1


def test_pendulum_tuned_knobs_beat_the_baseline(pendulum, tmp_path):
    baseline = candidate(tmp_path / "baseline", PENDULUM, "policy.py")
    tuned = candidate(tmp_path / "tuned", PENDULUM, "policy.py", **TUNED_POLICY)
    for seed in range(3):
        base, better = pendulum.grade(baseline, "train", seed), pendulum.grade(tuned, "train", seed)
        assert better["return"] > base["return"] + 100, seed
        assert better["success_rate"] == 1.0 > base["success_rate"], seed


def test_pendulum_doing_nothing_scores_far_below_the_baseline(pendulum, tmp_path):
    (tmp_path / "policy.py").write_text("def act(obs):\n    return 0.0\n")
    idle = pendulum.grade(str(tmp_path), "train", 0)
    assert idle["success_rate"] == 0
    assert idle["return"] < pendulum.grade(str(PENDULUM), "train", 0)["return"] - 300


@pytest.mark.parametrize("action", ["float('nan')", "float('inf')", "'left'", "None"])
def test_pendulum_a_bad_action_is_an_assertion_error(pendulum, tmp_path, action):
    # Finite torques at first, then a bad one: the check is on every step, not only the first.
    extra = "_act = act\n_steps = [0]\n\n\ndef act(obs):\n    _steps[0] += 1\n"
    extra += f"    return _act(obs) if _steps[0] < 30 else {action}\n"
    folder = candidate(tmp_path, PENDULUM, "policy.py", extra=extra)
    with pytest.raises(AssertionError, match="step 29"):
        pendulum.grade(folder, "train", 0)


def test_pendulum_a_policy_that_raises_is_not_an_assertion_error(pendulum, tmp_path):
    (tmp_path / "policy.py").write_text("def act(obs):\n    return 1 / 0\n")
    with pytest.raises(ZeroDivisionError):
        pendulum.grade(str(tmp_path), "train", 0)


def test_pendulum_reset_is_called_before_every_episode(pendulum, tmp_path):
    # The policy's own assert fails if an episode's 200 steps run on without a reset.
    policy = "steps = None\n\n\ndef reset():\n    global steps\n    steps = 0\n\n\n"
    policy += "def act(obs):\n    global steps\n    steps += 1\n    assert steps <= 200\n"
    policy += "    return 0.0\n"
    (tmp_path / "policy.py").write_text(policy)
    assert pendulum.grade(str(tmp_path), "train", 0)["success_rate"] == 0


def test_pendulum_held_out_episodes_differ_from_train(pendulum):
    assert pendulum.HELD_OUT_SEEDS  # read from private/ when the grader was imported
    train = [pendulum.initial_states("train", seed) for seed in range(5)]
    held_out = [pendulum.initial_states("held_out", seed) for seed in range(5)]
    starts = np.concatenate(train + held_out)
    # Every episode of both splits starts from its own state, and they cover the circle.
    assert len(np.unique(starts.round(6), axis=0)) == len(starts)
    assert np.abs(starts[:, 0]).max() <= math.pi and np.abs(starts[:, 1]).max() <= 1
    np.testing.assert_array_equal(held_out[2], pendulum.initial_states("held_out", 2))
    with pytest.raises(ValueError, match="split"):
        pendulum.initial_states("test", 0)


# tokenizer_throughput


def test_tokenizer_baseline_grades_to_a_finite_throughput(tokenizer, tmp_path):
    folder = candidate(tmp_path, TOKENIZER, "tokenizer.py")
    for split in ("train", "held_out"):
        result = tokenizer.grade(folder, split, 0)
        assert math.isfinite(result["tokens_per_s"]) and result["tokens_per_s"] > 0
        assert result["tokens"] > 5000
        assert 2 < result["bytes_per_token"] < 4  # merges do merge: fewer tokens than bytes


@pytest.mark.slow  # 30 grades
def test_tokenizer_every_knob_configuration_is_correct(tokenizer, tmp_path):
    source = (TOKENIZER / "tokenizer.py").read_text()
    grid = knobs(source)
    assert set(grid) == {"CACHE_SIZE", "WHOLE_PIECE", "MERGE_LOOP"}
    tokens = set()
    for n, combo in enumerate(itertools.product(*grid.values())):
        folder = candidate(tmp_path / str(n), TOKENIZER, "tokenizer.py", **dict(zip(grid, combo)))
        result = tokenizer.grade(folder, "train", 1)  # raises AssertionError on a wrong token
        assert math.isfinite(result["tokens_per_s"])
        tokens.add(result["tokens"])
    assert len(tokens) == 1


def test_tokenizer_merge_loops_agree_on_long_and_overlapping_pieces(tokenizer, tmp_path):
    # Runs of one byte are where "leftmost" matters ("===" is "==" then "=", not "=" "==")
    # and long pieces are where the heap takes over; the reference decides.
    texts = ["=" * n for n in range(1, 40)] + [" " * 17 + "x", "ACGT" * 90 + "A", "aaaa bbb"]
    reference = tokenizer.Reference(tokenizer.MERGES)
    for loop in ("rescan", "scan", "heap"):
        folder = candidate(tmp_path / loop, TOKENIZER, "tokenizer.py", MERGE_LOOP=loop)
        module = tokenizer.load_tokenizer(folder)
        encoder = module.Tokenizer(list(tokenizer.MERGES))
        for text in texts:
            assert encoder.encode(text) == reference.encode(text), (loop, text[:20])


def test_tokenizer_reference_round_trips_and_merges_leftmost_first(tokenizer):
    reference = tokenizer.Reference(tokenizer.MERGES)
    for doc in tokenizer.make_workload("train", 0):
        assert tokenizer.decode(reference.encode(doc), tokenizer.MERGES) == doc
    # With a = 97: "aa" is 256 and "aa"+"a" is 257; "aaa" merges its leftmost pair first.
    tiny = tokenizer.Reference([(97, 97), (256, 97)])
    assert tiny.encode("aaa") == [257]
    assert tiny.encode("aaaa") == [256, 256]  # (a, a) outranks (aa, a)
    assert tokenizer.Reference([(97, 98)]).encode("abab ab") == [256, 256, 32, 256]


def test_tokenizer_every_token_encodes_to_itself(tokenizer):
    # WHOLE_PIECE (tiktoken's shortcut: a piece that is a token is that token) relies on it.
    table = [bytes([b]) for b in range(256)]
    for a, b in tokenizer.MERGES:
        table.append(table[a] + table[b])
    assert len(set(table)) == len(table) == 256 + 3000
    reference = tokenizer.Reference(tokenizer.MERGES)
    for token, data in enumerate(table):
        assert reference.merge(list(data)) == [token], data


WRAP_ENCODE = "_encode = Tokenizer.encode\nTokenizer.encode = lambda self, text: {}\n"
BROKEN_TOKENIZERS = {
    # The last token of every document dropped.
    "truncated": WRAP_ENCODE.format("_encode(self, text)[:-1]"),
    # Tokens as a tuple: equal values, not the list the contract asks for.
    "tuple": WRAP_ENCODE.format("tuple(_encode(self, text))"),
    # Pieces split at whitespace rather than by GPT-2's pattern (" word" is one piece there).
    "split_on_spaces": "PATTERN = re.compile(r'\\S+|\\s+')\n",
    # Merges applied in reverse priority.
    "worst_first": "_init = Tokenizer.__init__\n"
    "def _reversed(self, merges):\n"
    "    _init(self, merges)\n"
    "    self.ranks = {p: len(merges) - 1 - r for p, r in self.ranks.items()}\n"
    "Tokenizer.__init__ = _reversed\n",
}


@pytest.mark.parametrize("broken", sorted(BROKEN_TOKENIZERS))
def test_tokenizer_a_wrong_output_is_an_assertion_error(tokenizer, tmp_path, broken):
    folder = candidate(tmp_path, TOKENIZER, "tokenizer.py", extra=BROKEN_TOKENIZERS[broken])
    with pytest.raises(AssertionError, match="document 0"):
        tokenizer.grade(folder, "train", 0)


def test_tokenizer_a_cache_keyed_wrongly_is_an_assertion_error(tokenizer, tmp_path):
    # A plausible bug behind a knob: " vu" and "vu" share a cache entry.
    folder = candidate(tmp_path, TOKENIZER, "tokenizer.py", CACHE_SIZE=4096)
    path = Path(folder) / "tokenizer.py"
    source = path.read_text()
    assert "self.cache.get(piece)" in source
    path.write_text(source.replace("self.cache.get(piece)", "self.cache.get(piece.strip())"))
    with pytest.raises(AssertionError, match="expected"):
        tokenizer.grade(folder, "train", 0)


def test_tokenizer_held_out_workloads_differ_from_train(tokenizer):
    assert tokenizer.HELD_OUT_SEEDS  # read from private/ when the grader was imported
    train = [tokenizer.make_workload("train", seed) for seed in range(3)]
    held_out = [tokenizer.make_workload("held_out", seed) for seed in range(3)]
    documents = [doc for workload in train + held_out for doc in workload]
    assert len(set(documents)) == len(documents)
    assert held_out[1] == tokenizer.make_workload("held_out", 1)  # deterministic
    with pytest.raises(ValueError, match="split"):
        tokenizer.make_workload("test", 0)
