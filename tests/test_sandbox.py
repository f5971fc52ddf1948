"""The contained process: environment scrubbing, limits, the seccomp filter, output caps."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import eat
from eat.runners import sandbox


def _py(code: str, tmp_path, limits=None, env_extra=None, **kw):
    env = sandbox.clean_env(tmp_path, env_extra)
    return sandbox.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        limits=limits or sandbox.Limits(wall_s=20),
        **kw,
    )


def test_environment_keeps_path_and_drops_secrets(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-leak")
    monkeypatch.setenv("MY_DB_PASSWORD", "hunter2")
    monkeypatch.setenv("RANDOM_SETTING", "x")
    env = sandbox.clean_env(tmp_path, {"PYTHONPATH": "p", "GITHUB_TOKEN": "t"})
    assert "PATH" in env and env["HOME"] == str(tmp_path) and env["PYTHONPATH"] == "p"
    for name in ("OPENAI_API_KEY", "MY_DB_PASSWORD", "RANDOM_SETTING", "GITHUB_TOKEN"):
        assert name not in env
    done = _py("import os; print(sorted(os.environ))", tmp_path)
    assert "OPENAI_API_KEY" not in done.stdout and "PATH" in done.stdout


def test_wall_clock_kill_reaches_the_whole_group(tmp_path):
    mark = f"300.{os.getpid()}"  # a sleep of this test's own, not one another process runs
    code = f"import subprocess, time; subprocess.Popen(['sleep', '{mark}']); time.sleep(300)"
    start = time.monotonic()
    done = _py(code, tmp_path, limits=sandbox.Limits(wall_s=1))
    assert done.timed_out and time.monotonic() - start < 10
    deadline = time.monotonic() + 5  # SIGKILL is delivered asynchronously
    while (
        leftovers := [
            p for p in os.listdir("/proc") if p.isdigit() and _cmdline(p) == f"sleep{mark}"
        ]
    ) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert leftovers == []


def _cmdline(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b"").decode()
    except OSError:
        return ""


def test_address_space_limit_stops_huge_allocations(tmp_path):
    done = _py(
        "b = bytearray(50 << 30)",
        tmp_path,
        limits=sandbox.Limits(wall_s=20, address_space_bytes=2 << 30),
    )
    assert done.returncode != 0 and "MemoryError" in done.stderr


def test_output_is_truncated(tmp_path):
    done = _py(
        "print('x' * 1_000_000)", tmp_path, limits=sandbox.Limits(wall_s=20, max_output_chars=1000)
    )
    assert done.returncode == 0 and len(done.stdout) < 1200 and "characters cut" in done.stdout


def test_no_core_dumps_and_signal_is_named(tmp_path):
    done = _py("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", tmp_path)
    assert done.signal_name == "SIGSEGV"
    assert not any(p.name.startswith("core") for p in tmp_path.iterdir())


@pytest.mark.skipif(
    os.uname().machine not in ("x86_64", "aarch64"),
    reason="the seccomp filter is defined for x86_64 and aarch64 only",
)
def test_lock_down_allows_threads_and_refuses_processes_and_the_network(tmp_path):
    code = """
import os, threading, ctypes
from eat.runners.sandbox import lock_down
assert lock_down() is None
box = []
t = threading.Thread(target=lambda: box.append(1)); t.start(); t.join()
for what, call in [("fork", os.fork), ("exec", lambda: os.execv("/bin/true", ["true"]))]:
    try:
        call(); print(what, "ALLOWED")
    except OSError as e:
        print(what, "refused", e.errno)
libc = ctypes.CDLL(None, use_errno=True)
print("kill-other", libc.kill(1, 0), "kill-self", libc.kill(os.getpid(), 0), "threads", box)
print("io_uring", libc.syscall(425, 1, None), ctypes.get_errno())  # io_uring_setup
import socket
for family, kind in [("inet", socket.AF_INET), ("inet6", socket.AF_INET6),
                     ("unix", socket.AF_UNIX)]:
    try:
        socket.socket(kind, socket.SOCK_DGRAM).close(); print(family, "allowed")
    except OSError as e:
        print(family, "refused", e.errno)
"""
    repo = Path(eat.__file__).resolve().parent.parent
    done = _py(code, tmp_path, env_extra={"PYTHONPATH": str(repo)})
    assert done.returncode == 0, done.stderr
    assert "fork refused 1" in done.stdout and "exec refused 1" in done.stdout
    assert "kill-other -1 kill-self 0 threads [1]" in done.stdout
    assert "inet refused 13" in done.stdout and "inet6 refused 13" in done.stdout
    assert "unix allowed" in done.stdout  # local sockets are no way out of the machine
    assert "io_uring -1 1" in done.stdout  # it would run opens and sockets unfiltered


_ATTEMPT = """
def attempt(what, call):
    try:
        call(); print(what, "done")
    except OSError as e:
        print(what, "refused", e.errno)
"""


def _attempts(code: str, cwd: Path) -> dict[str, str]:
    """Run `code` (which may call attempt(what, call)) in a child: what each line said."""
    repo = Path(eat.__file__).resolve().parent.parent
    done = _py(_ATTEMPT + code, cwd, env_extra={"PYTHONPATH": str(repo)})
    assert done.returncode == 0, done.stderr
    return dict(line.split(" ", 1) for line in done.stdout.splitlines())


@pytest.mark.skipif(
    sandbox.landlock_abi() < 4, reason="needs Landlock ABI 4 (Linux 6.7) for its TCP rule"
)
def test_confine_keeps_writes_in_the_folder_and_refuses_tcp(tmp_path):
    """Files change only beneath the given folders (a rename out of one is refused too), the rest
    of the filesystem stays readable, and no TCP connection opens, even to this machine."""
    import socket

    server = socket.create_server(("127.0.0.1", 0))
    own = tmp_path / "own"
    own.mkdir()
    (tmp_path / "victim").write_text("kept")
    code = f"""
import os, socket
from eat.runners.sandbox import confine
print("confined", confine([".", "/dev"]))
attempt("own", lambda: open("scratch", "w").write("x"))
attempt("devnull", lambda: open("/dev/null", "w").write("x"))
attempt("victim", lambda: open("../victim", "w"))
attempt("new-outside", lambda: open("../new", "x"))
attempt("rename-out", lambda: os.rename("scratch", "../moved"))
attempt("remove-outside", lambda: os.remove("../victim"))
attempt("read-outside", lambda: open("../victim").read())
attempt("tcp", lambda: socket.create_connection(("127.0.0.1", {server.getsockname()[1]}), 5))
"""
    said = _attempts(code, own)
    server.close()
    assert said["confined"] == "None"
    assert said["own"] == said["devnull"] == said["read-outside"] == "done"
    for what in ("victim", "new-outside", "rename-out", "remove-outside", "tcp"):
        assert said[what] == "refused 13", (what, said)
    assert (tmp_path / "victim").read_text() == "kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["own", "victim"]
    assert "write only in their own folder and open no TCP" in sandbox.containment()  # doctor


@pytest.mark.skipif(
    sandbox.landlock_abi() < 4, reason="needs Landlock ABI 4 (Linux 6.7) for its TCP rule"
)
def test_an_agents_fence_hides_what_it_must_not_read_and_leaves_the_network_open(tmp_path):
    """`confine(writable, unreadable, network=True)`, an agent's fence: files beneath the
    unreadable folders cannot be read, by path or through a symbolic link, though their names
    can be listed; everything else reads as before, also through links (Python imports, a
    shell); writes stay in the writable folder; TCP connects."""
    import socket

    server = socket.create_server(("127.0.0.1", 0))
    sealed, own = tmp_path / "ws" / ".eat" / "sealed", tmp_path / "ws" / "worktree"
    sealed.mkdir(parents=True)
    own.mkdir()
    (sealed / "key").write_text("secret")
    (tmp_path / "ws" / "LEARNING.md").write_text("shared")
    (own / "link").symlink_to(sealed)
    (own / "notes").symlink_to(tmp_path / "ws" / "LEARNING.md")
    code = f"""
import os, socket, subprocess
from eat.runners.sandbox import confine
print("confined", confine(["."], [{str(sealed)!r}], network=True))
attempt("key", lambda: open({str(sealed / "key")!r}).read())
attempt("key-by-link", lambda: open("link/key").read())
attempt("list-sealed", lambda: os.listdir({str(sealed)!r}))
attempt("shared", lambda: open("notes").read())
attempt("own", lambda: open("scratch", "w").write("x"))
attempt("write-shared", lambda: open("notes", "a"))
attempt("tcp", lambda: socket.create_connection(("127.0.0.1", {server.getsockname()[1]}), 5))
shell = subprocess.run(["sh", "-c", "cat link/key; python3 -c 'import json; print(2)'"],
                       capture_output=True, text=True)
print("shell", shell.stdout.strip(), "Permission denied" in shell.stderr)
"""
    said = _attempts(code, own)
    server.close()
    assert said["confined"] == "None"
    assert said["key"] == said["key-by-link"] == said["write-shared"] == "refused 13"
    assert said["list-sealed"] == said["shared"] == said["own"] == said["tcp"] == "done"
    assert said["shell"] == "2 True"


def _eat_child(tmp_path, code: str) -> list[str]:
    """A Python process running `code` with this eat as `sandbox` and `tmp_path` as `d`."""
    repo = Path(eat.__file__).resolve().parent.parent
    head = (
        f"import os, sys; sys.path.insert(0, {str(repo)!r})\n"
        "from pathlib import Path\nfrom eat.runners import sandbox\n"
        f"d = Path({str(tmp_path)!r})\n"
    )
    return [sys.executable, "-c", head + code]


def test_contained_processes_die_with_the_process_that_started_them(tmp_path):
    code = (
        "sandbox.run(['sleep', '301'], cwd=d, env=sandbox.clean_env(d),"
        " limits=sandbox.Limits(wall_s=600))\n"
    )
    parent = subprocess.Popen(_eat_child(tmp_path, code))
    sleepers = []
    deadline = time.monotonic() + 20
    while not sleepers and time.monotonic() < deadline:
        sleepers = [p for p in os.listdir("/proc") if p.isdigit() and _cmdline(p) == "sleep301"]
        time.sleep(0.05)
    assert sleepers, "the contained sleep never started"
    parent.kill()  # eat killed with -9 mid-check
    parent.wait()
    deadline = time.monotonic() + 5
    while any(_cmdline(p) == "sleep301" for p in sleepers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_cmdline(p) == "sleep301" for p in sleepers)


def test_sweep_removes_the_scratch_folders_of_killed_processes_only(tmp_path):
    """A process killed with -9 inside `scratch` leaves its folder; `sweep` removes it and
    keeps a live process's folder, another pid namespace's, other names and symbolic links."""
    code = (
        "with sandbox.scratch('cand', d) as mine:\n"
        "    (Path(mine) / 'candidate.so').write_bytes(b'x' * 1000)\n"
        "    os.kill(os.getpid(), 9)\n"
    )
    killed = subprocess.run(_eat_child(tmp_path, code))
    assert killed.returncode == -9
    (left,) = tmp_path.iterdir()
    assert left.name.startswith("eat-cand-") and (left / "candidate.so").exists()
    namespace, pid = left.name.split("-")[2].split(".")
    with sandbox.scratch("cand", tmp_path) as live:
        foreign = tmp_path / f"eat-cand-{int(namespace) + 1}.{pid}-abcdefgh"
        foreign.mkdir()  # another pid namespace's (a container sharing /tmp): not ours to judge
        unrelated = tmp_path / "eat-cand-notapid"
        unrelated.mkdir()
        link = tmp_path / left.name.replace("eat-cand-", "eat-link-")
        link.symlink_to(live)
        assert sandbox.sweep(tmp_path) == [left]
        assert not left.exists()
        assert {p.name for p in tmp_path.iterdir()} == {
            Path(live).name,
            foreign.name,
            unrelated.name,
            link.name,
        }
    assert sandbox.sweep(tmp_path) == []
    assert sandbox.sweep(tmp_path / "missing") == []  # nothing to list: nothing swept
