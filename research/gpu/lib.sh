# Steps the one-call device scripts share (sourced by copying.sh; mtp.sh does the same steps
# in its own lines). The caller sets CPU (1: the dry run here), OUT, and MODE (a word for the
# log), and calls, in order: device_begin, device_models_in (GPU), device_unpack, a model
# writer in the background (its pid in WRITING), device_build, device_wait_models,
# device_python, then device_script for its measurement.
#
# On the GPU, llama.cpp is built in /tmp/specllama-gpu-mtp with mtp.sh's options from the same
# packed sources, so a warm machine reuses a build that either script made. The dry run
# configures the packed sources with the same options (CUDA off) and compiles the tool's
# source only, then uses a CPU build of llama.cpp ($LLAMA_BIN, default /tmp/llama-build/bin).

START=$(date +%s)
WRITING=
elapsed() { echo $(( $(date +%s) - START )); }
log() { echo "[$(elapsed)s] $*" | tee -a "$OUT/steps.log"; }
fail() { log "FAILED: $1"; if [ -f "${2:-}" ]; then tail -40 "$2"; fi; exit 1; }
trap 'if [ -n "$WRITING" ]; then kill "$WRITING" 2>/dev/null || true; fi' EXIT

device_begin() {  # checks .gpu/, sets LLAMA_WORK, LLAMA_BIN, CUDA, SITE
  mkdir -p "$OUT"
  if [ ! -f .gpu/llama.cpp.tgz ] || [ ! -f .gpu/qwen-vocab.gguf ]; then
    fail "no .gpu/: run research/gpu/prepare.sh"
  fi
  if [ "$CPU" = 1 ]; then
    LLAMA_WORK=/tmp/specllama-$MODE-dry
    LLAMA_BIN=${LLAMA_BIN:-/tmp/llama-build/bin}
    CUDA=OFF
  else
    LLAMA_WORK=/tmp/specllama-gpu-mtp  # mtp.sh's: a build of either is reused
    LLAMA_BIN=$LLAMA_WORK/build/bin
    CUDA=ON
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader \
      | tee "$OUT/gpu.txt"
  fi
  SITE=$LLAMA_WORK/site  # gguf (pure Python) where the machine lacks it
  mkdir -p "$LLAMA_WORK"
}

device_models_in() {  # $1: a folder in /dev/shm, $2: GB it needs; sets MODELS (else on disk)
  MODELS=$1
  local free
  free=$(df --output=avail -B1G /dev/shm 2>/dev/null | tail -1 | tr -d ' ' || echo 0)
  if [ ! -f "$MODELS/state.json" ] && [ "${free:-0}" -lt "$2" ]; then
    MODELS=$LLAMA_WORK/$(basename "$1")
  fi
}

device_unpack() {  # the sources afresh, unless this tarball's build is there (warm machine)
  STAMP="$(sha256sum .gpu/llama.cpp.tgz | cut -c1-16) cuda=$CUDA"
  BUILT=0
  if [ "$CPU" = 0 ] && [ -x "$LLAMA_BIN/llama-speculative-simple" ] \
      && [ "$(cat "$LLAMA_WORK/built" 2>/dev/null)" = "$STAMP" ]; then
    BUILT=1
  else
    rm -rf "$LLAMA_WORK/llama.cpp" "$LLAMA_WORK/build" "$LLAMA_WORK/built"
    tar xzf .gpu/llama.cpp.tgz -C "$LLAMA_WORK"
  fi
  if [ "$CPU" = 0 ] && [ ! -d "$SITE/gguf" ]; then
    python3 -m pip install -q --no-index --no-deps --target "$SITE" .gpu/whl/*.whl
  fi
}

device_build() {  # llama.cpp's libraries and llama-speculative-simple (the dry run: compile it)
  local options=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=$CUDA -DGGML_NATIVE=ON
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_COMMON=ON
    -DLLAMA_BUILD_EXAMPLES=ON -DBUILD_SHARED_LIBS=ON)
  if [ "$CPU" = 1 ]; then
    log "configure the packed sources with the GPU run's options (CUDA off), compile the tool"
    cmake -S "$LLAMA_WORK/llama.cpp" -B "$LLAMA_WORK/build" "${options[@]}" \
      > "$OUT/cmake.log" 2>&1 || fail "configure" "$OUT/cmake.log"
    nice ninja -C "$LLAMA_WORK/build" \
      examples/speculative-simple/CMakeFiles/llama-speculative-simple.dir/speculative-simple.cpp.o \
      > "$OUT/build.log" 2>&1 || fail "compile speculative-simple.cpp" "$OUT/build.log"
  elif [ "$BUILT" = 1 ]; then
    log "llama.cpp already built here ($STAMP)"
  else
    log "configure"
    cmake -S "$LLAMA_WORK/llama.cpp" -B "$LLAMA_WORK/build" "${options[@]}" \
      -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_CUDA_FA=OFF > "$OUT/cmake.log" 2>&1 \
      || fail "configure" "$OUT/cmake.log"
    log "build (libraries and llama-speculative-simple)"
    cmake --build "$LLAMA_WORK/build" -j16 > "$OUT/build.log" 2>&1 || fail "build" "$OUT/build.log"
    echo "$STAMP" > "$LLAMA_WORK/built"
    log "built"
  fi
  [ -x "$LLAMA_BIN/llama-speculative-simple" ] || fail "no $LLAMA_BIN/llama-speculative-simple"
}

device_wait_models() {  # for the writer started in the background, if one was
  if [ -n "$WRITING" ]; then
    log "waiting for the model"
    wait "$WRITING" || fail "writing the model" "$OUT/models.log"
    WRITING=
    tee -a "$OUT/steps.log" < "$OUT/models.log"
  fi
}

device_python() {  # llama-cpp-python on the libraries just built (GPU); sets OFFLOAD
  local repo
  repo=$(pwd)
  if [ "$CPU" = 0 ]; then
    rm -rf "$LLAMA_WORK/py" && mkdir -p "$LLAMA_WORK/py" && cp -r .gpu/py/llama_cpp "$LLAMA_WORK/py/"
    mkdir -p "$LLAMA_WORK/py/llama_cpp/lib"
    find "$LLAMA_WORK/build" -name "*.so*" -exec cp -a {} "$LLAMA_WORK/py/llama_cpp/lib/" \;
    export PYTHONPATH="$LLAMA_WORK/py:$SITE:$repo"
    export LD_LIBRARY_PATH="$LLAMA_WORK/py/llama_cpp/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
    OFFLOAD=()
  else
    export PYTHONPATH="$repo:${PYTHONPATH:-}"
    export LD_LIBRARY_PATH="$LLAMA_BIN:${LD_LIBRARY_PATH:-}"
    OFFLOAD=(--cpu)
  fi
  export PYTHONUNBUFFERED=1
}

# llama_cpp before numpy: the other order segfaults in model loading on the GPU image (GPU.md).
device_script() { python3 -X faulthandler -c "import llama_cpp, runpy, sys; \
  sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')" "$@"; }
