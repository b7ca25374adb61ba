"""Where does a batch change the numbers? Tensor-by-tensor, batch of k vs one token at a time.

Issue 43, item 1. llama.cpp's logits for a token verified inside a batch of k differ from the
same token decoded alone. This script finds the first operation of the target's graph whose
output for the same position differs, on any GGUF file, on this machine's CPU backend.

It compiles the small C++ helper beside it (research/batch_invariance.cpp, against the
llama.cpp libraries of the venv's llama-cpp-python and the vendored headers) into /tmp, and runs
it once. The helper decodes a prompt of P tokens, then (a) the next k tokens in ONE batch, then
removes those cells (llama_memory_seq_rm) and (b) decodes the same k tokens one at a time (or in
chunks of -c), recording every node of every graph through llama.cpp's eval callback
(cb_eval), and finally repeats (a) and (b) on a context without the callback (so the graph runs
as in production, ops fused) for the logits alone. This script then matches the nodes of the
two runs in graph order, slices out the position's row along the token dimension (the one
dimension whose size is k in the batch and the chunk width alone) and prints, per node, the
max abs difference at the first position of the batch (whose KV history is identical in both
runs: a clean per-op test) and at the last position (what verification sees), and names the
first node that differs.

Run (wrap it in `flock /tmp/cpu.lock` on the shared 2-core machine):

    python research/batch_invariance.py --model FILE.gguf [-k 13] [-p 32] [-c 1] [-t 2]
        [--no-repack] [--fa on|off|auto] [--env GGML_CPU_TILED_MM=0] [--all] [--logits-only]

--no-repack loads the model with use_extra_bufts = false (no CPU_REPACK weights); --env passes
environment settings to the helper (e.g. GGML_CPU_TILED_MM=0 switches off ggml-cpu's tiled
K-quant matmul; LD_LIBRARY_PATH=DIR loads another build's libggml-cpu.so, e.g. one built with
-DGGML_LLAMAFILE=OFF); --all prints every compared node (default: the first 14 that differ,
the nodes that differ with identical inputs, and each layer's output).
"""

from __future__ import annotations

import argparse
import os
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
VENDOR = Path("/tmp/llamacpp/llama_cpp_python-0.3.36/vendor/llama.cpp")
HELPER = Path("/tmp/bi/batch_invariance")
LOGITS_NODE = 0xFFFFFFFF


def venv_lib_dir() -> Path:
    import llama_cpp

    return Path(llama_cpp.__file__).resolve().parent / "lib"


def build_helper() -> Path:
    src = HERE / "batch_invariance.cpp"
    if HELPER.exists() and HELPER.stat().st_mtime >= src.stat().st_mtime:
        return HELPER
    HELPER.parent.mkdir(parents=True, exist_ok=True)
    lib = venv_lib_dir()
    cmd = [
        "g++",
        "-O2",
        "-std=c++17",
        f"-I{VENDOR / 'include'}",
        f"-I{VENDOR / 'ggml' / 'include'}",
        str(src),
        "-o",
        str(HELPER),
        f"-L{lib}",
        "-lllama",
        "-lggml",
        "-lggml-base",
        "-lggml-cpu",
        f"-Wl,-rpath,{lib}",
    ]
    subprocess.run(cmd, check=True)
    return HELPER


@dataclass
class Rec:
    run: int
    chunk: int
    node: int
    op: str
    name: str
    ne: tuple[int, int, int, int]
    src: tuple[int, int, int, int]
    data: np.ndarray


def read_records(path: Path) -> list[Rec]:
    raw = path.read_bytes()
    off = 0
    out: list[Rec] = []
    while off < len(raw):
        run, chunk, node, op_len = struct.unpack_from("<4I", raw, off)
        off += 16
        op = raw[off : off + op_len].decode()
        off += op_len
        (name_len,) = struct.unpack_from("<I", raw, off)
        off += 4
        name = raw[off : off + name_len].decode(errors="replace")
        off += name_len
        ne = struct.unpack_from("<4q", raw, off)
        off += 32
        src = struct.unpack_from("<4i", raw, off)
        off += 16
        (n,) = struct.unpack_from("<Q", raw, off)
        off += 8
        data = np.frombuffer(raw, dtype=np.float32, count=n, offset=off)
        off += 4 * n
        out.append(Rec(run, chunk, node, op, name, ne, src, data))
    return out


def token_slice(rec: Rec, dim: int, index: int) -> np.ndarray:
    """The rows of `rec` at `index` along ggml dimension `dim` (ne0 is fastest)."""
    arr = rec.data.reshape(tuple(reversed(rec.ne)))  # numpy axes: ne3, ne2, ne1, ne0
    return np.take(arr, index, axis=3 - dim)


def token_dim(ne_b, ne_a, k: int, width: int) -> int | None:
    diff = [d for d in range(4) if ne_b[d] != ne_a[d]]
    if len(diff) == 1 and ne_b[diff[0]] == k and ne_a[diff[0]] == width:
        return diff[0]
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("-k", type=int, default=13)
    ap.add_argument("-p", type=int, default=32, help="prompt tokens before the batch")
    ap.add_argument("-c", type=int, default=1, help="chunk width of the comparison run")
    ap.add_argument("-t", type=int, default=2, help="threads")
    ap.add_argument("--no-repack", action="store_true")
    ap.add_argument("--fa", choices=["on", "off", "auto"], default="auto")
    ap.add_argument("--env", action="append", default=[], help="NAME=VALUE for the helper")
    ap.add_argument("--all", action="store_true", help="print every node")
    ap.add_argument("--logits-only", action="store_true", help="skip the traced pass")
    ap.add_argument("--out", default="/tmp/bi/trace.bin")
    args = ap.parse_args()
    if args.c >= args.k:
        ap.error("-c must be smaller than -k")

    helper = build_helper()
    cmd = [str(helper), args.model, args.out, "-k", str(args.k), "-p", str(args.p)]
    cmd += ["-c", str(args.c), "-t", str(args.t), "--fa", args.fa]
    if args.no_repack:
        cmd.append("--no-repack")
    if args.logits_only:
        cmd.append("--no-trace")
    env = dict(os.environ)
    for kv in args.env:
        name, _, value = kv.partition("=")
        env[name] = value
    res = subprocess.run(cmd, env=env, capture_output=True, text=True)
    sys.stdout.write(res.stdout)
    if res.returncode != 0:
        sys.stderr.write(res.stderr)
        return res.returncode
    if args.env:
        print("env:", " ".join(args.env))

    recs = read_records(Path(args.out))
    k, c = args.k, args.c
    last = k - 1

    # production logits (no callback): runs 2 (batch) and 3 (chunked)
    def logits_of(run: int) -> list[np.ndarray]:
        return [r.data for r in recs if r.run == run and r.node > LOGITS_NODE - 64]

    for label, rb, rc in (("production (no callback)", 2, 3), ("traced", 0, 1)):
        lb, lc = logits_of(rb), logits_of(rc)
        if len(lb) == k and len(lc) == k:
            per = [float(np.max(np.abs(lb[j] - lc[j]))) for j in range(k)]
            same = sum(int(np.argmax(lb[j]) == np.argmax(lc[j])) for j in range(k))
            print(
                f"logits max|diff| {label}: pos0 {per[0]:.3g}  last {per[last]:.3g}  "
                f"max {max(per):.3g}  argmax equal {same}/{k}"
            )
            print("  per position: " + " ".join(f"{v:.2g}" for v in per))
    if args.logits_only:
        return 0

    batch = [r for r in recs if r.run == 0 and r.node < LOGITS_NODE - 64]
    chunks: dict[int, list[Rec]] = {}
    for r in recs:
        if r.run == 1 and r.node < LOGITS_NODE - 64:
            chunks.setdefault(r.chunk, []).append(r)
    first_chunk, last_chunk = chunks[0], chunks[last // c]

    n = min(len(batch), len(first_chunk), len(last_chunk))
    diffs: dict[int, tuple[float, float]] = {}  # node -> (pos0, last); absent: not comparable
    for i in range(n):
        b, a0, al = batch[i], first_chunk[i], last_chunk[i]
        if b.name != a0.name or b.op != a0.op:
            print(f"graphs part at node {i}: batch {b.name}/{b.op} vs alone {a0.name}/{a0.op}")
            n = i
            break
        if b.data.size == 0 or a0.data.size == 0 or al.data.size == 0:
            continue
        d = token_dim(b.ne, a0.ne, k, min(c, k))
        dl = token_dim(b.ne, al.ne, k, k - (last // c) * c)
        if d is None or dl is None:
            continue  # no token dimension: KV cache views, shape mismatch
        v0 = float(np.max(np.abs(token_slice(b, d, 0) - token_slice(a0, d, 0))))
        vl = float(np.max(np.abs(token_slice(b, dl, last) - token_slice(al, dl, last % c))))
        diffs[i] = (v0, vl)

    def origin(i: int) -> str:
        """'yes' when node i differs at pos0 though every compared input is identical there."""
        if diffs[i][0] == 0:
            return ""
        unknown = False
        for s in batch[i].src:
            if s >= 0 and s in diffs:
                if diffs[s][0] != 0:
                    return ""
            elif s >= 0 or s == -2:
                unknown = True  # reads a node without a token dimension (a KV cache view)
        return "yes?" if unknown else "yes"

    def row(i: int) -> str:
        b = batch[i]
        shape = "x".join(str(x) for x in b.ne)
        v0, vl = diffs[i]
        return (
            f"{i:5d} {b.name[:26]:26} {b.op[:14]:14} {shape:18} {v0:10.3g} {vl:10.3g}  {origin(i)}"
        )

    head = (
        f"{'node':>5} {'name':26} {'op':14} {'shape (batch)':18} {'pos0':>10} {'last':>10}  origin"
    )
    differing = [i for i in sorted(diffs) if diffs[i][0] > 0 or diffs[i][1] > 0]
    print("\nmax|batch - alone| per node (pos0: first position of the batch, last: position k-1)")
    print(head)
    shown = set()
    if args.all:
        for i in sorted(diffs):
            print(row(i))
    else:
        for i in differing[:14]:
            print(row(i))
            shown.add(i)
        origins = [i for i in differing if origin(i) and i not in shown]
        if origins:
            print("... further nodes that differ at pos0 with identical compared inputs:")
            for i in origins[:20]:
                print(row(i))
        print("... layer outputs and the head:")
        for i in sorted(diffs):
            name = batch[i].name
            if (
                name.startswith("l_out-") or name in ("result_norm", "result_output")
            ) and i not in shown:
                print(row(i))
    print()
    for j, label in ((0, "first position"), (1, "last position")):
        hit = next((i for i in sorted(diffs) if diffs[i][j] > 0), None)
        if hit is None:
            print(f"{label}: every compared node identical")
        else:
            b = batch[hit]
            print(
                f"{label}: first differing node #{hit} {b.name} ({b.op}), "
                f"max|diff| {diffs[hit][j]:.3g}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
