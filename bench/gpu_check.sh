#!/usr/bin/env bash
# GPU check of the block mover, for a machine with a CUDA device:
#   1. the mover's tests (tests/test_mover.py, tests/test_cuda_host.py, and the simulator's torch
#      backend on CUDA), whose CUDA-parametrized tests must run (not skip) there;
#   2. `kvoffload simulate --device cuda --faults 0.05`: aborts, resets, failed jobs and
#      preemption with every loaded block's bytes checked; it must end with no violation;
#   3. `kvoffload bench mover --json --device cuda` (the host-view kernel and DMA paths);
#   4. the end-to-end test in a CUDA vLLM engine with KVOffloadSpec (tests/vllm_engine, bfloat16:
#      greedy outputs identical with and without offloading, the re-run prompt served from the
#      offload tier, no violation or leak, the wrong-block negative control caught). Needs a CUDA
#      build of vLLM already installed; without one this step is reported SKIPPED (set
#      GPU_CHECK_REQUIRE_VLLM=1 to make that a failure).
# Logs, JUnit reports and the benchmark JSON go to ${OUT:-out}/. Takes well under 10 minutes.
#
# Needs Python 3 with a CUDA build of torch already installed. It never installs torch: the
# project runs from src/ on top of that interpreter (step 2).
# Environment: PYTHON (default python3), OUT (default out), GPU_CHECK_SITE (where missing
# dependencies go),
# GPU_CHECK_WHEELS (a folder of wheels installed first with --no-index --no-deps: the project's
# pure-Python dependencies, for a machine that reaches no package index; made where pip works with
# `python3 -m pip wheel --no-deps -w .whl transitions==0.9.3 tla==0.0.4 parstools pytest-timeout`).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT_DIR="${OUT:-out}"
mkdir -p "$OUT_DIR"
PYTHON="${PYTHON:-python3}"

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
# The sources run from src/ (PYTHONPATH): nothing is installed over the interpreter's own packages
# (a venv would not see a torch that lives in another venv). Missing pure-Python dependencies go
# into a private folder, offline from GPU_CHECK_WHEELS when given, else from the package index;
# none of them depends on torch, so pip never fetches another multi-GB build.
SITE="${GPU_CHECK_SITE:-${TMPDIR:-/tmp}/kvoffload-gpu-check-site}"
export PYTHONPATH="$PWD/src:$SITE${PYTHONPATH:+:$PYTHONPATH}"
if [[ -n "${GPU_CHECK_WHEELS:-}" ]]; then
    "$PYTHON" -m pip install -q --no-index --no-deps --upgrade --target "$SITE" "$GPU_CHECK_WHEELS"/*.whl \
        >"$OUT_DIR/pip_wheels.log" 2>&1 || fail "installing $GPU_CHECK_WHEELS failed, see $OUT_DIR/pip_wheels.log"
fi
missing=$("$PYTHON" -c '
import importlib.util
print(" ".join(m for m in ("transitions", "rich", "tla", "pytest", "hypothesis") if importlib.util.find_spec(m) is None))
')
if [[ -n "$missing" ]]; then
    log "missing: $missing; trying pip install --target $SITE $missing"
    # shellcheck disable=SC2086
    "$PYTHON" -m pip install -q --upgrade --target "$SITE" $missing >"$OUT_DIR/pip_deps.log" 2>&1 ||
        fail "$missing could not be installed (see $OUT_DIR/pip_deps.log)"
fi
PY="$PYTHON"
"$PY" -c "$check_cuda" >/dev/null 2>&1 || fail "$PY no longer sees CUDA torch with PYTHONPATH=$PYTHONPATH"
"$PY" -c 'import kvoffload.offload.mover' >"$OUT_DIR/import.log" 2>&1 ||
    fail "kvoffload does not import (see $OUT_DIR/import.log)"

# --- 3. tests on the GPU -----------------------------------------------------------------------
status=0
mover_tests=(tests/test_mover.py tests/test_cuda_host.py
    tests/test_sim.py::test_torch_backend_moves_every_loaded_byte_right_under_faults)
log "running ${mover_tests[*]}"
timeout 150 "$PY" -m pytest "${mover_tests[@]}" -q -rs -p no:cacheprovider \
    --junitxml "$OUT_DIR/test_mover.xml" >"$OUT_DIR/test_mover.log" 2>&1 || status=$?
tail -n 25 "$OUT_DIR/test_mover.log" >&2
if [[ $status -ne 0 ]]; then
    fail "the mover's tests failed (exit $status; 124 means timeout), see $OUT_DIR/test_mover.log"
fi
if grep -q "needs a CUDA device" "$OUT_DIR/test_mover.log"; then
    fail "CUDA tests were skipped although CUDA is available, see $OUT_DIR/test_mover.log"
fi

# --- 4. the simulator's lifecycle on CUDA tensors ----------------------------------------------
log "running kvoffload simulate --device cuda --faults 0.05"
simulate_cli='
import sys
from kvoffload.cli import main
sys.exit(main(["simulate", "--device", "cuda", "--faults", "0.05", "--users", "48", "--turns", "6",
               "--gpu-blocks", "160", "--cpu-blocks", "1024", "--json"]))
'
timeout 120 "$PY" -c "$simulate_cli" >"$OUT_DIR/simulate_cuda.json" 2>"$OUT_DIR/simulate_cuda.log" || status=$?
cat "$OUT_DIR/simulate_cuda.json" "$OUT_DIR/simulate_cuda.log" >&2
if [[ $status -ne 0 ]]; then
    fail "kvoffload simulate --device cuda failed or found a violation (exit $status), see $OUT_DIR/simulate_cuda.log"
fi

# --- 5. the benchmark on the GPU -------------------------------------------------------------
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

# --- 6. end to end in a CUDA vLLM engine with KVOffloadSpec ----------------------------------
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
