#!/usr/bin/env bash
# One device call: build llama.cpp with CUDA from the sources llama-cpp-python vendors, make
# Qwen2.5-shaped synthetic models (7B target, 0.5B draft), and measure:
#   bash research/gpu/run.sh            speculation's costs (random weights): gpu_costs.json
#   bash research/gpu/run.sh pipeline   chain against pipelined drafting on a controlled-acceptance
#                                    pair (a = 0.95, 0.8, 0.6): pipelined.{json,md}
#                                    (prepared 2026-12-01, not yet run on a GPU)
# Needs .gpu/ prepared by research/gpu/prepare.sh (sources, Python bindings, vocabulary, wheels).
# Writes logs and results under $OUT.
set -euo pipefail
MODE=${1:-costs}
REPO=$(pwd)
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
START=$(date +%s)
elapsed() { echo $(( $(date +%s) - START )); }
log() { echo "[$(elapsed)s] $*" | tee -a "$OUT/steps.log"; }

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
WORK=/tmp/specllama-gpu
rm -rf "$WORK" && mkdir -p "$WORK" && tar xzf .gpu/llama.cpp.tgz -C "$WORK"

MODELS=/dev/shm/specllama-models
python3 -m pip install -q --no-index --no-deps --target "$WORK/site" .gpu/whl/*.whl
if [ "$MODE" = pipeline ]; then  # numpy and gguf only: write the big models during the build
  PYTHONPATH="$WORK/site" python3 research/gpu/make_models.py --vocab .gpu/qwen-vocab.gguf \
    --out "$MODELS" --acceptance 0.95 0.8 0.6 > "$OUT/models.log" 2>&1 &
  MAKING=$!
fi

log "configure"
cmake -S "$WORK/llama.cpp" -B "$WORK/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_CUDA_FA=OFF -DGGML_NATIVE=ON \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
  -DLLAMA_BUILD_COMMON=OFF -DBUILD_SHARED_LIBS=ON > "$OUT/cmake.log" 2>&1 \
  || { tail -40 "$OUT/cmake.log"; ls /usr/local/cuda*/lib64 2>/dev/null | grep -i cublas; exit 1; }
log "build"
cmake --build "$WORK/build" -j16 > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
log "built"

mkdir -p "$WORK/py" && cp -r .gpu/py/llama_cpp "$WORK/py/" && mkdir -p "$WORK/py/llama_cpp/lib"
find "$WORK/build" -name "*.so*" -exec cp -a {} "$WORK/py/llama_cpp/lib/" \;
export PYTHONPATH="$WORK/py:$WORK/site:$REPO"
export LD_LIBRARY_PATH="$WORK/py/llama_cpp/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export PYTHONUNBUFFERED=1

# On the device image, loading libggml-cuda after numpy has been imported segfaults inside
# llama_model_load_from_file (seen 2026-11-30; numpy 2.5 of the image's torch venv). Loading
# llama_cpp first avoids it, so every measurement runs through this wrapper.
script() { python3 -X faulthandler -c "import llama_cpp, runpy, sys; sys.argv = sys.argv[1:]; \
  runpy.run_path(sys.argv[0], run_name='__main__')" "$@"; }
costs() { script research/gpu/costs.py "$@"; }

if [ "$MODE" = pipeline ]; then
  log "smoke test on tiny controlled models"
  python3 research/gpu/make_models.py --vocab .gpu/qwen-vocab.gguf --out "$MODELS/small" --small \
    --acceptance 0.9
  script research/gpu/pipelined.py --target "$MODELS/small/target-small.f16.gguf" \
    --draft "0.9=$MODELS/small/draft-small-a0.9.f16.gguf" -n 32 --repeats 1 --temperature 0
  log "controlled-acceptance models (written since the build started)"
  wait "$MAKING" || { tail -20 "$OUT/models.log"; exit 1; }
  tee -a "$OUT/steps.log" < "$OUT/models.log"
  log "chain against pipelined, a = 0.95 and 0.8, greedy and sampled"
  script research/gpu/pipelined.py --target "$MODELS/target-7b.f16.gguf" \
    --draft "0.95=$MODELS/draft-0.5b-a0.95.f16.gguf" --draft "0.8=$MODELS/draft-0.5b-a0.8.f16.gguf" \
    --repeats 2 --json "$OUT/pipelined.json" | tee "$OUT/pipelined.md"
  if [ "$(elapsed)" -lt 480 ]; then  # about 60 s; the call's limit is 600 s
    log "a = 0.6, greedy"
    script research/gpu/pipelined.py --target "$MODELS/target-7b.f16.gguf" \
      --draft "0.6=$MODELS/draft-0.5b-a0.6.f16.gguf" --temperature 0 \
      --repeats 2 --json "$OUT/pipelined-0.6.json" | tee -a "$OUT/pipelined.md"
  fi
  log "done"
  exit 0
fi
log "smoke test on tiny models"
python3 research/gpu/make_models.py --vocab .gpu/qwen-vocab.gguf --out "$MODELS/small" --small
costs --target "$MODELS/small/target-small.f16.gguf" \
  --draft "$MODELS/small/draft-small.f16.gguf" --reps 3 2>&1 | tail -30
log "models"
python3 research/gpu/make_models.py --vocab .gpu/qwen-vocab.gguf --out "$MODELS" | tee -a "$OUT/steps.log"
TARGETS=(--target "$MODELS/target-7b.f16.gguf")
if [ -z "${SKIP_QUANT:-}" ] && [ "$(elapsed)" -lt 330 ]; then
  log "quantize target to Q4_K_M"
  python3 research/gpu/quantize.py "$MODELS/target-7b.f16.gguf" "$MODELS/target-7b.q4_k_m.gguf" \
    && TARGETS+=(--target "$MODELS/target-7b.q4_k_m.gguf")
fi
log "measure"
costs "${TARGETS[@]}" --draft "$MODELS/draft-0.5b.f16.gguf" \
  --json "$OUT/gpu_costs.json" | tee "$OUT/costs.md"
log "done"
