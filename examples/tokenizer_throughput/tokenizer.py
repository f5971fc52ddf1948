"""A byte-level BPE tokenizer (GPT-2 style), the baseline: correct, and slow.

The grader builds `Tokenizer(merges)` with merges[i] = (a, b), meaning tokens a and b join into
token 256 + i (tokens 0-255 are bytes), and calls `encode(text) -> list[int]` on each document.
The output must equal the reference's token for token: split the text into pieces with PATTERN,
encode each piece to UTF-8 bytes and, within it, repeatedly merge the leftmost occurrence of
the adjacent pair with the lowest rank i until no pair has a rank.
"""

from __future__ import annotations

import heapq
import re

PATTERN = re.compile(r"""'(?:s|t|re|ve|m|ll|d)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+""")

# A piece's tokens depend on the piece alone, and text repeats its words (Zipf): remember up to
# this many pieces' tokens (0: none), forgetting them all when full.
CACHE_SIZE = 0  # eat:knob [0, 256, 1024, 4096, 65536]
# 1: a piece whose bytes are a token's is that token, without merging (tiktoken's shortcut; it
# holds for these merges, where every token's bytes encode back to the token).
WHOLE_PIECE = 0  # eat:knob [0, 1]
# How a piece's bytes are merged. "rescan": count the pairs, merge every occurrence of the
# lowest-ranked one, start again (minbpe's loop). "scan": find the lowest-ranked pair in one pass,
# merge it in place, scan again (tiktoken's educational loop). Both are n² on long pieces.
# "heap": a heap of pair ranks over a linked list of tokens, updated around each merge
# (n log n, more work per step).
MERGE_LOOP = "rescan"  # eat:knob ["rescan", "scan", "heap"]


class Tokenizer:
    def __init__(self, merges: list[tuple[int, int]]) -> None:
        self.ranks = {pair: rank for rank, pair in enumerate(merges)}
        table = [bytes([b]) for b in range(256)]
        for a, b in merges:
            table.append(table[a] + table[b])
        self.vocab = {token: i for i, token in enumerate(table)}
        self.cache: dict[str, list[int]] = {}

    def encode(self, text: str) -> list[int]:
        out: list[int] = []
        for piece in PATTERN.findall(text):
            out.extend(self.encode_piece(piece))
        return out

    def encode_piece(self, piece: str) -> list[int]:
        if CACHE_SIZE:
            ids = self.cache.get(piece)
            if ids is not None:
                return ids
        data = piece.encode("utf-8")
        whole = self.vocab.get(data) if WHOLE_PIECE else None
        if whole is not None:
            ids = [whole]
        elif MERGE_LOOP == "heap":
            ids = self.merge_heap(data)
        elif MERGE_LOOP == "scan":
            ids = self.merge_scan(data)
        else:
            ids = self.merge_rescan(data)
        if CACHE_SIZE:
            if len(self.cache) >= CACHE_SIZE:
                self.cache.clear()
            self.cache[piece] = ids
        return ids

    def merge_rescan(self, data: bytes) -> list[int]:
        # Merging every occurrence of the lowest-ranked pair at once is the same as merging the
        # leftmost one repeatedly: a pair that contains the new token ranks after it.
        ids = list(data)
        while len(ids) > 1:
            counts: dict[tuple[int, int], int] = {}
            for pair in zip(ids, ids[1:]):
                counts[pair] = counts.get(pair, 0) + 1
            pair = min(counts, key=lambda p: self.ranks.get(p, float("inf")))
            if pair not in self.ranks:
                break
            token = 256 + self.ranks[pair]
            merged: list[int] = []
            i = 0
            while i < len(ids):
                if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
                    merged.append(token)
                    i += 2
                else:
                    merged.append(ids[i])
                    i += 1
            ids = merged
        return ids

    def merge_scan(self, data: bytes) -> list[int]:
        ids = list(data)
        while True:
            best, at = None, 0
            for i, pair in enumerate(zip(ids, ids[1:])):
                rank = self.ranks.get(pair)
                if rank is not None and (best is None or rank < best):  # < keeps the leftmost
                    best, at = rank, i
            if best is None:
                return ids
            ids[at : at + 2] = [256 + best]

    def merge_heap(self, data: bytes) -> list[int]:
        # Tokens live in a doubly linked list indexed by their first byte's position, which
        # keeps left-to-right order, so (rank, position) on the heap picks the leftmost of ties.
        ids = list(data)
        n = len(ids)
        nxt = list(range(1, n + 1))
        prv = list(range(-1, n - 1))
        alive = [True] * n
        heap = [(self.ranks[p], i) for i, p in enumerate(zip(ids, ids[1:])) if p in self.ranks]
        heapq.heapify(heap)
        while heap:
            rank, i = heapq.heappop(heap)
            j = nxt[i]
            # An entry is stale once either of its tokens has merged: its pair is gone.
            if not alive[i] or j >= n or self.ranks.get((ids[i], ids[j])) != rank:
                continue
            ids[i] = 256 + rank
            alive[j] = False
            nxt[i] = nxt[j]
            if nxt[i] < n:
                prv[nxt[i]] = i
            for left in (prv[i], i):  # the two pairs the new token is part of
                if left >= 0 and nxt[left] < n:
                    rank = self.ranks.get((ids[left], ids[nxt[left]]))
                    if rank is not None:
                        heapq.heappush(heap, (rank, left))
        return [ids[i] for i in range(n) if alive[i]]
