#!/usr/bin/env bash
# GPU check of the block mover (issue 27), one run of at most ~10 minutes on a CUDA machine:
#   bash scripts/measure/gpu_check.sh OUTDIR
#
# Steps (each under its own timeout; a failed step does not stop the later ones):
#   env       torch imports and sees a CUDA device (else: one line, exit 3, nothing else runs);
#   tests     every test marked `cuda` in the mover's test files, on the GPU: every copy path's
#             byte-exact round trips of every dtype, stream ordering against a slow producer,
#             failures reported and never counted as done, the choice by table and calibration.
#             The step fails if any of them skipped;
#   simulate  `kvoffload simulate --device cuda --faults 0.05`: the lifecycle with the KV tensors on
#             the GPU and every loaded block's bytes checked, no violation allowed;
#   bench     `kvoffload bench mover --device cuda --json`: every copy path against one contiguous
#             DMA, 4 KiB ... 1 MiB, both directions, the interference run, the chosen path and the
#             goals; it also writes the copy table (OUTDIR/copy_table.json);
#   vllm      the CUDA vLLM end-to-end test (tests/vllm_engine), only when vLLM imports and at
#             least GPU_CHECK_VLLM_MIN_S seconds (default 300) of the budget are left.
# OUTDIR receives every step's log, the pytest JUnit XML, the bench JSON and summary.json, which
# is written whatever happens (steps with status passed / failed / timeout / skipped, exit codes,
# seconds, device, torch and CUDA versions).
#
# Assumes, and installs nothing from any network: python3 (PYTHON=...) with a CUDA build of torch,
# pytest and hypothesis already importable. The project runs from src/ (PYTHONPATH). Its own
# pure-Python dependencies that are missing can come from a folder of wheels, installed offline
# (GPU_CHECK_WHEELS=DIR: pip --no-index --no-deps into a private folder; make the wheels where pip
# works with `python3 -m pip wheel --no-deps -w DIR transitions==0.9.3 tla==0.0.4 parstools`).
# Triton (for the vector path's own kernel) and cuda-python (cuda.bindings, for the batched path)
# are used when importable; otherwise the vector path runs its documented torch fallback and the
# batched path calls libcuda through ctypes, and the bench JSON says which.
#
# Exit status: 0 every step passed (vllm may be skipped); 1 a step failed or timed out; 2 usage;
# 3 no CUDA device or no CUDA torch.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
if [[ $# -gt 1 ]]; then
    echo "usage: bash scripts/measure/gpu_check.sh [OUTDIR]" >&2
    exit 2
fi
OUT_DIR="${1:-${OUT:-out}}"
mkdir -p "$OUT_DIR"
OUT_DIR="$(cd "$OUT_DIR" && pwd)"
PYTHON="${PYTHON:-python3}"
BUDGET_S="${GPU_CHECK_BUDGET_S:-600}"
START_S=$SECONDS
STEPS="$OUT_DIR/steps.tsv"
: >"$STEPS"

log() { echo "gpu_check: $*" >&2; }

write_summary() {
    local final=$1
    "$PYTHON" - "$STEPS" "$OUT_DIR/env.json" "$final" >"$OUT_DIR/summary.json" 2>/dev/null <<'PY' || printf '{"ok": false, "exit": %s, "error": "summary could not be written with %s"}\n' "$final" "$PYTHON" >"$OUT_DIR/summary.json"
import json, sys
from pathlib import Path
steps_file, env_file, final = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
steps = {}
for line in Path(steps_file).read_text().splitlines():
    name, status, rc, seconds, note = (line.split("\t") + [""] * 5)[:5]
    steps[name] = {"status": status, "exit": int(rc), "seconds": int(seconds), "note": note}
env = json.loads(env_file.read_text()) if env_file.exists() else None
print(json.dumps({"ok": final == 0, "exit": final, "env": env, "steps": steps}, indent=1))
PY
}
trap 'rc=$?; write_summary "$rc"; exit "$rc"' EXIT

record() { printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "${5:-}" >>"$STEPS"; }

# step NAME TIMEOUT_S COMMAND...: runs COMMAND with stdout to OUT/NAME.out and stderr to OUT/NAME.log.
failed=0
step() {
    local name=$1 limit=$2
    shift 2
    local left=$((BUDGET_S - (SECONDS - START_S)))
    if ((left < limit)); then
        limit=$left
    fi
    if ((limit <= 0)); then
        record "$name" skipped 0 0 "no time left in the ${BUDGET_S}s budget"
        log "$name: SKIPPED (budget spent)"
        failed=1
        return 0
    fi
    log "$name: running (timeout ${limit}s)"
    local t0=$SECONDS rc=0
    timeout "$limit" "$@" >"$OUT_DIR/$name.out" 2>"$OUT_DIR/$name.log" || rc=$?
    local status=passed
    if ((rc == 124)); then status=timeout; elif ((rc != 0)); then status=failed; fi
    record "$name" "$status" "$rc" $((SECONDS - t0))
    log "$name: $status (exit $rc, $((SECONDS - t0))s; logs $OUT_DIR/$name.log)"
    if [[ $status != passed ]]; then failed=1; fi
    return 0
}

if ! command -v "$PYTHON" >/dev/null 2>&1; then
    record env failed 3 0 "$PYTHON not found"
    echo "gpu_check: no python: '$PYTHON' not found (set PYTHON=/path/to/python3)" >&2
    exit 3
fi

# --- env: a CUDA torch and a device --------------------------------------------------------------
SITE="${GPU_CHECK_SITE:-${TMPDIR:-/tmp}/kvoffload-gpu-check-site}"
export PYTHONPATH="$PWD/src:$PWD/packages/kvoffload-lab/src:$PWD/packages/tlacheck/src:$SITE${PYTHONPATH:+:$PYTHONPATH}"
if [[ -n "${GPU_CHECK_WHEELS:-}" ]]; then
    "$PYTHON" -m pip install -q --no-index --no-deps --upgrade --target "$SITE" "$GPU_CHECK_WHEELS"/*.whl \
        >"$OUT_DIR/pip_wheels.log" 2>&1 || log "installing $GPU_CHECK_WHEELS offline failed, see $OUT_DIR/pip_wheels.log"
fi
env_probe='
import json, sys
out = {"python": sys.version.split()[0]}
try:
    import torch
except Exception as exc:
    print(json.dumps(out)); print(f"no CUDA torch: torch does not import ({exc})", file=sys.stderr); sys.exit(3)
out.update(torch=torch.__version__, cuda=torch.version.cuda, cuda_available=torch.cuda.is_available())
if torch.cuda.is_available():
    out["device"] = torch.cuda.get_device_name(0)
for name in ("triton", "cuda.bindings", "pytest", "hypothesis"):
    try:
        __import__(name); out[name] = True
    except Exception:
        out[name] = False
print(json.dumps(out))
if not torch.cuda.is_available():
    print(f"no CUDA device: torch {torch.__version__} (torch.version.cuda={torch.version.cuda}) sees none", file=sys.stderr)
    sys.exit(3)
'
env_rc=0
"$PYTHON" -c "$env_probe" >"$OUT_DIR/env.json" 2>"$OUT_DIR/env.log" || env_rc=$?
if ((env_rc != 0)); then
    record env failed "$env_rc" 0 "$(tail -n 1 "$OUT_DIR/env.log")"
    echo "gpu_check: $(tail -n 1 "$OUT_DIR/env.log"); nothing else was run" >&2
    exit 3
fi
record env passed 0 0
log "env: $(cat "$OUT_DIR/env.json")"

# --- tests: every cuda-marked test runs, none skips ----------------------------------------------
# The `kernel-` variants of tests/test_mover.py choose the CPU numba kernel, which plays no part on
# CUDA: they are the `torch-` variants' CUDA run again (and skip where numba is missing), so they
# are deselected.
cuda_tests=(tests/test_copy_cuda.py tests/test_mover.py tests/test_cuda_host.py)
step tests 240 "$PYTHON" -m pytest "${cuda_tests[@]}" -m cuda -k "not kernel-" -q -rs -p no:cacheprovider \
    --junitxml "$OUT_DIR/tests.xml"
skipped=$("$PYTHON" -c '
import sys, xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except Exception:
    print(-1); sys.exit()
print(sum(1 for case in root.iter("testcase") if case.find("skipped") is not None))
' "$OUT_DIR/tests.xml")
if [[ $skipped != 0 ]]; then
    record tests_none_skipped failed 1 0 "$skipped cuda tests skipped (-1: no JUnit report); see tests.out"
    log "tests: $skipped CUDA tests skipped although CUDA is available"
    failed=1
else
    record tests_none_skipped passed 0 0
fi

# --- simulate: the lifecycle on CUDA tensors -----------------------------------------------------
step simulate 90 "$PYTHON" -m kvoffload_lab.cli simulate --device cuda --faults 0.05 --users 48 --turns 6 \
    --gpu-blocks 160 --cpu-blocks 1024 --json

# --- bench: every path, the interference run, the chosen path, the goals --------------------------
step bench 240 "$PYTHON" -m kvoffload_lab.cli bench mover --device cuda --json --total-mib 64 --repeats 3 \
    --table "$OUT_DIR/copy_table.json"
if [[ -s "$OUT_DIR/bench.out" ]]; then cp "$OUT_DIR/bench.out" "$OUT_DIR/bench_mover_cuda.json"; fi

# --- vllm: end to end in a CUDA vLLM, when one is installed and time is left ----------------------
left=$((BUDGET_S - (SECONDS - START_S)))
if ! "$PYTHON" -c 'import vllm, transformers' >"$OUT_DIR/vllm_import.log" 2>&1; then
    record vllm skipped 0 0 "vLLM not importable: $(tail -n 1 "$OUT_DIR/vllm_import.log")"
elif ((left < ${GPU_CHECK_VLLM_MIN_S:-300})); then
    record vllm skipped 0 0 "only ${left}s of the budget left"
else
    KVOFFLOAD_E2E_SPEC_ONLY=1 KVOFFLOAD_E2E_DTYPE=bfloat16 VLLM_ENABLE_V1_MULTIPROCESSING=0 \
        step vllm "$left" "$PYTHON" -m pytest tests/vllm_engine -q -rs -p no:cacheprovider \
        --junitxml "$OUT_DIR/vllm_engine.xml"
fi

if ((failed)); then
    log "FAILED: see $OUT_DIR/summary.json"
    exit 1
fi
log "OK: every step passed; figures in $OUT_DIR/bench_mover_cuda.json"
