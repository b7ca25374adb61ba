#!/usr/bin/env bash
# One device call (issue 43, item 4): does a token verified in a batch get the logits it gets
# alone on CUDA, and what does --exact cost there? On the CPU, three kernels chosen by the
# batch's width broke it (research/RESULTS.md, "Issue 43, item 1"), and --exact switches two
# of them off. llama.cpp's CUDA backend also picks its matrix kernels by batch width: for
# quantised weights MMVQ (a matrix-vector kernel) for one token or a few and MMQ (tiled, with
# the activations quantised to q8_1) for more, for F16 cuBLAS GEMM against its own vector
# kernels; flash attention's kernel also changes with the batch. --exact changes none of those
# (it covers ggml-cpu only, and says so at start when layers are on a GPU).
#
# What only a GPU can show: whether MMVQ/MMQ/cuBLAS give a verified token other logits than
# alone (and from which width: chunks of 1, 4 and 8 against a batch of 13), on Q4_K_M, Q8_0 and
# F16 files at a 7B shape; and what --exact costs with every layer on the GPU (expected: ~0,
# only the CPU-side token embedding changes). Random weights: the logits differ in value from a
# real model's, but whether the kernels agree to the bit does not depend on the values.
#
#   bash research/gpu/exact.sh        on the GPU machine: builds llama.cpp's libraries with CUDA
#                                     (a warm machine's build of slots.sh is reused), writes
#                                     the 7B-shaped F16 model into /dev/shm during the build,
#                                     quantises it (Q4_K_M, then Q8_0 and F16 from that), runs
#                                     research/batch_invariance.py --logits-only and
#                                     research/exact_cost.py, prints the tables last
#   bash research/gpu/exact.sh --cpu  the dry run, here (project venv active): the tiny shapes,
#                                     on the CPU through the installed llama-cpp-python
#
# Needs .gpu/ from research/gpu/prepare.sh (carry it) and g++ (batch_invariance.py compiles
# its helper against the built libraries and the packed headers). Writes steps.log, the
# build's and each step's logs, invariance.md, cost.md and cost.json under $OUT. Environment:
# PARTS ("invariance cost"), TYPES ("Q4_K_M Q8_0 F16"), CHUNKS ("1 4 8"), ROUNDS (2), TOKENS
# (128).
#
# Expected on the H200 (estimates: it has not run there yet): build ~165 s, the 7B F16 written
# beside it, quantising ~60-90 s, the invariance part ~90 s, the cost part ~250 s (24 runs,
# each a process that loads its file). Both parts in one call may pass the 600 s a call has:
# on a cold machine run PARTS=invariance first, then PARTS=cost on the warm machine (the build
# and the models are reused).
set -euo pipefail
CPU=0
[ "${1:-}" = --cpu ] && CPU=1
OUT=${OUT:-/tmp/out}
MODE=exact
. "$(dirname "$0")/lib.sh"
device_begin
TYPES=${TYPES:-Q4_K_M Q8_0 F16}
CHUNKS=${CHUNKS:-1 4 8}
ROUNDS=${ROUNDS:-2}
TOKENS=${TOKENS:-128}
PARTS=${PARTS:-invariance cost}
locked() { if [ "$CPU" = 1 ]; then ( flock 9 && "$@" ) 9> /tmp/cpu.lock; else "$@"; fi; }
if [ "$CPU" = 1 ]; then
  SMALL=(--small)
  TARGET=target-small DRAFT=draft-small MODELS=$LLAMA_WORK/models
  ROUNDS=1 TOKENS=16 GPU_LAYERS=0
else
  SMALL=()
  TARGET=target-7b DRAFT=draft-0.5b GPU_LAYERS=-1
  device_models_in /dev/shm/specllama-exact 40  # F16 15 GB + Q8_0 8 + Q4_K_M 5, and room
fi

# The sources, unless slots.sh's build of this tarball is here (the same libraries, options).
STAMP="$(sha256sum .gpu/llama.cpp.tgz | cut -c1-16) cuda=$CUDA"
BUILT=0
if [ "$CPU" = 0 ] && [ "$(cat "$LLAMA_WORK/built" 2>/dev/null)" = "$STAMP" ] \
    && [ -n "$(find "$LLAMA_WORK/build" -name 'libllama.so*' 2>/dev/null | head -1)" ]; then
  BUILT=1
elif [ "$CPU" = 0 ]; then
  rm -rf "$LLAMA_WORK/llama.cpp" "$LLAMA_WORK/build" "$LLAMA_WORK/built"
  tar xzf .gpu/llama.cpp.tgz -C "$LLAMA_WORK"
  [ -d "$SITE/gguf" ] || python3 -m pip install -q --no-index --no-deps --target "$SITE" .gpu/whl/*.whl
fi

if [ -f "$MODELS/$TARGET.f16.gguf" ] && [ -f "$MODELS/$DRAFT.f16.gguf" ]; then
  log "models already written in $MODELS"
else
  log "writing the $TARGET and $DRAFT models (F16), in the background"
  PYTHONPATH="$SITE:${PYTHONPATH:-}" locked python3 research/gpu/make_models.py \
    --vocab .gpu/qwen-vocab.gguf --out "$MODELS" "${SMALL[@]}" > "$OUT/models.log" 2>&1 &
  WRITING=$!
fi

if [ "$CPU" = 0 ] && [ "$BUILT" = 0 ]; then
  log "configure and build llama.cpp's libraries with CUDA"
  cmake -S "$LLAMA_WORK/llama.cpp" -B "$LLAMA_WORK/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DGGML_CUDA=ON -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_COMMON=ON -DLLAMA_BUILD_EXAMPLES=ON \
    -DBUILD_SHARED_LIBS=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_CUDA_FA=OFF \
    > "$OUT/cmake.log" 2>&1 || fail "configure" "$OUT/cmake.log"
  cmake --build "$LLAMA_WORK/build" -j16 --target llama mtmd > "$OUT/build.log" 2>&1 \
    || fail "build" "$OUT/build.log"
  echo "$STAMP" > "$LLAMA_WORK/built"
  log "built"
fi
device_wait_models
device_python
if [ "$CPU" = 0 ]; then
  # batch_invariance.py compiles its helper against the vendored headers at this path.
  mkdir -p /tmp/llamacpp/llama_cpp_python-0.3.36/vendor
  ln -sfn "$LLAMA_WORK/llama.cpp" /tmp/llamacpp/llama_cpp_python-0.3.36/vendor/llama.cpp
fi

log "quantise $TARGET to Q4_K_M (Q8_0 and F16 follow from it in exact_cost.py)"
Q4=$MODELS/$TARGET.Q4_K_M.gguf
if [ ! -f "$Q4" ]; then
  locked device_script research/gpu/quantize.py "$MODELS/$TARGET.f16.gguf" "$Q4.partial" q4_k_m \
    > "$OUT/quantize.log" 2>&1 || fail "quantise" "$OUT/quantize.log"
  mv "$Q4.partial" "$Q4"
fi

log "requantise to $TYPES (exact_cost.py's copies, made once)"
locked device_script /dev/stdin "$Q4" "$MODELS" $TYPES > "$OUT/copies.log" 2>&1 <<'PY' \
  || fail "copies" "$OUT/copies.log"
import sys
from pathlib import Path
sys.path.insert(0, "research")
import exact_cost
for kind in sys.argv[3:]:
    print(exact_cost.target_file(Path(sys.argv[1]), kind, Path(sys.argv[2])))
PY
: > "$OUT/invariance.md"
: > "$OUT/cost.md"
if [[ " $PARTS " == *" invariance "* ]]; then
  log "batch vs alone: logits of a batch of 13 against chunks of $CHUNKS"
  {
    echo "| file | chunk | logits max diff: pos0 / last / max | argmax equal |"
    echo "|---|---|---|---|"
  } > "$OUT/invariance.md"
  for type in $TYPES; do
    file=$Q4
    [ "$type" = Q4_K_M ] || file=$MODELS/$TARGET.Q4_K_M.$type-from-Q4_K_M.gguf
    for chunk in $CHUNKS; do
      name=$type-c$chunk
      # Default n_gpu_layers is all: every node sits on the GPU, so compare the logits only.
      locked device_script research/batch_invariance.py --model "$file" -c "$chunk" \
        --logits-only --out "$LLAMA_WORK/trace-$name.bin" > "$OUT/invariance-$name.log" 2>&1 \
        || fail "batch_invariance.py $name" "$OUT/invariance-$name.log"
      python3 - "$type" "$chunk" "$OUT/invariance-$name.log" >> "$OUT/invariance.md" <<'PY'
import re, sys
kind, chunk, log = sys.argv[1], sys.argv[2], open(sys.argv[3]).read()
m = re.search(r"production \(no callback\): pos0 (\S+)\s+last (\S+)\s+max (\S+)\s+argmax equal (\S+)", log)
print(f"| {kind} | {chunk} | {' / '.join(m.groups()[:3])} | {m.group(4)} |" if m else f"| {kind} | {chunk} | (no logits line) | |")
PY
    done
  done
fi
if [[ " $PARTS " == *" cost "* ]]; then
  log "cost: target alone and the default, default kernels and --exact, $ROUNDS rounds"
  # shellcheck disable=SC2086  # TYPES: a list of words
  locked device_script research/exact_cost.py --target "$Q4" --draft "$MODELS/$DRAFT.f16.gguf" \
    --types $TYPES --rounds "$ROUNDS" -n "$TOKENS" --gpu-layers "$GPU_LAYERS" \
    --threads "$(nproc)" --models-dir "$MODELS" --json "$OUT/cost.json" \
    > "$OUT/cost.md" 2> "$OUT/cost.log" || fail "exact_cost.py" "$OUT/cost.log"
fi
log "done"
cat "$OUT/invariance.md" "$OUT/cost.md"
