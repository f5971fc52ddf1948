"""What one `eat eval` of a Python target costs, with an empty input cache and with a warm one.

The Python runner's harness only has to load input sets and call the candidate and the
baseline; making the sets (the reference's input maker and the reference itself, on every
set) is work that need happen once per target. This runs `eat eval TARGET BASELINE --json` in
a fresh process, first with an empty cache folder (cold), then --warm times with the same one,
and prints the evaluation's own durations (verify_s, time_s) and the process's wall time.

Targets (those that run on a machine without a GPU):
  torch_softmax  examples/cuda_triton_softmax's reference and workloads (rows divided by
                 --rows-div) on the cpu runner, the baseline torch.softmax
  mlx_softmax    examples/mlx_softmax (MLX's CPU build where there is no Apple GPU)
  torch_kit      tests/conformance/kits/torch_cpu (small matmuls)

Run from the repository root:  python bench/python_eval.py [--warm 2] [--rows-div 4] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def torch_softmax(folder: Path, rows_div: int) -> Path:
    """The Triton example's reference and workloads as a torch target on the CPU."""
    src = ROOT / "examples" / "cuda_triton_softmax"
    shutil.copy(src / "reference.py", folder / "reference.py")
    (folder / "baseline.py").write_text(
        "import torch\n\n\ndef softmax(x):\n    return torch.softmax(x, dim=-1)\n"
    )
    toml = (src / "target.toml").read_text()
    toml = (
        toml[: toml.index("[knobs.")]
        .replace('runner = "cuda"', 'runner = "cpu"')
        .replace('language = "triton"', 'language = "pytorch"')
        .replace('name = "cuda_triton_softmax"', 'name = "bench_torch_softmax"')
    )
    for rows in (4096, 16384, 1024):
        toml = toml.replace(f"rows = {rows}\n", f"rows = {rows // rows_div}\n")
    (folder / "target.toml").write_text(toml)
    return folder


def eval_once(target: Path, cache: Path) -> dict:
    env = os.environ | {"EAT_CACHE_DIR": str(cache)}
    t0 = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "eat", "eval", str(target), str(target / "baseline.py"), "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
    )
    wall = time.monotonic() - t0
    if done.returncode not in (0, 1):
        raise SystemExit(f"eat eval {target} failed: {done.stderr.strip()[-500:]}")
    ev = json.loads(done.stdout)
    return {
        "status": ev["status"],
        "wall_s": wall,
        "verify_s": ev["durations"].get("verify_s"),
        "time_s": ev["durations"].get("time_s"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--warm", type=int, default=2, help="warm evaluations after the cold one")
    ap.add_argument("--rows-div", type=int, default=4, help="torch_softmax: rows divided by")
    ap.add_argument("--only", nargs="*", help="target names to run (default: all)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    out = {}
    with tempfile.TemporaryDirectory(prefix="eat-bench-") as tmp:
        tmp = Path(tmp)
        (tmp / "torch_softmax").mkdir()
        targets = {
            "torch_softmax": torch_softmax(tmp / "torch_softmax", args.rows_div),
            "mlx_softmax": ROOT / "examples" / "mlx_softmax",
            "torch_kit": ROOT / "tests" / "conformance" / "kits" / "torch_cpu",
        }
        for name, target in targets.items():
            if args.only and name not in args.only:
                continue
            cache = tmp / f"cache-{name}"
            cold = eval_once(target, cache)
            warm = [eval_once(target, cache) for _ in range(args.warm)]
            out[name] = {
                "cold": cold,
                "warm": {
                    k: statistics.median(w[k] for w in warm)
                    for k in ("wall_s", "verify_s", "time_s")
                }
                | {"status": warm[-1]["status"]},
            }
    if args.json:
        print(json.dumps(out))
        return
    print(f"{'target':<15}{'':>6}{'wall s':>9}{'verify s':>10}{'time s':>9}  status")
    for name, r in out.items():
        for kind in ("cold", "warm"):
            x = r[kind]
            print(
                f"{name:<15}{kind:>6}{x['wall_s']:>9.2f}{x['verify_s']:>10.2f}"
                f"{x['time_s'] or 0:>9.2f}  {x['status']}"
            )
    print(f"(warm: median of {args.warm}; the evaluation's own durations, the process's wall)")


if __name__ == "__main__":
    main()
