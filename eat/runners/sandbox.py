"""Run untrusted work in a contained subprocess.

Two layers: `run()` starts a fresh process with resource limits, a wall-clock kill of its whole
process group, a scrubbed environment and captured, truncated output; `lock_down()` is called by
the harness inside that process just before it loads a candidate, and installs a seccomp filter
so native code can make threads but cannot fork, exec, signal other processes, open a network
socket or reboot the machine. The filter matters most when eat runs as root, where RLIMIT_NPROC
is not enforced. `confine()`, called there too, uses Landlock (where the kernel has it)
so the candidate changes files only in its own folder (not the cache, the workspace or the
user's files), reads nothing of a run's sealed folder or a target's private/, and opens no
TCP connection; an external agent's fence is the same call, with the network left open.
The folders that work runs in are `scratch()` folders, named for the process that made them, so
that `sweep()` can remove those a run killed with kill -9 left behind.
"""

from __future__ import annotations

import ctypes
import os
import platform
import re
import resource
import shutil
import signal
import stat
import struct
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from eat.procs import alive

# Variables a compiler, numpy and the harness need; everything else is dropped.
_ENV_KEEP = re.compile(r"^(PATH|LANG|LANGUAGE|LC_[A-Z]+|TZ|PYTHONPATH|OPENBLAS_[A-Z0-9_]+|CC)$")
_SECRETISH = re.compile(r"KEY|TOKEN|SECRET|PASS|CRED|AUTH|COOKIE|SESSION|PRIVATE", re.I)


def looks_secret(name: str) -> bool:
    """Whether an environment variable's name suggests it holds a secret."""
    return bool(_SECRETISH.search(name))


def clean_env(workdir: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """An environment with only allow-listed variables and nothing that looks like a secret."""
    env = {k: v for k, v in os.environ.items() if _ENV_KEEP.match(k) and not looks_secret(k)}
    env.update(
        HOME=str(workdir),
        TMPDIR=str(workdir),
        OMP_WAIT_POLICY="passive",
        OPENBLAS_NUM_THREADS="1",
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONHASHSEED="0",
    )
    env.update(extra or {})
    return {k: v for k, v in env.items() if not looks_secret(k)}


@dataclass
class Limits:
    """Resource limits for one contained process."""

    wall_s: float = 60.0
    cpu_s: int = 120
    # None: no limit. GPU runtimes reserve far more address space than they use (CUDA fails to
    # start under RLIMIT_AS), so GPU harnesses cap data_bytes (RLIMIT_DATA) instead, which
    # counts writable private memory (malloc) but not PROT_NONE reservations.
    address_space_bytes: int | None = 8 << 30
    data_bytes: int | None = None
    file_size_bytes: int = 256 << 20
    max_output_chars: int = 8000
    nproc: int = 512


@dataclass
class Completed:
    """What a contained process did."""

    returncode: int | None
    stdout: str
    stderr: str
    wall_s: float
    timed_out: bool = False
    signal_name: str | None = None
    notes: list[str] = field(default_factory=list)


def truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n... [{len(text) - limit} characters cut] ...\n{text[-half:]}"


_LIBC = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG = 1
_PR_SET_NO_NEW_PRIVS = 38


def _preexec(limits: Limits):
    parent = os.getpid()

    def apply() -> None:
        # Die with eat: a killed run must not leave its checks running (or sleeping) forever.
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 1))
        if limits.address_space_bytes is not None:
            resource.setrlimit(resource.RLIMIT_AS, (limits.address_space_bytes,) * 2)
        if limits.data_bytes is not None:
            resource.setrlimit(resource.RLIMIT_DATA, (limits.data_bytes,) * 2)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_size_bytes,) * 2)
        # Not enforced for root; lock_down() covers that case.
        resource.setrlimit(resource.RLIMIT_NPROC, (limits.nproc,) * 2)

    return apply


def run(
    cmd: list[str], *, cwd: Path, env: dict[str, str], limits: Limits, stdin: str = ""
) -> Completed:
    """Run `cmd` contained: new session, rlimits, wall-clock kill of the group, output capped."""
    start = time.monotonic()
    # Output goes to files, not pipes: a candidate that prints gigabytes must not fill our memory.
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=err,
            start_new_session=True,
            preexec_fn=_preexec(limits),
        )
        timed_out = False
        try:
            proc.communicate(stdin.encode(), timeout=limits.wall_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            _kill_group(proc.pid)
            proc.wait()
        wall = time.monotonic() - start
        texts = []
        for f in (out, err):
            f.seek(0)
            raw = f.read(limits.max_output_chars * 8 + 1)
            texts.append(truncate(raw.decode("utf-8", "replace"), limits.max_output_chars))
    rc = proc.returncode
    sig = signal.Signals(-rc).name if rc is not None and rc < 0 else None
    return Completed(
        returncode=rc,
        stdout=texts[0],
        stderr=texts[1],
        wall_s=wall,
        timed_out=timed_out,
        signal_name=sig,
    )


# --- scratch folders -----------------------------------------------------------------------

# eat-<kind>-<pid namespace>.<pid>-<mkdtemp's 8 characters>
_SCRATCH = re.compile(r"^eat-.+-(\d+)\.(\d+)-[a-z0-9_]{8}$")


def _owner() -> str:
    """This process as scratch names say it: a pid is unique only within its pid namespace, and
    containers may share one temporary folder."""
    try:
        namespace = os.readlink("/proc/self/ns/pid").strip("pid:[]")
    except OSError:  # no /proc (macOS): no pid namespaces either
        namespace = "0"
    return f"{namespace}.{os.getpid()}"


def scratch(kind: str, dir: Path | None = None) -> tempfile.TemporaryDirectory:
    """A temporary folder named for the process that makes it, so that `sweep` can tell one a
    killed run left behind (kill -9 runs no cleanup)."""
    return tempfile.TemporaryDirectory(
        prefix=f"eat-{kind}-{_owner()}-", dir=dir, ignore_cleanup_errors=True
    )


def sweep(root: Path | None = None) -> list[Path]:
    """Remove the scratch folders in `root` (the temporary folder) that this user's processes
    made in this pid namespace and that outlived them; returns those removed."""
    namespace = _owner().split(".")[0]
    removed: list[Path] = []
    try:
        entries = list(os.scandir(root or tempfile.gettempdir()))
    except OSError:  # a temporary folder it cannot list: nothing of it to sweep
        return removed
    for entry in entries:
        m = _SCRATCH.match(entry.name)
        if not m or m[1] != namespace or alive(int(m[2])):
            continue
        try:
            if not entry.is_dir(follow_symlinks=False) or entry.stat().st_uid != os.getuid():
                continue
        except OSError:
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        if not os.path.lexists(entry.path):
            removed.append(Path(entry.path))
    return removed


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# --- seccomp -------------------------------------------------------------------------------

_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
# Syscalls a kernel never needs. Numbers per architecture (see the kernel's syscall tables).
_DENY = {
    "x86_64": {
        "fork": 57,
        "vfork": 58,
        "execve": 59,
        "execveat": 322,
        "ptrace": 101,
        "tkill": 200,
        "reboot": 169,
        "kexec_load": 246,
        "init_module": 175,
        "finit_module": 313,
        "delete_module": 176,
        "mount": 165,
        "umount2": 166,
        "swapon": 167,
        "swapoff": 168,
        "process_vm_readv": 310,
        "process_vm_writev": 311,
        "pidfd_send_signal": 424,
        "pidfd_open": 434,
        "setns": 308,
        "unshare": 272,
        "chroot": 161,
        "pivot_root": 155,
        "settimeofday": 164,
        "clock_settime": 227,
        "adjtimex": 159,
        # io_uring runs file and socket operations the filter would never see.
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
    },
    "aarch64": {
        "execve": 221,
        "execveat": 281,
        "ptrace": 117,
        "tkill": 130,
        "reboot": 142,
        "kexec_load": 104,
        "init_module": 105,
        "finit_module": 273,
        "delete_module": 106,
        "mount": 40,
        "umount2": 39,
        "process_vm_readv": 270,
        "process_vm_writev": 271,
        "pidfd_send_signal": 424,
        "pidfd_open": 434,
        "setns": 268,
        "unshare": 97,
        "chroot": 51,
        "pivot_root": 41,
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
    },
}
_CLONE = {"x86_64": 56, "aarch64": 220}
_CLONE3 = 435
_SELF_SIGNALS = {"x86_64": {"kill": 62, "tgkill": 234}, "aarch64": {"kill": 129, "tgkill": 131}}
_SOCKET = {"x86_64": 41, "aarch64": 198}
# AF_INET, AF_INET6, AF_PACKET: a kernel needs no network (local AF_UNIX sockets stay allowed).
_NET_FAMILIES = (2, 10, 17)
_CLONE_THREAD = 0x00010000
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
_EPERM, _EACCES, _ENOSYS = 1, 13, 38
# BPF opcodes
_LD_W_ABS, _JEQ_K, _JSET_K, _RET_K = 0x20, 0x15, 0x45, 0x06


def _bpf_program(arch: str, pid: int) -> bytes:
    """Seccomp filter: threads yes, processes no, signals to ourselves only, no network."""
    ins: list[tuple[int, int, int, int]] = []

    def op(code: int, k: int, jt: int = 0, jf: int = 0) -> None:
        ins.append((code, jt, jf, k))

    allow = lambda: op(_RET_K, _RET_ALLOW)  # noqa: E731
    deny = lambda err=_EPERM: op(_RET_K, _RET_ERRNO | err)  # noqa: E731
    op(_LD_W_ABS, 4)  # seccomp_data.arch
    op(_JEQ_K, _AUDIT_ARCH[arch], 1, 0)
    deny()  # a foreign ABI (x32, i386) is refused outright
    op(_LD_W_ABS, 0)  # seccomp_data.nr
    for nr in _DENY[arch].values():
        op(_JEQ_K, nr, 0, 1)
        deny()
    # glibc falls back from clone3 to clone when clone3 says ENOSYS, so flags stay checkable.
    op(_JEQ_K, _CLONE3, 0, 1)
    deny(_ENOSYS)
    op(_JEQ_K, _CLONE[arch], 0, 4)
    op(_LD_W_ABS, 16)  # args[0] (low word): clone flags
    op(_JSET_K, _CLONE_THREAD, 0, 1)
    allow()
    deny()
    op(_JEQ_K, _SOCKET[arch], 0, 3 + len(_NET_FAMILIES))
    op(_LD_W_ABS, 16)  # args[0]: address family
    for i, family in enumerate(_NET_FAMILIES):
        op(_JEQ_K, family, len(_NET_FAMILIES) - i, 0)
    allow()
    deny(_EACCES)
    for nr in _SELF_SIGNALS[arch].values():
        op(_JEQ_K, nr, 0, 4)
        op(_LD_W_ABS, 16)  # args[0]: target pid
        op(_JEQ_K, pid, 0, 1)
        allow()
        deny()
    allow()
    return b"".join(struct.pack("HBBI", *i) for i in ins)


def lock_down() -> str | None:
    """Install the seccomp filter in this process; returns why it could not, or None."""
    arch = platform.machine()
    if arch not in _AUDIT_ARCH or not hasattr(ctypes, "CDLL"):
        return f"seccomp filter not available on {arch}"
    prog = _bpf_program(arch, os.getpid())
    buf = ctypes.create_string_buffer(prog, len(prog))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(prog) // 8, ctypes.addressof(buf))
    libc = _LIBC
    pr_set_seccomp, seccomp_mode_filter = 22, 2
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return f"prctl(NO_NEW_PRIVS) failed: errno {ctypes.get_errno()}"
    if libc.prctl(pr_set_seccomp, seccomp_mode_filter, ctypes.byref(fprog), 0, 0) != 0:
        return f"seccomp filter refused: errno {ctypes.get_errno()}"
    return None


# --- Landlock ------------------------------------------------------------------------------

# Syscall numbers: the same on x86_64 and aarch64 (new syscalls share one table).
_LL_CREATE, _LL_ADD_RULE, _LL_RESTRICT = 444, 445, 446
_LL_VERSION, _LL_PATH_BENEATH = 1, 1
# Rights that change the filesystem (linux/landlock.h), by the ABI that brought them: write a
# file, remove and make anything (ABI 1), link or rename across folders (2), truncate (3).
# Reading and executing stay unrestricted: runtimes and libraries load from everywhere.
_LL_FS = {1: 0b1_1111_1111_0010, 2: 1 << 13, 3: 1 << 14}
_LL_TCP = 0b11  # bind and connect (ABI 4)
# What a rule on a single file may grant: execute, write, read (ABI 1), truncate (3).
_LL_FILE_RIGHTS = 0b111 | 1 << 14


_LIBC.syscall.restype = ctypes.c_long


def _syscall(nr: int, *args) -> int:
    return _LIBC.syscall(ctypes.c_long(nr), *args)


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 where it has none."""
    if platform.system() != "Linux" or platform.machine() not in _AUDIT_ARCH:
        return 0
    return max(0, _syscall(_LL_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(_LL_VERSION)))


def containment() -> str:
    """What holds a candidate on this machine, in words (`eat doctor`)."""
    seccomp = (
        "seccomp"
        if platform.system() == "Linux" and platform.machine() in _AUDIT_ARCH
        else "no seccomp filter"
    )
    abi = landlock_abi()
    if not abi:
        return f"{seccomp}; no Landlock: candidates write wherever the user can"
    return f"{seccomp}; Landlock ABI {abi}: candidates write only in their own folder" + (
        " and open no TCP connection" if abi >= 4 else ""
    )


# Reading a file and listing a folder (ABI 1): handled only where some paths are unreadable.
_LL_READ_FILE, _LL_READ_DIR = 1 << 2, 1 << 3


def readable_around(unreadable: list[str]) -> tuple[list[str], list[str]]:
    """Landlock grants by allow-list, so "everything but these" is spelled as rules: (paths
    whose whole tree is readable, the folders above the unreadable ones, which may only be
    listed). Symbolic links are left out: a rule follows its link, and one pointing above an
    unreadable path would grant it; the real path it names has a rule of its own."""
    denied = {os.path.realpath(p) for p in unreadable}
    above = set()
    for path in denied:
        while path != "/":
            path = os.path.dirname(path)
            above.add(path)
    trees: list[str] = []

    def walk(folder: str) -> None:
        try:
            names = os.listdir(folder)
        except OSError:
            return  # gone or unlistable: nothing of it becomes readable
        for name in names:
            path = os.path.join(folder, name)
            if path in denied or os.path.islink(path):
                continue
            if path in above:
                walk(path)
            else:
                trees.append(path)

    if denied:
        walk("/")
    return trees, sorted(above)


def confine(
    writable: list[str], unreadable: Sequence[str] = (), network: bool = False
) -> str | None:
    """From now on and for good, let this process (and what it starts) change files only
    beneath `writable`, read none beneath `unreadable` (their names stay listable), and, unless
    `network`, open no TCP connection; returns why it could not, or None."""
    abi = landlock_abi()
    if abi < 1:
        return "Landlock is not available: the process can write wherever this user can"
    fs = sum(bits for v, bits in _LL_FS.items() if v <= abi)
    read = _LL_READ_FILE | _LL_READ_DIR if unreadable else 0
    tcp = 0 if network or abi < 4 else _LL_TCP
    attr = struct.pack("=QQ", fs | read, tcp) if abi >= 4 else struct.pack("=Q", fs | read)
    ruleset = _syscall(
        _LL_CREATE, ctypes.c_char_p(attr), ctypes.c_size_t(len(attr)), ctypes.c_uint32(0)
    )
    if ruleset < 0:
        return f"Landlock refused the ruleset: errno {ctypes.get_errno()}"
    trees, above = readable_around(list(unreadable))
    rules = (
        [(f, fs) for f in writable]
        + [(t, read) for t in trees]
        + [(a, _LL_READ_DIR) for a in above]
    )
    try:
        for folder, rights in rules:
            try:
                fd = os.open(folder, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                if rights == fs:
                    return f"Landlock: cannot open {folder} to let it be written"
                continue  # removed since it was listed
            try:
                if not stat.S_ISDIR(os.fstat(fd).st_mode):
                    rights &= _LL_FILE_RIGHTS  # a rule on a file takes only a file's rights
                rule = struct.pack("=Qi", rights, fd)  # landlock_path_beneath_attr is packed
                if (
                    _syscall(
                        _LL_ADD_RULE,
                        ctypes.c_int(ruleset),
                        ctypes.c_int(_LL_PATH_BENEATH),
                        ctypes.c_char_p(rule),
                        ctypes.c_uint32(0),
                    )
                    != 0
                ):
                    return f"Landlock refused {folder}: errno {ctypes.get_errno()}"
            finally:
                os.close(fd)
        if _LIBC.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return f"prctl(NO_NEW_PRIVS) failed: errno {ctypes.get_errno()}"
        if _syscall(_LL_RESTRICT, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            return f"Landlock did not take hold: errno {ctypes.get_errno()}"
    finally:
        os.close(ruleset)
    return None
