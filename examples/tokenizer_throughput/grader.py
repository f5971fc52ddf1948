"""Grader of tokenizer_throughput: a byte-level BPE tokenizer's tokens per second, its output
checked token for token against the reference encoder below on every graded workload.

A workload is a batch of documents generated from (split, seed): prose in a made-up language
whose words follow a Zipf law (as real words do), with numbers, punctuation, a few non-ASCII
words, code-like indentation and separator lines, and now and then a long DNA sequence (long
pieces are where a quadratic merge loop hurts).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import time
from types import ModuleType

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DOCUMENTS = 64
WORDS_PER_DOCUMENT = 250

# Pre-tokenization, as GPT-2's pattern with stdlib `re` (letters are [^\W\d_]): every piece is
# encoded on its own, so merges never cross a piece boundary.
PATTERN = re.compile(r"""'(?:s|t|re|ve|m|ll|d)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+""")


def read_merges(path: str) -> list[tuple[int, int]]:
    """merges.txt: line i (comments aside) joins tokens `a b` into token 256 + i."""
    with open(path) as f:
        rows = [line.split() for line in f if line.strip() and not line.startswith("#")]
    return [(int(a), int(b)) for a, b in rows]


MERGES = read_merges(os.path.join(HERE, "merges.txt"))

# Read while the module is imported: private/ is closed once the candidate runs, and the
# held-out workloads are not derivable from the train seeds.
with open(os.path.join(HERE, "private", "held_out_seeds.json")) as f:
    HELD_OUT_SEEDS: list[int] = json.load(f)


def make_lexicon(size: int = 4000) -> list[str]:
    """A made-up language: the same words for every workload, shortest (most frequent) first."""
    rng = np.random.default_rng(20250101)
    onsets = "b d f g h k l m n p r s t v w z ch sh th st tr pl br".split() + [""] * 3
    vowels = "a e i o u a e i o ai ea ou y".split()
    codas = "n r s t l nd ng rt st".split() + [""] * 8
    words: dict[str, None] = {}  # an ordered set
    while len(words) < size:
        syllables = [
            rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas)
            for _ in range(rng.choice([1, 2, 2, 3, 3, 4]))
        ]
        words["".join(syllables)] = None
    return sorted(words, key=len)


LEXICON = make_lexicon()
ZIPF = 1.0 / np.arange(1, len(LEXICON) + 1) ** 1.05
ZIPF /= ZIPF.sum()
FOREIGN = ["café", "naïve", "über", "Straße", "façade", "東京", "こんにちは", "π", "€5", "🙂"]
SENTENCE_ENDS = [".", ".", ".", "?", "!", "..."]
CLAUSE_MARKS = [",", ",", ",", ";", ":", " —", '"', "'s", "'ll"]


def make_document(rng: np.random.Generator) -> str:
    words = [LEXICON[i] for i in rng.choice(len(LEXICON), WORDS_PER_DOCUMENT, p=ZIPF)]
    rolls = rng.random((WORDS_PER_DOCUMENT, 3))
    out: list[str] = []
    new_sentence = True
    for word, (kind, pick, mark) in zip(words, rolls):
        if kind < 0.03:
            word = str(int(10 ** (1 + 4 * pick)))
        elif kind < 0.04:
            word = FOREIGN[int(pick * len(FOREIGN))]
        elif new_sentence:
            word = word.capitalize()
        out.append(word)
        new_sentence = mark < 0.08
        if new_sentence:
            out.append(SENTENCE_ENDS[int(pick * len(SENTENCE_ENDS))])
            out.append("\n\n" if mark < 0.01 else " ")
        elif mark < 0.2:
            out.append(CLAUSE_MARKS[int(pick * len(CLAUSE_MARKS))] + " ")
        else:
            out.append(" ")
    if rng.random() < 0.3:  # a code block: a separator line and indentation
        indent = " " * int(rng.integers(4, 17))
        out.append("\n" + "=" * int(rng.integers(20, 80)) + "\n" + indent + "return x\n")
    if rng.random() < 0.15:  # a DNA sequence, one long piece of four letters
        out.append("\nseq: " + "".join(rng.choice(list("ACGT"), int(rng.integers(100, 300)))))
    return "".join(out)


def make_workload(split: str, seed: int) -> list[str]:
    if split == "train":
        rng = np.random.default_rng(seed)
    elif split == "held_out":
        n = len(HELD_OUT_SEEDS)
        rng = np.random.default_rng([HELD_OUT_SEEDS[seed % n], seed // n])
    else:
        raise ValueError(f"unknown split {split!r} (train or held_out)")
    return [make_document(rng) for _ in range(DOCUMENTS)]


class Reference:
    """Byte-level BPE as tiktoken does it: within a piece, repeatedly merge the leftmost
    occurrence of the adjacent pair with the lowest rank (merges.txt line), until none is left."""

    def __init__(self, merges: list[tuple[int, int]]) -> None:
        self.ranks = {pair: rank for rank, pair in enumerate(merges)}
        self.pieces: dict[str, list[int]] = {}  # a piece's tokens depend on the piece alone

    def encode(self, text: str) -> list[int]:
        out: list[int] = []
        for piece in PATTERN.findall(text):
            if piece not in self.pieces:
                self.pieces[piece] = self.merge(list(piece.encode("utf-8")))
            out += self.pieces[piece]
        return out

    def merge(self, ids: list[int]) -> list[int]:
        while len(ids) > 1:
            ranks = [self.ranks.get(pair, len(self.ranks)) for pair in zip(ids, ids[1:])]
            rank = min(ranks)
            if rank == len(self.ranks):
                break
            i = ranks.index(rank)
            ids[i : i + 2] = [256 + rank]
        return ids


def decode(ids: list[int], merges: list[tuple[int, int]]) -> str:
    table = [bytes([b]) for b in range(256)]
    for a, b in merges:
        table.append(table[a] + table[b])
    return b"".join(table[i] for i in ids).decode("utf-8")


def load_tokenizer(folder: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("tokenizer", os.path.join(folder, "tokenizer.py"))
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def grade(folder: str, split: str, seed: int) -> dict[str, float]:
    documents = make_workload(split, seed)
    # One timed pass from a cold start: a second pass could find the first one's work cached
    # (in the module, if not in the Tokenizer). The seeds' median takes care of the noise.
    tokenizer = load_tokenizer(folder).Tokenizer(list(MERGES))
    start = time.perf_counter()
    encoded = [tokenizer.encode(doc) for doc in documents]
    seconds = time.perf_counter() - start
    reference = Reference(MERGES)
    for n, (doc, got) in enumerate(zip(documents, encoded)):
        want = reference.encode(doc)
        if got != want:
            if not isinstance(got, list):
                raise AssertionError(f"document {n}: encode returned a {type(got).__name__}")
            diff = (i for i, (a, b) in enumerate(zip(got, want)) if a != b)
            at = next(diff, min(len(got), len(want)))
            raise AssertionError(
                f"document {n}: token {at} is {got[at : at + 3]}, expected {want[at : at + 3]} "
                f"({len(got)} tokens, expected {len(want)})"
            )
    tokens = sum(len(ids) for ids in encoded)
    return {
        "tokens_per_s": tokens / seconds,
        "tokens": float(tokens),
        "bytes_per_token": sum(len(d.encode("utf-8")) for d in documents) / tokens,
    }
