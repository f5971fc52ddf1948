"""What a runner sends its child process on stdin (as JSON), declared once: the harness's job
(verify or time one candidate) and the input-set maker's.

Dependency-free, so that every child can import it first. The parent builds these (runners
native.py, cpu.py, gpu.py, python.py, sets.py); the children read them (harness.py,
gpu_harness.py, py_harness.py, inputs.py).
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

Mode = Literal["verify", "time", "grade"]


class Reference(TypedDict):
    file: str  # the target's reference file, absolute
    function: str
    inputs: str | None  # the function that makes a workload's inputs, where it has one
    init_inputs: NotRequired[str | None]  # Python targets: the module's constructor arguments


class Sets(TypedDict):
    """The manifest of a target's input sets (inputs.prepare's answer, plus where they lie)."""

    dir: str
    # per workload: {mode: [set file names]}, or {"generate": {mode: [seeds]}} for sets the
    # harness makes itself; with the sets' "bytes" and the reference's "make_s"
    workloads: list[dict[str, Any]]


class Race(TypedDict):
    """Time a workload for `rounds` only when the candidate is `ratios[i]` times slower than
    `kind` on workload i (the best candidate's ratio, with a margin)."""

    kind: str
    rounds: int
    ratios: list[float]


class Call(TypedDict):
    """A function in a file: the vendor's library call."""

    file: str
    function: str


class MakeSets(TypedDict):
    """The input-set maker's job: what decides the sets, and where to write them."""

    reference: Reference
    workloads: list[dict[str, Any]]  # native: {"params", "shapes"}; Python: the params
    config: dict[str, Any]  # the EvalConfig's fields
    args: NotRequired[list[dict[str, Any]]]  # native: the C arguments
    framework: NotRequired[str]  # Python: torch or mlx
    device: NotRequired[str]  # Python: cpu, cuda or rocm
    kind: NotRequired[str]  # Python: the entry's kind (function or module)
    dir: NotRequired[str]  # added by sets.input_sets: the folder to write
    room: NotRequired[int]  # the most bytes one workload's sets may take on disk


class Job(TypedDict):
    """What every harness reads."""

    nonce: str  # tags the harness's answer line, so a candidate's output cannot forge it
    mode: Mode
    entry: str  # the function (or module class) the candidate defines
    reference: Reference
    workloads: list[dict[str, Any]]
    tolerance: dict[str, Any]
    config: dict[str, Any]
    sets: Sets
    lock_down: bool  # seccomp: no processes, no network
    confine_writes: bool  # Landlock: writes only in the job's folder
    unreadable: list[str]  # folders the candidate may not read (the target's private/)
    cpu: NotRequired[int | None]  # the core timing is pinned to


class NativeJob(Job):
    """A shared-library candidate's (C, CUDA, HIP)."""

    args: list[dict[str, Any]]  # the C signature's arguments
    candidate_lib: str
    flush_bytes: NotRequired[int]  # the cache flush between timed calls (the runner's job_extra)
    race: NotRequired[Race | None]
    baseline_lib: NotRequired[str | None]  # time mode: None where an anchor stands for it
    vendor: NotRequired[Call | None]  # time mode: None where an anchor stands for it
    gpu: NotRequired[str]  # GPU: "cuda" or "rocm"
    runtime: NotRequired[str]  # GPU: the runtime library to load
    check_lib: NotRequired[str]  # GPU: the device check kernels


class PythonJob(Job):
    """A PyTorch, Triton or MLX candidate's."""

    framework: str
    device: str
    kind: str  # the entry's kind: "function" or "module"
    candidate: str  # the candidate's file
    baseline: NotRequired[str]  # time mode: the baseline's file


class GraderCall(TypedDict):
    """A program target's grader: a function in a file, or a command."""

    file: str | None  # absolute
    function: str
    command: list[str] | None


class GradeJob(TypedDict):
    """The grading child's job: grade each folder on seed after seed, taking turns to go
    first."""

    nonce: str
    mode: Mode  # "grade"
    entry: str  # the target's name, for messages
    root: str  # the target folder: the grader's imports and a command's working directory
    grader: GraderCall
    folders: list[str]  # the candidate's folder, then the baseline's where graded beside it
    split: str
    seeds: list[int]  # in order; the child stops early once the medians are steady
    min_seeds: int
    target_rse: float
    metric: str
    lock_down: bool
    confine_writes: bool
    unreadable: list[str]
