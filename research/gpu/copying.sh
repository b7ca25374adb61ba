#!/usr/bin/env bash
# One device call (issue 33): copying at acceptance near 1, where a GPU's cheap batches make
# drafts of 32-64 pay. specllama's n-gram lookup (fixed at 4-64, the adaptive default, and a
# request repeated in one Engine, drafting from its memory) against llama.cpp's ngram-simple
# and ngram-mod, greedy, on a Qwen2.5-7B-shaped F16 synthetic bigram target whose answer copies
# its prompt (research/gpu/copying.py says what runs and how it is counted).
#
#   bash research/gpu/copying.sh        on the GPU machine: builds llama.cpp with CUDA (the
#                                       libraries and llama-speculative-simple; a warm machine's
#                                       build, this script's or mtp.sh's, is reused), writes the
#                                       model into /dev/shm during the build, measures, prints
#                                       the table last
#   bash research/gpu/copying.sh --cpu  the dry run, here: checks that the packed sources
#                                       configure with the GPU run's options and compile the
#                                       tool's source, writes a tiny model, and measures it on
#                                       the CPU through the installed llama-cpp-python and a
#                                       CPU build of llama.cpp ($LLAMA_BIN, default
#                                       /tmp/llama-build/bin); with the project's venv active
#
# Needs .gpu/ prepared by research/gpu/prepare.sh (carry it). Writes steps.log, the build's and
# each step's logs, copying.json and copying.md under $OUT. Environment: TOKENS (256; the dry
# run 48), REPEATS (2; 1), PROMPT_TOKENS (600), BUDGET (480: no round is begun after this
# many seconds of the call).
set -euo pipefail
CPU=0
[ "${1:-}" = --cpu ] && CPU=1
OUT=${OUT:-/tmp/out}
MODE=copying
. "$(dirname "$0")/lib.sh"
device_begin
if [ "$CPU" = 1 ]; then
  SHAPE=tiny
  TOKENS=${TOKENS:-48}
  REPEATS=${REPEATS:-1}
  PROMPT_TOKENS=${PROMPT_TOKENS:-600}
  MODELS=$LLAMA_WORK/models
else
  SHAPE=7b
  TOKENS=${TOKENS:-256}
  REPEATS=${REPEATS:-2}
  PROMPT_TOKENS=${PROMPT_TOKENS:-600}
  device_models_in /dev/shm/specllama-copying 20  # 15 GB, in memory when /dev/shm has room
fi
BUDGET=${BUDGET:-480}
log "mode $([ "$CPU" = 1 ] && echo cpu || echo gpu), model in $MODELS"
device_unpack

# The model: numpy and gguf only (no llama_cpp: it is not built yet), beside the build.
if python3 - "$MODELS/state.json" "$SHAPE" <<'PY' 2>/dev/null
import json, sys
sys.exit(0 if json.load(open(sys.argv[1]))["shape"] == sys.argv[2] else 1)
PY
then
  log "model already written: $(tr -d '\n' < "$MODELS/state.json" | cut -c1-160)"
else
  log "writing the $SHAPE model, in the background"
  PYTHONPATH="$SITE:${PYTHONPATH:-}" python3 research/gpu/copying.py write \
    --vocab .gpu/qwen-vocab.gguf --out "$MODELS" --shape "$SHAPE" > "$OUT/models.log" 2>&1 &
  WRITING=$!
fi

device_build
device_wait_models
device_python

LEFT=$(( BUDGET - $(elapsed) ))
log "measure: $TOKENS tokens, $REPEATS rounds, no round begun after ${BUDGET}s (${LEFT}s from now)"
RC=0
device_script research/gpu/copying.py measure --models "$MODELS" --llama-bin "$LLAMA_BIN" \
  "${OFFLOAD[@]}" -n "$TOKENS" --repeats "$REPEATS" --prompt-tokens "$PROMPT_TOKENS" \
  --stop-after "$LEFT" --json "$OUT/copying.json" --logs "$OUT/logs" \
  > "$OUT/measure.log" 2>&1 || RC=$?
grep -v "^|\|^###\|^tok/s: \|^best: \|^prompt tokens: \|^calibration (\|^$" "$OUT/measure.log" \
  | tail -40 || true
[ "$RC" = 0 ] || log "FAILED: measure exited $RC (the table holds what was measured)"
if [ -f "$OUT/copying.json" ]; then
  python3 research/gpu/copying.py table "$OUT/copying.json" > "$OUT/copying.md"
fi
log "done"
if [ -f "$OUT/copying.md" ]; then cat "$OUT/copying.md"; fi
exit "$RC"
