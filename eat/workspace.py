"""The workspace on disk: every path defined once, atomic writes, the event log, the lock, git.

The files are the truth. history.jsonl is append-only, and eat its only writer: each line
carries a mac keyed with the run's secret, so a line anyone else wrote (or changed) is skipped
and named, never trusted and never fatal. A torn last line (the process died mid-write) is
dropped on resume. history.jsonl and EVOLUTION.md grow with the run and are kept out of git (a
blob per commit would make the repository grow with the square of the run's length); `git log`
carries the same story.
"""

from __future__ import annotations

import fcntl
import hmac
import json
import os
import queue
import secrets
import shutil
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import git

import eat.workspace_template as workspace_template
from eat.config import RunConfig, dump_config, load_config
from eat.errors import BadInput
from eat.events import Event, LogTampered, describe, parse_event

TEMPLATE = Path(workspace_template.__file__).parent
# Temporary files of atomic writes are ignored so a commit running beside a writer never sees
# a file that vanishes before git can read it.
GIT_IGNORED = [
    "/.eat/",
    "/history.jsonl",
    "/EVOLUTION.md",
    ".*.tmp",
    "/.best.tmp/",
    "/.best.old/",
    "/worktrees/",
    "/report.html",
]
# A team branch tracks what the agent works on; scratch files, the request folder and the
# read-only copies stay out of it.
WORKTREE_IGNORED = ["*", "!.gitignore", "!candidate.*", "!NOTES.md"]
# Queued git jobs past which the queued commits are made as one (see _Committer._work).
BACKLOG = 8
# Commits asked of the run's repository between two `git gc --auto`: a run that never stops
# must not keep a loose file per object (some ten per candidate) for a week.
PACK_EVERY = 256


SOURCE_NAMES = {
    "c": "candidate.c",
    "cuda": "candidate.cu",
    "hip": "candidate.hip",
    "pytorch": "candidate.py",
    "triton": "candidate.py",
    "mlx": "candidate.py",
    "python": "candidate.py",
    "text": "candidate.txt",
}


def source_name(language: str) -> str:
    """The file name of a candidate's source in its folder."""
    return SOURCE_NAMES[language]


class Paths:
    """Every file and folder of a workspace."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.config = self.root / "eat.toml"
        self.learning = self.root / "LEARNING.md"
        self.evolution = self.root / "EVOLUTION.md"
        self.history = self.root / "history.jsonl"
        self.teams = self.root / "teams"
        self.best = self.root / "best"
        self.state = self.root / ".eat"  # machine state, rebuilt from the files
        self.lock = self.state / "lock"
        self.checkpoint = self.state / "supervisor.sqlite"
        self.skill = self.root / "SKILL.md"  # the skill the run was started with, if any
        self.inbox = self.state / "steer"  # `eat steer` messages not yet recorded
        # What no agent may read (its fence denies it): the log's key, the target's snapshot.
        self.sealed = self.state / "sealed"
        self.key = self.sealed / "key"  # the run's secret: history.jsonl's macs
        self.target_copy = self.sealed / "target"  # the target folder as the run started
        self.seen = self.state / "steering.json"  # people's text as the loop last saw it
        self.worktrees = self.root / "worktrees"  # a git worktree per team whose agent edits files
        self.report = self.root / "report.html"  # `eat report`'s default output

    def team(self, team: str) -> Path:
        return self.teams / team

    def team_spec(self, team: str) -> Path:
        return self.team(team) / "team.yaml"

    def team_notes(self, team: str) -> Path:
        return self.team(team) / "NOTES.md"

    def candidate(self, team: str, cid: str) -> Path:
        return self.team(team) / "candidates" / cid

    def source(self, team: str, cid: str, language: str) -> Path:
        """A candidate's source as it was evaluated."""
        return self.candidate(team, cid) / source_name(language)

    def result(self, team: str, cid: str) -> Path:
        return self.candidate(team, cid) / "result.json"

    def agent_log(self, team: str) -> Path:
        """What the team's external agent printed, turn after turn (secrets masked)."""
        return self.team(team) / "agent.log"

    # A team's worktree (branch team/<id>): where its agent works, and what eat puts there.
    def worktree(self, team: str) -> Path:
        return self.worktrees / team

    def work_source(self, team: str, language: str) -> Path:
        return self.worktree(team) / source_name(language)

    def task_file(self, team: str) -> Path:
        return self.worktree(team) / "TASK.md"

    def agent_notes(self, team: str) -> Path:
        """The agent's own notebook, committed on its branch with each submit."""
        return self.worktree(team) / "NOTES.md"

    def reference_copy(self, team: str, name: str) -> Path:
        return self.worktree(team) / name

    def others(self, team: str) -> Path:
        """Copies of the other teams' best candidates, refreshed at each turn."""
        return self.worktree(team) / "others"

    def requests(self, team: str) -> Path:
        """`eat submit` and `eat check` leave requests here; the team's turn answers them."""
        return self.worktree(team) / ".requests"


def write_atomic(path: Path, text: str, durable: bool = True) -> None:
    """Replace `path` so a reader (or a crash) sees the old or the new content, never half.

    `durable` also survives a power cut (fsync); files derived from the log need not.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        if durable:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)


def write_output(out: Path, text: str) -> None:
    """Write a file a person named for eat's output (a report, an exported skill), atomically;
    BadInput when it is a folder, its folder is missing or the write fails."""
    if out.is_dir():
        raise BadInput(f"{out}: is a folder; give a file name")
    if not out.parent.is_dir():
        raise BadInput(f"{out.parent}: no such folder")
    try:
        write_atomic(out, text, durable=False)
    except OSError as e:
        raise BadInput(f"{out}: cannot write: {e.strerror or e}") from None


# -- the log's lines ------------------------------------------------------------------------------
# A line eat writes is the event's JSON with one more key at the end, its mac:
# `{...,"mac":"<HMAC-SHA256(key, the JSON without it), 64 hex digits>"}`. The mac covers the
# event's seq, so a line moved elsewhere shows (a replay, a gap), and each line is checked on its
# own, so one deleted or changed line costs no other.
MAC_KEY, MAC_HEX = b',"mac":"', 64
MAC_TAIL = len(MAC_KEY) + MAC_HEX + 2  # the key, the digits, '"}'


def _mac(key: bytes, body: bytes) -> bytes:
    return hmac.digest(key, body, "sha256").hex().encode()


def _with_mac(key: bytes, body: str) -> str:
    return f'{body[:-1]}{MAC_KEY.decode()}{_mac(key, body.encode()).decode()}"}}'


def _split_mac(raw: bytes) -> tuple[bytes, bytes | None]:
    """A line's event JSON exactly as it was sealed, and its mac (None: the line has none)."""
    if raw.endswith(b'"}') and raw[-MAC_TAIL : -MAC_HEX - 2] == MAC_KEY:
        return raw[:-MAC_TAIL] + b"}", raw[-MAC_HEX - 2 : -2]
    return raw, None


def read_key(paths: Paths) -> bytes | None:
    """The run's secret the log's macs are keyed with; None when missing or unreadable (a log
    older than keys has none)."""
    try:
        return bytes.fromhex(paths.key.read_text())
    except (OSError, ValueError):
        return None


def _new_key(paths: Paths) -> bytes:
    """A fresh secret, in a file (and folder) only its owner can read."""
    paths.sealed.mkdir(mode=0o700, parents=True, exist_ok=True)
    paths.sealed.chmod(0o700)
    key = secrets.token_bytes(32)
    tmp = paths.key.with_name(f".{paths.key.name}.tmp")
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write(key.hex() + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, paths.key)
    return key


class LogReader:
    """The log's rules, line after line (for `read_log`, and for `eat watch` as the log grows):
    a line is taken when eat wrote it (its mac, where the workspace has a key) and its seq comes
    after the last taken one; every other line is skipped and noted in `bad` as (line, why), as
    is a line taken after missing ones."""

    def __init__(self, key: bytes | None):
        self.key = key
        self.lines = 0  # complete lines read
        self.seq = 0  # the last taken event's
        self.macs = False  # a line with a mac was read: from there on, every line needs one
        self.skipped = 0  # lines skipped since the last taken one
        self.bad: list[tuple[int, str]] = []

    def take(self, raw: bytes) -> Event | None:
        """The event of the next complete line (given without its newline); None: skipped."""
        self.lines += 1
        event, why = self._check(raw)
        if event is not None and event.seq <= self.seq:
            why = f"a replay: seq {event.seq} after seq {self.seq}"
            event = None
        if event is None:
            self.bad.append((self.lines, why))
            self.skipped += 1
            return None
        missing = event.seq - self.seq - 1
        if missing > self.skipped:  # more events gone than lines skipped: lines were deleted
            self.bad.append(
                (
                    self.lines,
                    f"seq {event.seq} after seq {self.seq}: {missing} "
                    "missing (lines deleted?); kept",
                )
            )
        self.seq, self.skipped = event.seq, 0
        return event

    def _check(self, raw: bytes) -> tuple[Event | None, str]:
        body, mac = _split_mac(raw)
        if mac is not None:
            if self.key is None:
                if not self.macs:
                    self.bad.append(
                        (
                            self.lines,
                            "has a mac, but the workspace's key is missing "
                            "or unreadable: no line can be checked; kept",
                        )
                    )
            elif not hmac.compare_digest(mac, _mac(self.key, body)):
                return None, "wrong mac: changed, or not written by eat"
            self.macs = True
        try:
            event = parse_event(body)
        except ValueError:
            return None, "not an event"
        if mac is None and self.macs:
            return None, "no mac: not written by eat"
        return event, ""


def tampered(bad: list[tuple[int, str]]) -> str | None:
    """One line for people about a log's bad lines: the first, and how many more; None: none."""
    if not bad:
        return None
    (line, why), more = bad[0], len(bad) - 1
    return f"line {line}: {why}" + (f" (and {more} more)" if more else "")


@dataclass
class Log:
    """history.jsonl as read: the events of the lines eat wrote, in order, and what was wrong."""

    events: list[Event]
    end: int  # bytes up to the last complete line's end (a torn one follows)
    bad: list[tuple[int, str]]  # LogReader.bad
    macs: bool  # LogReader.macs


class Workspace:
    """One run's folder. Open it with `create` or `open`; write only while holding `lock()`."""

    def __init__(self, root: Path):
        self.paths = Paths(root)
        self.seq = 0
        self.bad: list[tuple[int, str]] = []  # what the last load() found wrong with the log
        self._key: bytes | None = None  # the log's key, for append (create, load)
        self._repo: git.Repo | None = None
        self._committer: _Committer | None = None

    # -- creating and opening -----------------------------------------------------------------

    @classmethod
    def create(cls, root: Path, config: RunConfig) -> Workspace:
        """Lay out a new workspace from workspace_template/; refuses a non-empty folder."""
        root = Path(root)
        if root.exists() and (not root.is_dir() or any(root.iterdir())):
            raise BadInput(f"{root}: already exists and is not empty (use `eat resume`)")
        shutil.copytree(
            TEMPLATE,
            root,
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns("__init__.py", "__pycache__"),
        )
        ws = cls(root)
        p = ws.paths
        p.state.mkdir(exist_ok=True)
        p.teams.mkdir(exist_ok=True)
        write_atomic(p.config, dump_config(config))
        ws._key = _new_key(p)  # before the log exists: whoever sees the log finds its key
        p.history.touch()
        write_atomic(root / ".gitignore", "\n".join(GIT_IGNORED) + "\n")
        repo = git.Repo.init(root)
        with repo.config_writer() as cw:
            cw.set_value("user", "name", "eat")
            cw.set_value("user", "email", "eat@localhost")
            # git would start `git maintenance run --auto` after every commit: a process that
            # cost as much as the commit itself (2.7 of 6 ms). The git thread packs every
            # PACK_EVERY commits instead, and the run at stop.
            cw.set_value("maintenance", "auto", "false")
            cw.set_value("gc", "autoDetach", "false")  # pack() returns when it is done
        ws._repo = repo
        return ws

    @classmethod
    def open(cls, root: Path) -> Workspace:
        """An existing workspace; raises BadInput when the folder is not one."""
        ws = cls(Path(root))
        p = ws.paths
        if not p.root.is_dir():
            raise BadInput(f"{p.root}: no such workspace")
        for required in (p.config, p.history):
            if not required.is_file():
                raise BadInput(f"{p.root}: not an eat workspace ({required.name} is missing)")
        return ws

    def config(self) -> RunConfig:
        return load_config(self.paths.config)

    def save_config(self, config: RunConfig) -> None:
        write_atomic(self.paths.config, dump_config(config))

    # -- the lock -----------------------------------------------------------------------------

    @contextmanager
    def lock(self):
        """Hold the workspace for writing; a second eat process gets a clear BadInput."""
        self.paths.state.mkdir(exist_ok=True)
        fd = os.open(self.paths.lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
                raise BadInput(
                    f"{self.paths.root}: in use by another eat process "
                    f"(pid {holder}); stop it first"
                ) from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
            stale = self.paths.root / ".git" / "index.lock"
            if stale.exists():  # git was killed with us; nobody else writes this repository
                stale.unlink()
            yield self
        finally:
            os.close(fd)  # closing releases the flock; the kernel does it on kill -9 too

    def is_locked(self) -> bool:
        """Whether some process holds the lock now (for `eat status`)."""
        if not self.paths.lock.exists():
            return False
        fd = os.open(self.paths.lock, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return False
        except BlockingIOError:
            return True
        finally:
            os.close(fd)

    # -- the event log ------------------------------------------------------------------------

    def read_log(self) -> Log:
        """The log as it stands (read-only, safe while a run writes it): every line eat wrote,
        the others named; a torn last line is left out."""
        return self._read(read_key(self.paths))

    def _read(self, key: bytes | None) -> Log:
        data = self.paths.history.read_bytes()
        end = data.rfind(b"\n") + 1  # a line counts once its newline is written
        reader = LogReader(key)
        events = [e for raw in data[:end].split(b"\n")[:-1] if (e := reader.take(raw)) is not None]
        return Log(events=events, end=end, bad=reader.bad, macs=reader.macs)

    def read_events(self) -> tuple[list[Event], int]:
        """`read_log`'s events, and the bytes up to the end of its last complete line."""
        log = self.read_log()
        return log.events, log.end

    def load(self) -> list[Event]:
        """Read the log for writing: drops a torn tail (nothing else: a bad line is evidence),
        notes the bad lines in `bad`, sets the next seq; a log older than keys gets one, and
        every line from here on a mac. Raises BadInput when the log has macs but no key."""
        key = read_key(self.paths)
        log = self._read(key)
        if log.end < self.paths.history.stat().st_size:
            with open(self.paths.history, "r+b") as f:
                f.truncate(log.end)
                os.fsync(f.fileno())
        if key is None:
            if log.macs:
                raise BadInput(
                    f"{self.paths.key}: missing or unreadable, so history.jsonl's "
                    "macs cannot be checked; restore it"
                )
            key = _new_key(self.paths)
        self._key, self.bad = key, log.bad
        self.seq = log.events[-1].seq if log.events else 0
        return log.events

    def untold_tampering(self, events: list[Event]) -> LogTampered | None:
        """The event telling of the bad lines the last load() found that no LogTampered in
        `events` tells of yet; None: none."""
        told = {n for e in events if isinstance(e, LogTampered) for n in e.lines}
        new = [(n, why) for n, why in self.bad if n not in told]
        return LogTampered(lines=[n for n, _ in new], first=new[0][1]) if new else None

    def append(self, event: Event) -> Event:
        """Give the event the next seq, write it with its mac, and make it durable before
        returning it (after `create` or `load`: they hold the key)."""
        assert self._key is not None, "append before create or load"
        self.seq += 1
        event.seq = self.seq
        line = _with_mac(self._key, event.model_dump_json()) + "\n"
        with open(self.paths.history, "a") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
        text = describe(event)
        if text:
            with open(self.paths.evolution, "a") as f:
                f.write(f"- `{event.seq:>5}` {text}\n")
        return event

    def render_evolution(self, events: list[Event]) -> None:
        """Write EVOLUTION.md anew from the log (after a crash may have cut it short)."""
        head = (TEMPLATE / "EVOLUTION.md").read_text()
        lines = [f"- `{e.seq:>5}` {describe(e)}\n" for e in events if describe(e)]
        write_atomic(self.paths.evolution, head + "".join(lines))

    # -- files and history ----------------------------------------------------------------------

    def write_candidate(self, team: str, cid: str, files: dict[str, str], result: dict) -> Path:
        """Sources first, result.json last: a folder with a result.json is complete."""
        folder = self.paths.candidate(team, cid)
        if folder.exists():
            shutil.rmtree(folder)  # left by a run that died before finishing it
        for name, text in files.items():
            write_atomic(folder / name, text)
        write_atomic(folder / "result.json", json.dumps(result, indent=2))
        return folder

    def set_best(self, team: str, cid: str) -> None:
        """Copy a candidate's folder to best/ (old best kept until the new one is complete)."""
        src, dst = self.paths.candidate(team, cid), self.paths.best
        tmp = dst.with_name(".best.tmp")
        if tmp.exists():
            shutil.rmtree(tmp)
        shutil.copytree(src, tmp)
        (tmp / "CANDIDATE").write_text(f"{team}/{cid}\n")
        old = dst.with_name(".best.old")
        if old.exists():
            shutil.rmtree(old)
        if dst.exists():
            os.replace(dst, old)
        os.replace(tmp, dst)
        if old.exists():
            shutil.rmtree(old)

    @property
    def repo(self) -> git.Repo:
        if self._repo is None:
            self._repo = git.Repo(self.paths.root)
        return self._repo

    def commit(self, message: str, paths: list[Path] | None = None) -> None:
        """Queue a commit of `paths` (default: everything) with `message`.

        Commits run in order on one background thread: git's cost grows with the repository,
        and the loop must not. `flush()` waits for them; a crash loses at most the queued ones,
        and the next full commit (at resume) records their files.
        """
        rel = [str(p.relative_to(self.paths.root)) for p in paths or [] if p.exists()]
        if self._committer is None:
            self._committer = _Committer(self.repo)
        self._committer.submit(message, rel or ["."])

    def flush(self) -> None:
        """Wait for queued commits; raises the first git error one of them met."""
        if self._committer is not None:
            self._committer.flush()

    def _git(self) -> _Committer:
        if self._committer is None:
            self._committer = _Committer(self.repo)
        return self._committer

    def pack(self) -> None:
        """Pack loose objects if git finds too many (`git gc --auto`), after the queued
        commits; the git thread does it every PACK_EVERY commits too."""
        self.git_call(_pack)

    def git_call(self, fn):
        """Run `fn(repo)` on the git thread after the queued commits, and return its result:
        one thread touches git, so worktrees (own index, shared objects and refs) never race
        the run's commits."""
        return self._git().call(fn)

    def commit_worktree(self, team: str, message: str, names: list[str]) -> None:
        """Queue a commit of `names` in the team's worktree, on its branch."""
        folder = self.paths.worktree(team)
        self._git().submit(message, names, git.Repo(folder))

    def add_worktree(self, team: str, files: dict[str, str], message: str) -> Path:
        """The team's worktree on a new branch `team/<id>` whose first commit holds `files`
        (nothing of the run's own files: the branch records the team's attempts); an existing
        worktree is left as it is."""
        folder = self.paths.worktree(team)
        if (folder / ".git").exists():
            return folder

        def add(repo: git.Repo) -> None:
            _ignore(self.paths.root / ".gitignore", "/worktrees/")  # older workspaces
            branch = f"team/{team}"
            if not repo.git.branch("--list", branch):
                with open(os.devnull, "rb") as nothing:
                    empty = repo.git.mktree(istream=nothing)  # the empty tree
                root = repo.git.commit_tree(empty, "-m", f"team {team}: its worktree")
                repo.git.branch(branch, root)
            if folder.exists():  # a worktree a crash left half made
                shutil.rmtree(folder)
            repo.git.worktree("prune")
            repo.git.worktree("add", "-q", str(folder), branch)

        self.git_call(add)
        write_atomic(folder / ".gitignore", "\n".join(WORKTREE_IGNORED) + "\n")
        for name, text in files.items():
            write_atomic(folder / name, text)
        self.commit_worktree(team, message, [".gitignore", *files])
        return folder


def _ignore(gitignore: Path, line: str) -> None:
    text = gitignore.read_text() if gitignore.exists() else ""
    if line not in text.splitlines():
        write_atomic(
            gitignore, text + ("" if text.endswith("\n") or not text else "\n") + line + "\n"
        )


def _pack(repo: git.Repo) -> None:
    repo.git.gc("--auto", "--quiet")


class _Committer:
    """One background thread that runs git jobs in order: `git add` + `git commit` of the run
    (or of a team's worktree), and calls that wait for their result."""

    def __init__(self, repo: git.Repo):
        self.repo = repo
        self.jobs: queue.Queue = queue.Queue()
        self.error: Exception | None = None
        self.unpacked = 0  # commits asked of `repo` since the last `git gc --auto`
        threading.Thread(target=self._work, name="eat-git", daemon=True).start()

    def submit(self, message: str, paths: list[str], repo: git.Repo | None = None) -> None:
        self.jobs.put((message, paths, repo or self.repo))

    def call(self, fn):
        from concurrent.futures import Future

        done: Future = Future()
        self.jobs.put((fn, done, None))
        return done.result()

    def flush(self) -> None:
        self.jobs.join()
        if self.error:
            error, self.error = self.error, None
            raise error

    def _work(self) -> None:
        held = None  # a job taken from the queue while gathering commits: it runs next
        while True:
            (message, paths, repo), held = held or self.jobs.get(), None
            if callable(message):  # a call: its result or error goes back to the caller
                try:
                    paths.set_result(message(self.repo))
                except Exception as e:
                    paths.set_exception(e)
                self.jobs.task_done()
                continue
            # Past BACKLOG queued jobs, the commits behind this one (to the same repository) go
            # in with it: a commit costs more as the repository grows, and git must keep up.
            messages, paths = [message], list(paths)
            if self.jobs.qsize() >= BACKLOG:
                while held is None:
                    try:
                        job = self.jobs.get_nowait()
                    except queue.Empty:
                        break
                    if callable(job[0]) or job[2] is not repo:
                        held = job
                    else:
                        messages.append(job[0])
                        paths += job[1]
            self._commit(repo, messages, paths)
            if repo is self.repo:
                self.unpacked += len(messages)
                if self.unpacked >= PACK_EVERY:
                    self.unpacked = 0
                    try:
                        _pack(repo)
                    except git.GitCommandError:
                        pass  # a pack that failed loses nothing; the next one tries again
            for _ in messages:
                self.jobs.task_done()

    def _commit(self, repo: git.Repo, messages: list[str], paths: list[str]) -> None:
        message = (
            messages[0]
            if len(messages) == 1
            else "\n\n".join(
                [f"{len(messages)} commits in one, from {messages[0].splitlines()[0]}"] + messages
            )
        )
        for attempt in range(2):  # once more after a moment: a file may have been mid-rename
            try:
                repo.git.add("-A", "--", *dict.fromkeys(paths))
                repo.git.commit("-q", "--no-verify", "--allow-empty", "-m", message)
                return
            except Exception as e:  # kept for flush(): a failed commit must not pass silently
                if attempt:
                    self.error = self.error or e
                else:
                    time.sleep(0.2)
