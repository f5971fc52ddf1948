"""Hardware runners: build, verify and time candidates. The registry lives here, the contract
(`Runner`, `Evaluation`) in base.py: a runner's module imports the contract, never the registry.

Imports stay inside the functions: every child process (`python -m eat.runners.harness`) runs
this file first, and must not pay for pydantic or a GPU runner's packages.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from eat.runners.base import Runner
    from eat.target import Target


def get_runner(name: str, language: str | None = None, **kwargs) -> Runner:
    """The runner `name` for candidates in `language` (default: its native language);
    BadInput for a runner or language this version does not have."""
    from eat.errors import BadInput
    from eat.target import LANGUAGES, NATIVE

    languages = LANGUAGES.get(name)
    if languages is None:
        raise BadInput(f"runner {name!r} is not available in this version of eat")
    language = language or languages[0]
    if language not in languages:
        raise BadInput(
            f"runner {name!r} does not take {language!r} candidates "
            f"(one of: {', '.join(languages)})"
        )
    if name == "program":
        from eat.runners.program import ProgramRunner

        return ProgramRunner(**kwargs)
    if language == "c":
        from eat.runners.cpu import CpuRunner

        return CpuRunner(**kwargs)
    if language in NATIVE:
        from eat.runners.gpu import GpuRunner

        return GpuRunner(name, **kwargs)
    from eat.runners.python import PythonRunner

    return PythonRunner(name, language, **kwargs)


def runner_for(target: Target, **kwargs) -> Runner:
    """The runner that judges `target`'s candidates."""
    return get_runner(target.runner, target.language, **kwargs)
