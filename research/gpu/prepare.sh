#!/usr/bin/env bash
# Prepare .gpu/ (git-ignored) for research/gpu/run.sh and mtp.sh on a machine with no network:
# llama.cpp's sources as llama-cpp-python vendors them (without docs, models, tests and other
# backends), the package's Python bindings, Qwen2.5's tokenizer as a vocabulary-only GGUF, and
# the wheels the device lacks. Run from the repository root, with the project's venv active.
set -euo pipefail
VERSION=$(python -c "import llama_cpp; print(llama_cpp.__version__)")
TMP=$(mktemp -d)
pip download -q --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$TMP"
tar xzf "$TMP"/llama_cpp_python-*.tar.gz -C "$TMP"
SDIST=$(echo "$TMP"/llama_cpp_python-*/)
SRC=$SDIST/vendor/llama.cpp
rm -rf .gpu && mkdir -p .gpu/whl "$TMP/pack/llama.cpp/ggml/src" "$TMP/pack/llama.cpp/tools" .gpu/py
cp -r "$SRC"/{CMakeLists.txt,cmake,src,include,vendor,common,LICENSE} "$TMP/pack/llama.cpp/"
cp -r "$SRC"/ggml/{CMakeLists.txt,cmake,include} "$TMP/pack/llama.cpp/ggml/"
cp "$SRC"/ggml/src/*.{c,cpp,h,in} "$SRC"/ggml/src/CMakeLists.txt "$TMP/pack/llama.cpp/ggml/src/"
cp -r "$SRC"/ggml/src/{ggml-cpu,ggml-cuda} "$TMP/pack/llama.cpp/ggml/src/"
cp -r "$SRC"/tools/{CMakeLists.txt,mtmd} "$TMP/pack/llama.cpp/tools/"
# For research/gpu/mtp.sh (LLAMA_BUILD_COMMON and LLAMA_BUILD_EXAMPLES on): llama-speculative-simple
# alone, without the other examples and proofs of concept. run.sh builds with both off and
# never reads these folders.
mkdir -p "$TMP/pack/llama.cpp/examples" "$TMP/pack/llama.cpp/pocs"
cp -r "$SRC"/examples/speculative-simple "$TMP/pack/llama.cpp/examples/"
printf 'find_package(Threads REQUIRED)\nllama_add_compile_flags()\nadd_subdirectory(%s)\n' \
  speculative-simple > "$TMP/pack/llama.cpp/examples/CMakeLists.txt"
: > "$TMP/pack/llama.cpp/pocs/CMakeLists.txt"
tar czf .gpu/llama.cpp.tgz -C "$TMP/pack" llama.cpp
cp -r "$SDIST/llama_cpp" .gpu/py/ && rm -rf .gpu/py/llama_cpp/server
pip download -q --no-deps -d .gpu/whl gguf==0.19.0 diskcache==5.6.3
python - <<'PY'
import gguf
from specllama.models.catalog import load_catalog
from specllama.models.hub import ensure_model
source = ensure_model(load_catalog().model("qwen2.5-coder-0.5b-instruct-q4_k_m"))
reader = gguf.GGUFReader(source)
writer = gguf.GGUFWriter(".gpu/qwen-vocab.gguf", "qwen2")
for field in reader.fields.values():
    if field.name.startswith("tokenizer."):
        sub = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), field.types[0], sub_type=sub)
writer.write_header_to_file()
writer.write_kv_data_to_file()
writer.write_ti_data_to_file()
writer.close()
PY
rm -rf "$TMP"
du -sh .gpu
