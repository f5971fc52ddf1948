#!/usr/bin/env bash
# Checks eat on a machine with an NVIDIA GPU, in under 8 minutes: nvidia-smi, `eat doctor` (GPU
# peaks), the CUDA runner conformance suite, `eat eval` of each CUDA example's baseline and
# shipped tuned candidate, the tuned softmax again with warm caches (its wall time), the timing
# fidelity of the CUDA runner and a 30-evaluation `eat start` on cuda_softmax (its wall time,
# the best candidate's fraction of the bandwidth peak); then a summary table.
#
# Usage, from the repository root after `pip install -e '.[test]'`:  scripts/gpu_check.sh
# Exit status: 0 every step passed, 1 a step failed (or ran out of time), 2 no NVIDIA GPU here.
# GPU_CHECK_BUDGET_S (default 470) caps the whole run; each step also has its own cap.
set -euo pipefail

gpus=$(timeout 30 nvidia-smi -L 2>/dev/null || true)
if [[ $gpus != *"GPU "* ]]; then
    echo "gpu_check: no NVIDIA GPU here (nvidia-smi is missing or lists none); nothing to check" >&2
    exit 2
fi

BUDGET=${GPU_CHECK_BUDGET_S:-470}
RESERVE=15 # seconds kept back per step: `timeout` may take 10 more to kill, then the summary
PY=${PYTHON:-$(command -v python || command -v python3)}
if command -v eat >/dev/null 2>&1; then EAT=(eat); else EAT=("$PY" -m eat); fi
LOGS=$(mktemp -d -t eat-gpu-check.XXXXXX)
NAMES=() RESULTS=() TIMES=() FIGURES=()

# step NAME CAP_S [--quiet] COMMAND...: runs COMMAND (an executable) under `timeout`, for its cap
# or the time left, whichever is less; output to the screen (not with --quiet) and to
# $STEP_LOG. Records PASS or FAIL; returns the command's status.
step() {
    local name=$1 cap=$2 quiet=0
    shift 2
    if [[ $1 == --quiet ]]; then
        quiet=1
        shift
    fi
    local left=$((BUDGET - SECONDS - RESERVE))
    local limit=$((cap < left ? cap : left)) t0=$SECONDS rc
    STEP_LOG="$LOGS/${#NAMES[@]}.log"
    NAMES+=("$name")
    FIGURES+=("")
    if ((limit < 10)); then
        RESULTS+=("FAIL (no time left)")
        TIMES+=(0)
        echo "skipped: the ${BUDGET}s budget is spent" | tee "$STEP_LOG" >"$STEP_LOG.err"
        return 1
    fi
    echo
    echo "=== $name   (at most ${limit}s)"
    set +e
    if ((quiet)); then
        timeout --kill-after=10 "$limit" "$@" >"$STEP_LOG" 2>"$STEP_LOG.err"
        rc=$?
    else
        timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$STEP_LOG"
        rc=${PIPESTATUS[0]}
    fi
    set -e
    TIMES+=($((SECONDS - t0)))
    case $rc in
    0) RESULTS+=("PASS") ;;
    124 | 137) RESULTS+=("FAIL (timed out)") ;;
    *) RESULTS+=("FAIL (exit $rc)") ;;
    esac
    return "$rc"
}

# fail REASON: turns the last step's PASS into a failure.
fail() { RESULTS[-1]="FAIL ($1)"; }

# The GPU peaks in an `eat doctor --json` output, or why there are none.
doctor_figures() {
    "$PY" - "$1" <<'PYTHON'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except ValueError:
    print("doctor --json failed")
    sys.exit()
if r.get("peak_gbps_gpu"):
    print(f"GPU {r['peak_gbps_gpu']:.0f} GB/s, {r['peak_gflops_gpu']:.0f} GFLOP/s fp32")
else:
    print(f"no GPU peaks: {r.get('gpu_peaks_note')}")
PYTHON
}

# The figures of an `eat eval --json` output: status, speedup, best fraction of the peak.
eval_figures() {
    "$PY" - "$1" "$1.err" <<'PYTHON'
import json, sys
try:
    ev = json.load(open(sys.argv[1]))
except ValueError:
    err = open(sys.argv[2]).read().strip().splitlines()
    print("no evaluation: " + (err[-1][:150] if err else "no output"))
    sys.exit()
line = ev["status"]
if ev.get("speedup"):
    line += f", speedup {ev['speedup']:.2f}x"
peaks = [w["peak_fraction"] for w in ev.get("workloads", []) if w.get("peak_fraction")]
if peaks:
    line += f", {100 * max(peaks):.0f}% of peak"
if ev["status"] != "ok":
    line += f": {ev.get('message', '')[:150]}"
print(line)
PYTHON
}

# Where an `eat eval --json` output's time went: compile, verify, time.
durations() {
    "$PY" - "$1" <<'PYTHON'
import json, sys
try:
    d = json.load(open(sys.argv[1])).get("durations", {})
except ValueError:
    sys.exit()
print(", ".join(f"{k.removesuffix('_s')} {v:.1f}s" for k, v in d.items()))
PYTHON
}

# The best candidate's fraction of the bandwidth peak on each workload (rows x cols).
best_bandwidth() {
    "$PY" - "$1" <<'PYTHON'
import json, sys
try:
    ev = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    print("no best candidate")
    sys.exit()
print(f"best {ev['speedup']:.1f}x; " + ", ".join(
    f"{w['params'].get('rows')}x{w['params'].get('cols')} {100 * (w['peak_fraction'] or 0):.0f}%"
    for w in ev["workloads"]))
PYTHON
}

step "nvidia-smi" 30 nvidia-smi || true
FIGURES[-1]=$(timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total \
    --format=csv,noheader 2>/dev/null | head -1 || true)

if step "eat doctor" 180 "${EAT[@]}" doctor; then
    # Cached by the step above: this only reads the figures back.
    timeout 60 "${EAT[@]}" doctor --json >"$LOGS/doctor.json" 2>/dev/null || true
    FIGURES[-1]=$(doctor_figures "$LOGS/doctor.json" || true)
    [[ ${FIGURES[-1]} == GPU* ]] || fail "no GPU peaks"
fi

# conformance KIT: one real-GPU conformance kit (the fake-runtime kit runs in CI anyway).
conformance() {
    local kit=$1
    step "conformance ($kit)" 100 "$PY" -m pytest tests/conformance \
        -k "$kit and not cuda_fake${2:-}" -v -p no:cacheprovider || true
    FIGURES[-1]=$(grep -E '^=+ .*(passed|failed|error|skipped).* =+$' "$STEP_LOG" | tail -1 |
        tr -d '=' | xargs || true)
    # A kit skips itself where its runner cannot run: on this machine that is a failure.
    if [[ ${RESULTS[-1]} == PASS ]] && ! grep -qE "\\[$kit-.* PASSED" "$STEP_LOG"; then
        fail "the $kit kit did not run"
    fi
}

# eval_examples SUFFIX: `eat eval` of each CUDA example's baseline and tuned candidate that are
# SUFFIX files (.cu: CUDA C++; .py: Triton).
eval_examples() {
    local example name baseline candidate
    for example in examples/cuda_*/; do
        example=${example%/}
        name=${example#examples/}
        baseline=$(sed -n 's/^file *= *"\(baseline\.[a-z]*\)"$/\1/p' "$example/target.toml" |
            head -1 || true)
        for candidate in "$baseline" "tuned$1"; do
            [[ $candidate == *"$1" && -f $example/$candidate ]] || continue
            step "eval $name/$candidate" 100 --quiet "${EAT[@]}" eval "$example" \
                "$example/$candidate" --json || true
            FIGURES[-1]=$(eval_figures "$STEP_LOG" || true)
            if [[ $candidate == tuned.* && ${RESULTS[-1]} == PASS ]]; then
                "$PY" -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["speedup"] <= 1)' \
                    "$STEP_LOG" || fail "not faster than the baseline"
            fi
            echo "${FIGURES[-1]}"
        done
    done
}

# CUDA C++ first (the runner the search uses), the PyTorch/Triton runner's steps last.
conformance cuda " and not torch_cuda"
eval_examples .cu

# The same evaluation again, every cache warm (build, input sets, anchor): what one costs in a
# run. Issue 10's goal: at most 6 s.
t0=$EPOCHREALTIME
step "eval cuda_softmax/tuned.cu (warm)" 60 --quiet "${EAT[@]}" eval examples/cuda_softmax \
    examples/cuda_softmax/tuned.cu --json || true
wall=$(awk "BEGIN {printf \"%.1f\", $EPOCHREALTIME - $t0}")
FIGURES[-1]="wall ${wall}s; $(eval_figures "$STEP_LOG" || true); $(durations "$STEP_LOG" || true)"
echo "${FIGURES[-1]}"

step "timing fidelity (cuda_matmul)" 120 "$PY" bench/timing_fidelity.py \
    --target examples/cuda_matmul --runs 5 || true
FIGURES[-1]=$(grep -E 'CV of (median latency|speedup)|2x work ratio' "$STEP_LOG" |
    sed 's/^ *//; s/ (target[^)]*)//' | paste -sd ';' - || true)

# A short search, offline agents: what a user's first `eat start` does, and how fast (issue 10's
# goal: 30 evaluations in at most 4 minutes), and how near the best gets to the bandwidth peak.
t0=$EPOCHREALTIME
step "eat start cuda_softmax (30 evals)" 240 --quiet "${EAT[@]}" start examples/cuda_softmax \
    --max-evals 30 -w "$LOGS/start" || true
wall=$(awk "BEGIN {printf \"%.0f\", $EPOCHREALTIME - $t0}")
FIGURES[-1]="wall ${wall}s; $(grep -E '^(stopped|best)' "$STEP_LOG" | paste -sd ';' - | cut -c1-80 \
    || true); $(best_bandwidth "$LOGS/start/best/result.json" || true)"
[[ ${RESULTS[-1]} != PASS ]] || grep -q 'max_evals' "$STEP_LOG" || fail "did not finish its 30"

conformance torch_cuda
eval_examples .py

echo
echo "=== summary: ${SECONDS}s in all; logs in $LOGS"
printf '%-34s %-30s %5s  %s\n' step result time figures
status=0
for i in "${!NAMES[@]}"; do
    figures=${FIGURES[$i]}
    if [[ -z $figures && -s $LOGS/$i.log ]]; then # a failed step says why in its last line
        figures=$(grep -v '^ *$' "$LOGS/$i.log" | tail -1 || true)
    fi
    printf '%-34s %-30s %4ss  %s\n' "${NAMES[$i]}" "${RESULTS[$i]}" "${TIMES[$i]}" \
        "${figures:0:120}"
    [[ ${RESULTS[$i]} == PASS ]] || status=1
done
exit "$status"
