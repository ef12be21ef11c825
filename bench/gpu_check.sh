#!/usr/bin/env bash
# GPU check of the block mover, for a machine with a CUDA device:
#   1. tests/test_mover.py, whose CUDA-parametrized tests must run (not skip) there;
#   2. `kvoffload bench mover --json --device cuda`;
#   3. the end-to-end test in a CUDA vLLM engine with KVOffloadSpec (tests/vllm_engine, bfloat16:
#      greedy outputs identical with and without offloading, the re-run prompt served from the
#      offload tier, no violation or leak, the wrong-block negative control caught). Needs a CUDA
#      build of vLLM already installed; without one this step is reported SKIPPED (set
#      GPU_CHECK_REQUIRE_VLLM=1 to make that a failure).
# Logs, JUnit reports and the benchmark JSON go to ${OUT:-out}/. Takes well under 10 minutes.
#
# Needs Python 3 with a CUDA build of torch already installed. It never installs torch: the
# project goes into a venv made with --system-site-packages (so the system torch is used) with
# `pip install --no-deps`; without venv/pip support it falls back to PYTHONPATH=src.
# Environment: PYTHON (default python3), OUT (default out), GPU_CHECK_VENV (venv location).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT_DIR="${OUT:-out}"
mkdir -p "$OUT_DIR"
PYTHON="${PYTHON:-python3}"
VENV="${GPU_CHECK_VENV:-${TMPDIR:-/tmp}/kvoffload-gpu-check-venv}"

log() { echo "gpu_check: $*" >&2; }
fail() {
    log "FAIL: $*"
    exit 1
}

command -v "$PYTHON" >/dev/null 2>&1 || fail "'$PYTHON' not found (set PYTHON=/path/to/python3)"

# --- 1. a CUDA torch must already be there -------------------------------------------------
check_cuda='
import sys
try:
    import torch
except Exception as exc:
    print(f"torch is not importable: {exc}")
    sys.exit(1)
print("python", sys.version.split()[0], sys.executable)
print("torch", torch.__version__, "cuda", torch.version.cuda)
if not torch.cuda.is_available():
    print("torch.cuda.is_available() is False: no CUDA device visible, or a CPU-only torch build")
    sys.exit(1)
print("devices", torch.cuda.device_count(), "device0", torch.cuda.get_device_name(0))
'
if ! "$PYTHON" -c "$check_cuda" >"$OUT_DIR/gpu_env.txt" 2>&1; then
    cat "$OUT_DIR/gpu_env.txt" >&2
    fail "no usable CUDA torch for $PYTHON; this check needs a CUDA device and a CUDA build of torch"
fi
cat "$OUT_DIR/gpu_env.txt" >&2

# --- 2. the project, on top of the existing torch --------------------------------------------
PY="$PYTHON"
if [[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv --system-site-packages "$VENV" >"$OUT_DIR/venv.log" 2>&1; then
    # --no-deps: pip must never resolve torch (it would fetch another multi-GB build);
    # --no-build-isolation: builds offline with the installed setuptools.
    if "$VENV/bin/python" -m pip install -q --no-deps --no-build-isolation -e . >"$OUT_DIR/pip_install.log" 2>&1; then
        PY="$VENV/bin/python"
    else
        log "editable install failed (see $OUT_DIR/pip_install.log); using PYTHONPATH=src instead"
    fi
else
    log "cannot create a venv (see $OUT_DIR/venv.log); using PYTHONPATH=src instead"
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
"$PY" -c "$check_cuda" >/dev/null 2>&1 || fail "$PY does not see the CUDA torch that $PYTHON sees"

# The tests need pytest and hypothesis; install them only if missing (never torch).
if ! "$PY" -c 'import pytest, hypothesis' >/dev/null 2>&1; then
    log "pytest/hypothesis missing; trying pip install pytest hypothesis"
    "$PY" -m pip install -q pytest hypothesis >"$OUT_DIR/pip_test_deps.log" 2>&1 ||
        fail "pytest and hypothesis are needed and could not be installed (see $OUT_DIR/pip_test_deps.log)"
fi

# --- 3. tests on the GPU -----------------------------------------------------------------------
status=0
log "running tests/test_mover.py"
timeout 150 "$PY" -m pytest tests/test_mover.py -q -rs -p no:cacheprovider \
    --junitxml "$OUT_DIR/test_mover.xml" >"$OUT_DIR/test_mover.log" 2>&1 || status=$?
tail -n 25 "$OUT_DIR/test_mover.log" >&2
if [[ $status -ne 0 ]]; then
    fail "tests/test_mover.py failed (exit $status; 124 means timeout), see $OUT_DIR/test_mover.log"
fi
if grep -q "needs a CUDA device" "$OUT_DIR/test_mover.log"; then
    fail "CUDA tests were skipped although CUDA is available, see $OUT_DIR/test_mover.log"
fi

# --- 4. the benchmark on the GPU -------------------------------------------------------------
log "running kvoffload bench mover --json --device cuda"
bench_cli='
import sys
from kvoffload.cli import main
sys.exit(main(["bench", "mover", "--json", "--device", "cuda", *sys.argv[1:]]))
'
timeout 210 "$PY" -c "$bench_cli" "$@" >"$OUT_DIR/bench_mover_cuda.json" 2>"$OUT_DIR/bench_mover_cuda.log" || status=$?
if [[ $status -ne 0 ]]; then
    cat "$OUT_DIR/bench_mover_cuda.log" >&2
    fail "kvoffload bench mover failed (exit $status; 124 means timeout), see $OUT_DIR/bench_mover_cuda.log"
fi
"$PY" -m json.tool "$OUT_DIR/bench_mover_cuda.json" >"$OUT_DIR/bench_mover_cuda.pretty.json" ||
    fail "the benchmark did not print valid JSON, see $OUT_DIR/bench_mover_cuda.json"
cat "$OUT_DIR/bench_mover_cuda.json"

# --- 5. end to end in a CUDA vLLM engine with KVOffloadSpec ----------------------------------
if "$PY" -c 'import vllm, transformers' >"$OUT_DIR/vllm_import.log" 2>&1; then
    log "running tests/vllm_engine on CUDA (KVOffloadSpec, bfloat16)"
    KVOFFLOAD_E2E_SPEC_ONLY=1 KVOFFLOAD_E2E_DTYPE=bfloat16 VLLM_ENABLE_V1_MULTIPROCESSING=0 \
        timeout 300 "$PY" -m pytest tests/vllm_engine -q -rs -p no:cacheprovider \
        --junitxml "$OUT_DIR/test_vllm_engine.xml" >"$OUT_DIR/test_vllm_engine.log" 2>&1 || status=$?
    tail -n 25 "$OUT_DIR/test_vllm_engine.log" >&2
    if [[ $status -ne 0 ]]; then
        fail "tests/vllm_engine failed on CUDA (exit $status; 124 means timeout), see $OUT_DIR/test_vllm_engine.log"
    fi
    grep -q "passed" "$OUT_DIR/test_vllm_engine.log" ||
        fail "tests/vllm_engine ran no test on CUDA, see $OUT_DIR/test_vllm_engine.log"
    echo "vllm_engine: passed" >"$OUT_DIR/vllm_engine_status.txt"
else
    echo "vllm_engine: SKIPPED (vLLM not importable: $(tail -n 1 "$OUT_DIR/vllm_import.log"))" \
        >"$OUT_DIR/vllm_engine_status.txt"
    log "SKIPPED the vLLM end-to-end step: no CUDA vLLM importable (see $OUT_DIR/vllm_import.log)"
    if [[ "${GPU_CHECK_REQUIRE_VLLM:-0}" == 1 ]]; then
        fail "GPU_CHECK_REQUIRE_VLLM=1 but vLLM is not importable"
    fi
fi
log "OK: tests passed on CUDA; figures in $OUT_DIR/bench_mover_cuda.json; $(cat "$OUT_DIR/vllm_engine_status.txt")"
