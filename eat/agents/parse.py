"""Turn an LLM coder's reply into a candidate source.

A reply carries either the whole file in a fenced code block, or aider-style SEARCH/REPLACE
edits against the parent source. Everything here is a pure function of the reply text, so a
bad reply costs one short correction message instead of an evaluation.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

NO_CODE = "no code block or SEARCH/REPLACE edit found"

# Blocks with these tags are commands, patches or output the model shows, never the file.
_NOT_SOURCE = {"bash", "sh", "shell", "zsh", "console", "diff", "patch"}

_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>.*)$")
# Marker lengths vary a little between models; 5 to 9 characters is unambiguous enough.
_SEARCH = re.compile(r"^[ \t]*<{5,9}[ \t]*SEARCH[ \t]*$")
_DIVIDER = re.compile(r"^[ \t]*={5,9}[ \t]*$")
_REPLACE = re.compile(r"^[ \t]*>{5,9}[ \t]*REPLACE[ \t]*$")


@dataclass
class Parsed:
    source: str | None  # the new whole file, when parsing succeeded
    error: str | None  # one line saying what was wrong, for a short correction message
    kind: str  # "file" | "edits" | "none"


def _lf(text: str) -> str:
    return text.replace("\r\n", "\n")


def _blocks(reply: str) -> list[tuple[str, str]]:
    """Every fenced block as (language tag, content), in order."""
    blocks: list[tuple[str, str]] = []
    lines = reply.removesuffix("\n").split("\n")  # no phantom last line in an unclosed block
    i = 0
    while i < len(lines):
        m = _OPEN.match(lines[i])
        # CommonMark: a backtick fence's info string cannot hold backticks (```x``` is inline).
        if not m or (m["fence"][0] == "`" and "`" in m["info"]):
            i += 1
            continue
        fence, indent = m["fence"], m["indent"]
        lang = (m["info"].split() or [""])[0].lower()
        # Closes on the same character, at least as long, nothing after it: a ```` block can
        # hold ``` lines, and a "```c" line inside a ``` block is content, not a close.
        close = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        body: list[str] = []
        i += 1
        while i < len(lines) and not close.match(lines[i]):
            line = lines[i]
            # Content of an indented fence (inside a list item) is indented the same way.
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            i += 1
        i += 1
        # An unclosed fence runs to the end of the reply: a dropped closing fence is common,
        # and a truncated file fails to compile anyway, which the loop already handles.
        blocks.append((lang, "\n".join(body) + "\n" if body else ""))
    return blocks


def _defines(source: str, entry: str) -> bool:
    """Whether `source` defines `entry`: a C function with a body, a def, or an assignment."""
    e = re.escape(entry)
    return bool(
        re.search(rf"\b{e}\s*\([^;{{}}()]*\)\s*(const\s*)?\{{", source)
        or re.search(rf"^\s*(async\s+)?def\s+{e}\s*\(|^{e}\s*=", source, re.M)
    )


def extract_fenced(reply: str, entry: str | None = None) -> str | None:
    """The fenced block that looks like the whole file, or None when there is none."""
    blocks = [body for lang, body in _blocks(_lf(reply)) if lang not in _NOT_SOURCE]
    if not blocks:
        return None
    # A reply often shows a call or a snippet next to the file; the file is the one that
    # defines the entry point, and the longest such block when several do.
    defining = [b for b in blocks if entry and _defines(b, entry)]
    return max(defining or blocks, key=len)


def _has_edits(reply: str) -> bool:
    return any(_SEARCH.match(line) or _REPLACE.match(line) for line in reply.split("\n"))


def _edit_blocks(reply: str) -> tuple[list[tuple[list[str], list[str]]], str | None]:
    """The (search lines, replace lines) of each block, or the first malformed block."""
    blocks: list[tuple[list[str], list[str]]] = []
    missing = {
        "search": "missing '=======' after the SEARCH lines",
        "replace": "missing '>>>>>>> REPLACE' after the new lines",
    }
    state = "out"
    search: list[str] = []
    replace: list[str] = []
    for line in reply.split("\n"):
        n = len(blocks) + 1
        if state == "out":
            if _SEARCH.match(line):
                state, search, replace = "search", [], []
            elif _REPLACE.match(line):
                return blocks, f"edit block {n}: '>>>>>>> REPLACE' without '<<<<<<< SEARCH'"
            # Anything else outside a block (prose, fences, file names) is ignored.
        elif state == "search":
            if _DIVIDER.match(line):
                state = "replace"
            elif _SEARCH.match(line) or _REPLACE.match(line):
                return blocks, f"edit block {n}: {missing[state]}"
            else:
                search.append(line)
        elif _REPLACE.match(line):
            blocks.append((search, replace))
            state = "out"
        elif _SEARCH.match(line) or _DIVIDER.match(line):
            return blocks, f"edit block {n}: {missing[state]}"
        else:
            replace.append(line)
    if state != "out":
        return blocks, f"edit block {len(blocks) + 1}: {missing[state]}"
    return blocks, None


def _indent(lines: list[str]) -> str:
    """The leading whitespace all non-blank lines share."""
    heads = [line[: len(line) - len(line.lstrip())] for line in lines if line.strip()]
    return os.path.commonprefix(heads) if heads else ""


def _reindent(lines: list[str], old: str, new: str) -> list[str]:
    return [
        new + line[len(old) :] if line.strip() and line.startswith(old) else line for line in lines
    ]


def _matches(lines: list[str], search: list[str], how: str) -> list[int]:
    """Start indices where `search` matches `lines`, under one of three strictness levels."""
    m = len(search)
    if how == "exact":
        return [i for i in range(len(lines) - m + 1) if lines[i : i + m] == search]
    want = [s.rstrip() for s in search]
    if how == "rstrip":
        return [
            i for i in range(len(lines) - m + 1) if [x.rstrip() for x in lines[i : i + m]] == want
        ]
    # Models often drop or add one level of indentation uniformly; compare dedented lines.
    want = _reindent(want, _indent(want), "")
    return [
        i
        for i in range(len(lines) - m + 1)
        if _reindent(w := [x.rstrip() for x in lines[i : i + m]], _indent(w), "") == want
    ]


def apply_edits(original: str, reply: str) -> tuple[str | None, str | None]:
    """Apply the reply's SEARCH/REPLACE blocks in order: (new source, None) or (None, error)."""
    blocks, error = _edit_blocks(_lf(reply))
    if error:
        return None, error
    if not blocks:
        return None, NO_CODE
    text = _lf(original)
    lines = text.removesuffix("\n").split("\n") if text else []
    for n, (search, replace) in enumerate(blocks, 1):
        if not any(s.strip() for s in search):
            if any(x.strip() for x in lines):
                return None, (
                    f"edit block {n}: empty SEARCH section, but the source is not "
                    "empty; send the whole file in one fenced block instead"
                )
            lines = list(replace)
            continue
        for how in ("exact", "rstrip", "indent"):
            found = _matches(lines, search, how)
            if found:
                break
        if not found:
            first = next(s.strip() for s in search if s.strip())[:60]
            return None, f"edit block {n}: SEARCH text not found (first line: {first!r})"
        if len(found) > 1:
            return None, (
                f"edit block {n}: SEARCH text occurs {len(found)} times; "
                "add surrounding lines so it occurs once"
            )
        i = found[0]
        new = replace
        if how == "indent":
            # Shift the replacement by the same amount the SEARCH lines were off by.
            new = _reindent(replace, _indent(search), _indent(lines[i : i + len(search)]))
        lines = lines[:i] + new + lines[i + len(search) :]
    return "\n".join(lines) + "\n", None


def parse_reply(reply: str, original: str, entry: str | None = None) -> Parsed:
    """The candidate a reply describes: edits win over fenced blocks when both appear."""
    reply = _lf(reply)
    if _has_edits(reply):
        source, error = apply_edits(original, reply)
        kind = "edits"
    else:
        source = extract_fenced(reply, entry)
        kind, error = ("file", None) if source is not None else ("none", NO_CODE)
    if source is not None:
        if not source.endswith("\n"):
            source += "\n"
        if not source.strip():
            error = "the resulting source is empty"
        elif entry and not re.search(rf"\b{re.escape(entry)}\b", source):
            error = f"the reply does not define {entry}"
    return Parsed(source if error is None else None, error, kind)


def correction_message(parsed: Parsed, entry: str | None) -> str:
    """The one message sent back after an unusable reply: what went wrong, what to send."""
    whole = f"the whole file, defining `{entry}`," if entry else "the whole file"
    return (
        f"Your reply could not be used: {parsed.error or 'unknown problem'}.\n"
        "Reply in one of two formats:\n"
        f"1. {whole} in a single fenced code block (``` ... ```), or\n"
        "2. SEARCH/REPLACE edits against the current source, one block per change:\n"
        "<<<<<<< SEARCH\n"
        "exact lines copied from the current source\n"
        "=======\n"
        "the lines to put in their place\n"
        ">>>>>>> REPLACE\n"
        "Each SEARCH text must occur exactly once in the source; blocks apply in order."
    )
