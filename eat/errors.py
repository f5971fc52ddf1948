"""Errors that reach the user, each with a code and a one-line message."""

from __future__ import annotations


class EatError(Exception):
    """Base of every error eat reports to the user; `code` is stable, `str()` is one line."""

    code = "eat_error"
    exit_code = 1


class BadInput(EatError):
    """The user gave something eat cannot use (missing file, malformed field): exit 2."""

    code = "bad_input"
    exit_code = 2


def read_file(path) -> str:
    """The text of a file the user named; BadInput saying why when it cannot be read."""
    from pathlib import Path

    path = Path(path)
    if not path.is_file():
        raise BadInput(f"{path}: {'is a folder' if path.is_dir() else 'file not found'}")
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise BadInput(f"{path}: cannot read: {e}") from None


class TargetError(BadInput):
    """A target folder or its target.toml is missing or malformed."""

    code = "bad_target"

    def __init__(self, path: object, field: str | None, message: str):
        self.path, self.field = str(path), field
        where = f"{self.path}: {field}" if field else self.path
        super().__init__(f"{where}: {message}")


class RunnerUnavailable(BadInput):
    """The target needs hardware or tools this machine lacks."""

    code = "runner_unavailable"
