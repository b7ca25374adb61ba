#!/usr/bin/env bash
# One device call (issue 42): what one batched step of a server's slots costs on a GPU, by
# slots and width. For S = 1, 2, 4, 8 sequences at a depth of 512 tokens each, with k+1 tokens
# each (k = 0, 3, 7, 15), the median time of LlamaBackend.decode_parts (ONE llama_decode, as
# `serve --parallel N` steps), on a Qwen2.5-7B-shaped F16 synthetic target; the line StepCosts
# fits to those steps and what it charges a slot; and aggregate tokens/s of S sequences decoding
# plain against one (research/gpu/slots.py says what runs and how it is counted).
#
#   bash research/gpu/slots.sh        on the GPU machine: builds llama.cpp's libraries with CUDA
#                                     (a warm machine's build, this script's, mtp.sh's or
#                                     copying.sh's, is reused), writes the model into /dev/shm
#                                     during the build, measures, prints the table last
#   bash research/gpu/slots.sh --cpu  the dry run, here: checks that the packed sources
#                                     configure with the GPU run's options and that the build's
#                                     targets exist, writes a tiny model, and measures it on the
#                                     CPU through the installed llama-cpp-python; with the
#                                     project's venv active
#
# Needs .gpu/ prepared by research/gpu/prepare.sh (carry it). Writes steps.log, the build's and
# each step's logs, slots.json and slots.md under $OUT. Environment: SLOTS ("1 2 4 8"), KS
# ("0 3 7 15"), REPEATS (10; the dry run 3), DEPTH (512), THROUGHPUT_STEPS (32; 0: none),
# BUDGET (300: no step is begun after this many seconds of the call; none in the dry run).
set -euo pipefail
CPU=0
[ "${1:-}" = --cpu ] && CPU=1
OUT=${OUT:-/tmp/out}
MODE=slots
. "$(dirname "$0")/lib.sh"
device_begin
if [ "$CPU" = 1 ]; then
  SHAPE=tiny
  REPEATS=${REPEATS:-3}
  WARMUP=1
  MODELS=$LLAMA_WORK/models
else
  SHAPE=7b
  REPEATS=${REPEATS:-10}
  WARMUP=3
  device_models_in /dev/shm/specllama-slots 17  # 15 GB, in memory when /dev/shm has room
fi
# Here the CPU is shared with benchmarks: what loads a model or compiles waits for its lock.
locked() { if [ "$CPU" = 1 ]; then ( flock 9 && "$@" ) 9> /tmp/cpu.lock; else "$@"; fi; }
SLOTS=${SLOTS:-1 2 4 8}
KS=${KS:-0 3 7 15}
DEPTH=${DEPTH:-512}
THROUGHPUT_STEPS=${THROUGHPUT_STEPS:-32}
BUDGET=${BUDGET:-$([ "$CPU" = 1 ] && echo 36000 || echo 300)}  # the dry run waits for the lock
log "mode $([ "$CPU" = 1 ] && echo cpu || echo gpu), model in $MODELS"

# The sources, unless this tarball's build is here (a warm machine): this script needs only
# llama.cpp's shared libraries (~165 s with CUDA, against ~200 s with llama-common and the
# example that mtp.sh and copying.sh build), so it builds those alone; a build of theirs is
# reused. (After a build of this one, theirs rebuilds in full: lib.sh wants the example.)
STAMP="$(sha256sum .gpu/llama.cpp.tgz | cut -c1-16) cuda=$CUDA"
BUILT=0
if [ "$CPU" = 0 ] && [ "$(cat "$LLAMA_WORK/built" 2>/dev/null)" = "$STAMP" ] \
    && [ -n "$(find "$LLAMA_WORK/build" -name 'libllama.so*' 2>/dev/null | head -1)" ]; then
  BUILT=1
else
  rm -rf "$LLAMA_WORK/llama.cpp" "$LLAMA_WORK/build" "$LLAMA_WORK/built"
  tar xzf .gpu/llama.cpp.tgz -C "$LLAMA_WORK"
fi
if [ "$CPU" = 0 ] && [ ! -d "$SITE/gguf" ]; then
  python3 -m pip install -q --no-index --no-deps --target "$SITE" .gpu/whl/*.whl
fi

# The model: numpy and gguf only (no llama_cpp: it is not built yet), beside the build.
if python3 - "$MODELS/state.json" "$SHAPE" <<'PY' 2>/dev/null
import json, sys
sys.exit(0 if json.load(open(sys.argv[1]))["shape"] == sys.argv[2] else 1)
PY
then
  log "model already written: $(tr -d '\n' < "$MODELS/state.json")"
else
  log "writing the $SHAPE model, in the background"
  PYTHONPATH="$SITE:${PYTHONPATH:-}" locked python3 research/gpu/slots.py write \
    --vocab .gpu/qwen-vocab.gguf --out "$MODELS" --shape "$SHAPE" > "$OUT/models.log" 2>&1 &
  WRITING=$!
fi

# lib.sh's options (CUDA on the GPU), the libraries alone.
OPTIONS=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=$CUDA -DGGML_NATIVE=ON
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF
  -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_COMMON=ON
  -DLLAMA_BUILD_EXAMPLES=ON -DBUILD_SHARED_LIBS=ON)
TARGETS=(llama)  # libllama and the ggml libraries it links (lib.sh builds no mtmd: tools off)
if [ "$CPU" = 1 ]; then
  log "configure the packed sources with the GPU run's options (CUDA off), check the targets"
  locked cmake -S "$LLAMA_WORK/llama.cpp" -B "$LLAMA_WORK/build" "${OPTIONS[@]}" \
    > "$OUT/cmake.log" 2>&1 || fail "configure" "$OUT/cmake.log"
  ninja -C "$LLAMA_WORK/build" -n "${TARGETS[@]}" > "$OUT/build.log" 2>&1 \
    || fail "no targets ${TARGETS[*]}" "$OUT/build.log"
  log "ninja would build ${TARGETS[*]} in $(grep -c '^\[' "$OUT/build.log") steps"
elif [ "$BUILT" = 1 ]; then
  log "llama.cpp already built here ($STAMP)"
else
  log "configure"
  cmake -S "$LLAMA_WORK/llama.cpp" -B "$LLAMA_WORK/build" "${OPTIONS[@]}" \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_CUDA_FA=OFF > "$OUT/cmake.log" 2>&1 \
    || fail "configure" "$OUT/cmake.log"
  log "build (the libraries: ${TARGETS[*]})"
  cmake --build "$LLAMA_WORK/build" -j16 --target "${TARGETS[@]}" > "$OUT/build.log" 2>&1 \
    || fail "build" "$OUT/build.log"
  echo "$STAMP" > "$LLAMA_WORK/built"
  log "built"
fi
if [ "$CPU" = 0 ] && [ -z "$(find "$LLAMA_WORK/build" -name 'libllama.so*' | head -1)" ]; then
  fail "no libllama.so in $LLAMA_WORK/build"
fi
device_wait_models
device_python

LEFT=$(( BUDGET - $(elapsed) ))
log "measure: S in $SLOTS, k in $KS, depth $DEPTH, $REPEATS steps each,"\
  "no step begun after ${BUDGET}s (${LEFT}s from now)"
RC=0
# shellcheck disable=SC2086  # SLOTS and KS: lists of numbers
locked device_script research/gpu/slots.py measure --model "$MODELS/target.f16.gguf" \
  "${OFFLOAD[@]}" --slots $SLOTS --ks $KS --depth "$DEPTH" \
  --repeats "$REPEATS" --warmup "$WARMUP" --throughput-steps "$THROUGHPUT_STEPS" \
  --stop-after "$LEFT" --json "$OUT/slots.json" > "$OUT/measure.log" 2>&1 || RC=$?
sed '/^###/,$d' "$OUT/measure.log" | tail -60 || true  # the steps as they went; the table last
[ "$RC" = 0 ] || log "FAILED: measure exited $RC (the table holds what was measured)"
if [ -f "$OUT/slots.json" ]; then
  python3 research/gpu/slots.py table "$OUT/slots.json" > "$OUT/slots.md"
fi
log "done"
if [ -f "$OUT/slots.md" ]; then cat "$OUT/slots.md"; fi
exit "$RC"
