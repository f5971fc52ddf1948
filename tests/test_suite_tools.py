"""The suite's own tools do what the suite relies on."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_an_xdist_group_keeps_its_tests_on_one_worker(tmp_path):
    """The conformance tests of one candidate share a worker, so it is evaluated once, and the
    Ray tests share one so that one Ray instance runs at a time: a pytest and pytest-xdist
    pair that drops the groups (pytest 9.2 with xdist 3.8) would lose both silently."""
    (tmp_path / "test_grouped.py").write_text(
        "import pytest\n"
        "P = [pytest.param(i, marks=pytest.mark.xdist_group('g')) for i in range(4)]\n"
        "@pytest.mark.parametrize('i', P)\n"
        "def test_a(i): pass\n"
        "@pytest.mark.parametrize('i', P)\n"
        "def test_b(i): pass\n"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-n",
            "2",
            "--dist",
            "loadgroup",
            "-v",
            "-p",
            "no:cacheprovider",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-2000:]
    workers = re.findall(r"^\[(gw\d+)\].* PASSED ", done.stdout, re.M)
    assert len(workers) == 8 and len(set(workers)) == 1, done.stdout[-2000:]
