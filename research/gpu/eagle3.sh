#!/usr/bin/env bash
# One device call (issue 34): specllama's drafting with a head in its own file against llama.cpp's
# draft-eagle3 / draft-dflash / draft-mtp on the same files, greedy: a Llama-3.1-8B-shaped F16
# synthetic llama target and an EAGLE-3 head (KIND=eagle3, the default) or a DFlash head
# (KIND=dflash: a block of up to 15 tokens in one decode, LAYERS decoder layers), or a
# 1.5B-shaped gemma4 target and its assistant (KIND=gemma4-assistant: one token a decode, reading
# the target's KV cache), right on a fraction a = 0.8 of the tokens (tests/head_models.py,
# tests/gemma4_models.py; research/eagle3.py says what runs).
#
#   bash research/gpu/eagle3.sh        on the GPU machine: builds llama.cpp with CUDA (a rerun on a
#                                   warm machine reuses the build and the models), writes the
#                                   pair into /dev/shm during the build, measures, prints the table
#   bash research/gpu/eagle3.sh --cpu  the dry run, here (venv active): a tiny pair with the same
#                                   vocabulary, through the installed llama-cpp-python and a CPU
#                                   build of llama.cpp ($LLAMA_BIN, default /tmp/llama-build/bin)
#
# Needs .gpu/ prepared by research/gpu/prepare.sh (carry it). Writes steps.log, the build's logs,
# KIND.json and measure.log under $OUT. Environment: KIND (eagle3, dflash or gemma4-assistant),
# KS ("3 5"; dflash "4 8 15"; gemma4-assistant "1 3"; the dry run "3"), TOKENS (256; 32),
# REPEATS (2; 1), ACCEPT (0.8), LAYERS (a DFlash head's: 5; the dry run 1).
set -euo pipefail
CPU=0
[ "${1:-}" = --cpu ] && CPU=1
REPO=$(pwd)
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
START=$(date +%s)
log() { echo "[$(( $(date +%s) - START ))s] $*" | tee -a "$OUT/steps.log"; }
fail() { log "FAILED: $1"; if [ -f "${2:-}" ]; then tail -40 "$2"; fi; exit 1; }
WRITING=
trap 'if [ -n "$WRITING" ]; then kill "$WRITING" 2>/dev/null || true; fi' EXIT
[ -f .gpu/llama.cpp.tgz ] && [ -f .gpu/qwen-vocab.gguf ] || fail "no .gpu/: run research/gpu/prepare.sh"
ACCEPT=${ACCEPT:-0.8}
KIND=${KIND:-eagle3}
GPU_SIZE=8b
case "$KIND" in
  eagle3) GPU_KS="3 5" ;;
  dflash) GPU_KS="4 8 15" ;;
  gemma4-assistant) GPU_KS="1 3" GPU_SIZE=1.5b ;;  # the gemma4 shapes: tiny and 1.5b
  *) fail "KIND=$KIND: eagle3, dflash or gemma4-assistant" ;;
esac

if [ "$CPU" = 1 ]; then
  WORK=/tmp/specllama-eagle3-dry SIZE=tiny KS=${KS:-3} TOKENS=${TOKENS:-32} REPEATS=${REPEATS:-1}
  LAYERS=${LAYERS:-1}
  MODELS=$WORK/models LLAMA_BIN=${LLAMA_BIN:-/tmp/llama-build/bin} GPU=()
  mkdir -p "$WORK"
  export PYTHONPATH="$REPO:${PYTHONPATH:-}"
else
  WORK=/tmp/specllama-gpu-eagle3 SIZE=$GPU_SIZE KS=${KS:-$GPU_KS} TOKENS=${TOKENS:-256} REPEATS=${REPEATS:-2}
  LAYERS=${LAYERS:-5}
  LLAMA_BIN=$WORK/build/bin GPU=(--gpu)
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
  MODELS=/dev/shm/specllama-eagle3  # 17 GB: in memory when /dev/shm has room
  SHM_GB=$(df --output=avail -B1G /dev/shm 2>/dev/null | tail -1 | tr -d ' ' || echo 0)
  if [ ! -d "$MODELS" ] && [ "${SHM_GB:-0}" -lt 24 ]; then MODELS=$WORK/models; fi
  mkdir -p "$WORK"
  SITE=$WORK/site  # gguf (pure Python), which the machine lacks
  [ -d "$SITE/gguf" ] || python3 -m pip install -q --no-index --no-deps --target "$SITE" .gpu/whl/*.whl
  STAMP="$(sha256sum .gpu/llama.cpp.tgz | cut -c1-16) cuda"
  if [ -x "$LLAMA_BIN/llama-speculative-simple" ] && [ "$(cat "$WORK/built" 2>/dev/null)" = "$STAMP" ]; then
    log "llama.cpp already built here"
  else
    # numpy and gguf only (llama_cpp is not built yet): write the pair during the build.
    log "writing the $SIZE pair into $MODELS, in the background"
    PYTHONPATH="$SITE" python3 research/make_heads.py "$MODELS" --kind "$KIND" --accept "$ACCEPT" \
      --size "$SIZE" --layers "$LAYERS" --vocab .gpu/qwen-vocab.gguf > "$OUT/models.log" 2>&1 &
    WRITING=$!
    rm -rf "$WORK/llama.cpp" "$WORK/build" "$WORK/built"
    tar xzf .gpu/llama.cpp.tgz -C "$WORK"
    log "configure and build (libraries and llama-speculative-simple)"
    cmake -S "$WORK/llama.cpp" -B "$WORK/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
      -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
      -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
      -DLLAMA_BUILD_COMMON=ON -DLLAMA_BUILD_EXAMPLES=ON -DBUILD_SHARED_LIBS=ON \
      -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_CUDA_FA=OFF > "$OUT/cmake.log" 2>&1 \
      || fail "configure" "$OUT/cmake.log"
    cmake --build "$WORK/build" -j16 > "$OUT/build.log" 2>&1 || fail "build" "$OUT/build.log"
    echo "$STAMP" > "$WORK/built"
    log "built"
  fi
  if [ -n "$WRITING" ]; then
    wait "$WRITING" || fail "writing the pair" "$OUT/models.log"
    WRITING=
    tee -a "$OUT/steps.log" < "$OUT/models.log"
  fi
  # llama-cpp-python's Python files on the libraries just built.
  rm -rf "$WORK/py" && mkdir -p "$WORK/py/llama_cpp/lib" && cp -r .gpu/py/llama_cpp "$WORK/py/"
  find "$WORK/build" -name "*.so*" -exec cp -a {} "$WORK/py/llama_cpp/lib/" \;
  export PYTHONPATH="$WORK/py:$SITE:$REPO"
  export LD_LIBRARY_PATH="$WORK/py/llama_cpp/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
fi
[ -x "$LLAMA_BIN/llama-speculative-simple" ] || fail "no $LLAMA_BIN/llama-speculative-simple"
export PYTHONUNBUFFERED=1

log "measure: $KIND, $SIZE, a = $ACCEPT, k in $KS, $TOKENS tokens, $REPEATS rounds"
# llama_cpp before numpy: the other order segfaults in model loading on the GPU image (GPU.md).
RC=0
python3 -X faulthandler -c "import llama_cpp, runpy, sys; sys.argv = sys.argv[1:]; \
  runpy.run_path(sys.argv[0], run_name='__main__')" research/eagle3.py --kind "$KIND" \
  --layers "$LAYERS" --size "$SIZE" --accept "$ACCEPT" --ks $KS -n "$TOKENS" --repeats "$REPEATS" \
  --vocab .gpu/qwen-vocab.gguf --models "$MODELS" --llama-bin "$LLAMA_BIN" \
  --json "$OUT/$KIND.json" "${GPU[@]}" \
  > "$OUT/measure.log" 2>&1 || RC=$?
tail -12 "$OUT/measure.log"
[ "$RC" = 0 ] || log "FAILED: measure exited $RC"
log "done"
exit "$RC"
