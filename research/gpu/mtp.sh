#!/usr/bin/env bash
# One device call (issue 26): specllama's MTP drafting against llama.cpp's, greedy, on a
# Qwen3.5-9B-shaped F16 synthetic qwen35 target whose MTP head is right on a fraction
# a = 0.8, 0.95, 0.6 of the tokens (research/gpu/mtp.py says what runs and how it is counted).
#
#   bash research/gpu/mtp.sh        on the GPU machine: builds llama.cpp with CUDA (the libraries
#                                and llama-speculative-simple; a rerun on a warm machine reuses
#                                the build and the model), writes the model into /dev/shm during
#                                the build, measures, prints the table last
#   bash research/gpu/mtp.sh --cpu  the dry run, here: checks that the packed sources configure with
#                                the GPU run's options and compile the tool's source, writes a
#                                tiny model, and measures it on the CPU through the installed
#                                llama-cpp-python and a CPU build of llama.cpp ($LLAMA_BIN,
#                                default /tmp/llama-build/bin); with the project's venv active
#
# Needs .gpu/ prepared by research/gpu/prepare.sh (carry it). Writes steps.log, the build's and each
# step's logs, mtp.json and mtp.md under $OUT. Environment: ACCEPTANCE ("0.8 0.95 0.6"; the dry
# run "0.8 0.6"), TOKENS (256; 32), REPEATS (2; 1), BUDGET (480: no a is begun after this many
# seconds of the call).
set -euo pipefail
CPU=0
[ "${1:-}" = --cpu ] && CPU=1
REPO=$(pwd)
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
START=$(date +%s)
elapsed() { echo $(( $(date +%s) - START )); }
log() { echo "[$(elapsed)s] $*" | tee -a "$OUT/steps.log"; }
fail() { log "FAILED: $1"; if [ -f "${2:-}" ]; then tail -40 "$2"; fi; exit 1; }
WRITING=
trap 'if [ -n "$WRITING" ]; then kill "$WRITING" 2>/dev/null || true; fi' EXIT

if [ "$CPU" = 1 ]; then
  WORK=/tmp/specllama-mtp-dry
  SHAPE=tiny
  ACCEPTANCE=${ACCEPTANCE:-0.8 0.6}
  TOKENS=${TOKENS:-32}
  REPEATS=${REPEATS:-1}
  MODELS=$WORK/models
  LLAMA_BIN=${LLAMA_BIN:-/tmp/llama-build/bin}
  CUDA=OFF
else
  WORK=/tmp/specllama-gpu-mtp
  SHAPE=9b
  ACCEPTANCE=${ACCEPTANCE:-0.8 0.95 0.6}
  TOKENS=${TOKENS:-256}
  REPEATS=${REPEATS:-2}
  LLAMA_BIN=$WORK/build/bin
  CUDA=ON
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
  # The model (18 GB) and its heads (1.2 GB each) in memory when /dev/shm has room, else on disk.
  MODELS=/dev/shm/specllama-mtp
  SHM_GB=$(df --output=avail -B1G /dev/shm 2>/dev/null | tail -1 | tr -d ' ' || echo 0)
  if [ ! -f "$MODELS/state.json" ] && [ "${SHM_GB:-0}" -lt 24 ]; then MODELS=$WORK/models; fi
fi
BUDGET=${BUDGET:-480}
if [ ! -f .gpu/llama.cpp.tgz ] || [ ! -f .gpu/qwen-vocab.gguf ]; then
  fail "no .gpu/: run research/gpu/prepare.sh"
fi
log "mode $([ "$CPU" = 1 ] && echo cpu || echo gpu), models in $MODELS, a = $ACCEPTANCE"
mkdir -p "$WORK"

# Sources: unpacked afresh unless this tarball's build is there already (a rerun, warm machine).
STAMP="$(sha256sum .gpu/llama.cpp.tgz | cut -c1-16) cuda=$CUDA"
BUILT=0
if [ "$CPU" = 0 ] && [ -x "$LLAMA_BIN/llama-speculative-simple" ] \
    && [ "$(cat "$WORK/built" 2>/dev/null)" = "$STAMP" ]; then
  BUILT=1
else
  rm -rf "$WORK/llama.cpp" "$WORK/build" "$WORK/built"
  tar xzf .gpu/llama.cpp.tgz -C "$WORK"
fi
SITE=$WORK/site  # gguf (pure Python) where the machine lacks it
if [ "$CPU" = 0 ] && [ ! -d "$SITE/gguf" ]; then
  python3 -m pip install -q --no-index --no-deps --target "$SITE" .gpu/whl/*.whl
fi

# The model: numpy and gguf only (no llama_cpp: it is not built yet), beside the build.
models_ready() {  # written completely (state.json comes last), at this shape, with every head
  python3 - "$MODELS/state.json" "$SHAPE" $ACCEPTANCE <<'PY' 2>/dev/null
import json, sys
state = json.load(open(sys.argv[1]))
heads = [f"{float(a):g}" for a in sys.argv[3:]]
sys.exit(0 if state["shape"] == sys.argv[2] and all(h in state["heads"] for h in heads) else 1)
PY
}
if models_ready; then
  log "model already written: $(tr -d '\n' < "$MODELS/state.json" | cut -c1-160)"
else
  log "writing the $SHAPE model and its heads, in the background"
  PYTHONPATH="$SITE:${PYTHONPATH:-}" python3 research/gpu/mtp.py write --vocab .gpu/qwen-vocab.gguf \
    --out "$MODELS" --shape "$SHAPE" --acceptance $ACCEPTANCE > "$OUT/models.log" 2>&1 &
  WRITING=$!
fi

CMAKE_OPTIONS=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=$CUDA -DGGML_NATIVE=ON
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF
  -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_COMMON=ON
  -DLLAMA_BUILD_EXAMPLES=ON -DBUILD_SHARED_LIBS=ON)
if [ "$CPU" = 1 ]; then
  log "configure the packed sources with the GPU run's options (CUDA off), compile the tool"
  cmake -S "$WORK/llama.cpp" -B "$WORK/build" "${CMAKE_OPTIONS[@]}" > "$OUT/cmake.log" 2>&1 \
    || fail "configure" "$OUT/cmake.log"
  nice ninja -C "$WORK/build" \
    examples/speculative-simple/CMakeFiles/llama-speculative-simple.dir/speculative-simple.cpp.o \
    > "$OUT/build.log" 2>&1 || fail "compile speculative-simple.cpp" "$OUT/build.log"
elif [ "$BUILT" = 1 ]; then
  log "llama.cpp already built here ($STAMP)"
else
  log "configure"
  cmake -S "$WORK/llama.cpp" -B "$WORK/build" "${CMAKE_OPTIONS[@]}" \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_CUDA_FA=OFF > "$OUT/cmake.log" 2>&1 \
    || fail "configure" "$OUT/cmake.log"
  log "build (libraries and llama-speculative-simple)"
  cmake --build "$WORK/build" -j16 > "$OUT/build.log" 2>&1 || fail "build" "$OUT/build.log"
  echo "$STAMP" > "$WORK/built"
  log "built"
fi
[ -x "$LLAMA_BIN/llama-speculative-simple" ] || fail "no $LLAMA_BIN/llama-speculative-simple"

if [ -n "$WRITING" ]; then
  log "waiting for the model"
  wait "$WRITING" || fail "writing the model" "$OUT/models.log"
  WRITING=
  tee -a "$OUT/steps.log" < "$OUT/models.log"
fi

if [ "$CPU" = 0 ]; then  # llama-cpp-python's Python files on the libraries just built
  rm -rf "$WORK/py" && mkdir -p "$WORK/py" && cp -r .gpu/py/llama_cpp "$WORK/py/"
  mkdir -p "$WORK/py/llama_cpp/lib"
  find "$WORK/build" -name "*.so*" -exec cp -a {} "$WORK/py/llama_cpp/lib/" \;
  export PYTHONPATH="$WORK/py:$SITE:$REPO"
  export LD_LIBRARY_PATH="$WORK/py/llama_cpp/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
  OFFLOAD=()
else
  export PYTHONPATH="$REPO:${PYTHONPATH:-}"
  export LD_LIBRARY_PATH="$LLAMA_BIN:${LD_LIBRARY_PATH:-}"
  OFFLOAD=(--cpu)
fi
export PYTHONUNBUFFERED=1

# llama_cpp before numpy: the other order segfaults in model loading on the GPU image (GPU.md).
script() { python3 -X faulthandler -c "import llama_cpp, runpy, sys; sys.argv = sys.argv[1:]; \
  runpy.run_path(sys.argv[0], run_name='__main__')" "$@"; }

LEFT=$(( BUDGET - $(elapsed) ))
log "measure: $TOKENS tokens, $REPEATS rounds, no a begun after ${BUDGET}s (${LEFT}s from now)"
RC=0
script research/gpu/mtp.py measure --models "$MODELS" --llama-bin "$LLAMA_BIN" "${OFFLOAD[@]}" \
  --acceptance $ACCEPTANCE -n "$TOKENS" --repeats "$REPEATS" --stop-after "$LEFT" \
  --json "$OUT/mtp.json" --logs "$OUT/logs" > "$OUT/measure.log" 2>&1 || RC=$?
grep -v "^|\|^###\|^tok/s: \|^prompt tokens: \|^calibration (a\|^$" "$OUT/measure.log" \
  | tail -40 || true
[ "$RC" = 0 ] || log "FAILED: measure exited $RC (the table holds what was measured)"
if [ -f "$OUT/mtp.json" ]; then
  python3 research/gpu/mtp.py table "$OUT/mtp.json" > "$OUT/mtp.md"
fi
log "done"
if [ -f "$OUT/mtp.md" ]; then cat "$OUT/mtp.md"; fi
exit "$RC"
