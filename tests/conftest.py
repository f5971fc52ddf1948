"""Setup shared by every test."""

from __future__ import annotations

import signal

import pytest
from llm_server import llm_server  # noqa: F401

# A shell starts a background job (`pytest ... &` in a script) with SIGINT ignored, and every
# eat process a test starts would inherit that: the tests that stop a run with Ctrl-C (SIGINT)
# need the default, as in a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session", autouse=True)
def eat_cache_dir(tmp_path_factory):
    """EAT_CACHE_DIR points at a fresh folder for the session: builds and locks stay out of ~."""
    path = tmp_path_factory.mktemp("eat-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EAT_CACHE_DIR", str(path))
        yield path


EXAMPLES = __import__("pathlib").Path(__file__).resolve().parents[1] / "examples"
QUICK_EVALUATION = """
[evaluation]
seeds = 2
warmup = 1
min_repeats = 3
max_repeats = 5
budget_s = 0.05
timeout_s = 30
"""


@pytest.fixture
def quick_matmul(tmp_path):
    """A copy of examples/cpu_matmul whose harness checks less and times briefly (tests only)."""
    import shutil

    dst = tmp_path / "cpu_matmul"
    shutil.copytree(EXAMPLES / "cpu_matmul", dst)
    with open(dst / "target.toml", "a") as f:
        f.write(QUICK_EVALUATION)
    return dst
