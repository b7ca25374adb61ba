#!/usr/bin/env python3
"""The target on an RPC worker, with added network latency: research/RESULTS.md's section "The
target on an RPC worker".

    python research/rpc_latency.py                     # all local, worker, worker + 1 ms, + 5 ms
    python research/rpc_latency.py --delays 0,2,10 -- --repeats 3   # after --: `specllama bench`

One `specllama worker --cpu` on a localhost port holds the target. For each added round-trip
delay, a TCP proxy in front of it holds every chunk the client sends for that long before
passing it on (answers pass at once), which is what `tc netem delay` on the client's side of a
link does; it runs in user space because this machine's kernel has no netem. The round trip
through each proxy is measured and printed. Then `specllama bench --rpc PROXY` runs on the
reference pair (the default pair), and once without --rpc (all local). Each bench run is in
research/results/rpc-*.json, the table in research/results/rpc-latency.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROMPTS = ("ce-rename", "ce-fstrings", "qa-tcp", "chat-story")  # copying, and free text
REUSED: list[str] = []  # runs taken from an earlier invocation (--reuse)
# --full: every prompt of the file (the quick default runs one per category).
BENCH_ARGS = ["--full", "--configs", "target,model:3,adaptive", "-n", "48", "--repeats", "2"]


class DelayProxy:
    """localhost:port -> upstream, the client's bytes held `delay_s` each (order kept)."""

    def __init__(self, upstream: tuple[str, int], delay_s: float) -> None:
        self.upstream, self.delay_s = upstream, delay_s
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        threading.Thread(target=self._run, args=(ready,), daemon=True).start()
        ready.wait()

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        ready.set()
        self.loop.run_forever()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        for w in (writer, up_writer):
            w.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await asyncio.gather(
            self._pump(reader, up_writer, self.delay_s), self._pump(up_reader, writer, 0.0)
        )

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay_s: float
    ) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def send() -> None:
            while True:
                due, data = await queue.get()
                if not data:
                    break
                while (wait := due - time.monotonic()) > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()
            writer.close()

        sender = asyncio.ensure_future(send())
        try:
            while data := await reader.read(1 << 20):
                queue.put_nowait((time.monotonic() + delay_s, data))
        except ConnectionError:
            pass
        queue.put_nowait((0.0, b""))
        await sender


def round_trip_ms(delay_s: float | None, samples: int = 200) -> float:
    """Median ping-pong of one byte to an echo server: through a DelayProxy holding the
    client's bytes `delay_s`, or directly (None)."""
    echo = socket.socket()
    echo.bind(("127.0.0.1", 0))
    echo.listen()

    def serve() -> None:
        conn, _ = echo.accept()
        with conn:
            while data := conn.recv(64):
                conn.sendall(data)

    threading.Thread(target=serve, daemon=True).start()
    port = echo.getsockname()[1]
    if delay_s is not None:
        port = DelayProxy(("127.0.0.1", port), delay_s).port
    times = []
    with socket.create_connection(("127.0.0.1", port)) as client:
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(samples):
            started = time.perf_counter()
            client.sendall(b"x")
            client.recv(1)
            times.append(time.perf_counter() - started)
    return 1000 * statistics.median(times)


def start_worker(port: int, threads: int) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "specllama", "worker", "--cpu", "--port", str(port)]
    command += ["--threads", str(threads)]
    worker = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    assert worker.stderr is not None
    for line in worker.stderr:
        print(line, end="", file=sys.stderr)
        if "Ctrl-C" in line:  # the banner's last line: it listens
            # Keep reading its stderr, so that a full pipe never blocks it.
            threading.Thread(target=worker.stderr.read, daemon=True).start()
            return worker
    raise SystemExit("the worker did not start")


def bench(name: str, rpc: str | None, prompts: Path, extra: list[str], reuse: bool = False) -> dict:
    out = HERE / "results" / f"rpc-{name}.json"
    if reuse and out.exists():
        print(f"== {name}: reusing {out.relative_to(HERE.parent)}", file=sys.stderr)
        REUSED.append(name)
        return json.loads(out.read_text())
    command = [sys.executable, "-m", "specllama", "bench", "--prompts", str(prompts)]
    command += [*BENCH_ARGS, *extra, "--json", str(out)] + (["--rpc", rpc] if rpc else [])
    print(f"\n== {name}: {' '.join(command[2:])}", file=sys.stderr, flush=True)
    started = time.monotonic()
    subprocess.run(command, check=True)
    print(f"== {name}: {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    return json.loads(out.read_text())


def _draft_length(runs: list[dict]) -> str:
    """The adaptive controller's choice: tokens drafted per round that drafted, and the share
    of rounds that drafted at all."""
    drafted = sum(r["n_drafted"] for r in runs)
    draft_rounds = sum(r["n_draft_rounds"] for r in runs)
    rounds = sum(r["n_rounds"] for r in runs)
    if not draft_rounds:
        return "0 (0%)"
    return f"{drafted / draft_rounds:.1f} ({draft_rounds / rounds:.0%})"


def controller_view(report: dict) -> tuple[str, str]:
    """What the adaptive controller makes of this setting's calibration, before any round: its
    best draft-model length at acceptance 0.6 / 0.8 (with the speedup it expects), and the
    lowest acceptance at which drafting with the model pays."""
    from specllama.policy.controller import MODEL, AdaptiveController
    from specllama.policy.costs import Costs

    if not report.get("calibration"):
        return "-", "-"
    controller = AdaptiveController(Costs.from_dict(report["calibration"]))
    best = [controller.best_length(MODEL, a) for a in (0.6, 0.8)]
    table = controller.table(MODEL)
    even = table.break_even(1 / controller.live.plain())
    lengths = " / ".join(f"{k} ({speedup:.2f}x)" for k, speedup in best)
    return lengths, "-" if even is None else f"{even:.2f}"


def summary(name: str, rtt: str, report: dict, local_target: float) -> dict[str, str]:
    rows = {r["config"]: r for r in report["summary"] if r["category"] == "all"}
    adaptive = [r for r in report["runs"] if r["config"] == "adaptive"]
    verify = (report.get("calibration") or {}).get("verify_s", {})
    target = rows["target"]["tokens_per_s"]["median"]
    cells = {
        "setting": name,
        "round trip ms": rtt,
        "verify 1 / 8 tokens ms": (
            f"{1000 * verify['1']:.1f} / {1000 * verify['8']:.1f}" if verify else "-"
        ),
        "target tok/s": f"{target:.1f}"
        + ("" if name == "all local" else f" ({target / local_target:.2f}x)"),
    }
    for config in ("model:3", "adaptive"):
        row = rows[config]
        speed, speedup = row["tokens_per_s"]["median"], row["speedup"]["median"]
        cells[f"{config} tok/s (speedup)"] = f"{speed:.1f} ({speedup:.2f}x)"
    best, even = controller_view(report)
    cells["best draft-model k at acceptance 0.6 / 0.8 (expected)"] = best
    cells["drafting pays from acceptance"] = even
    for label, prefixes in (("copying", ("code-editing",)), ("free text", ("qa", "chat"))):
        runs = [r for r in adaptive if r["category"].startswith(prefixes)]
        cells[f"adaptive drafts/round, {label}"] = _draft_length(runs)
    return cells


def markdown(rows: list[dict[str, str]]) -> str:
    header = list(rows[0])
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    lines += ["| " + " | ".join(row[h] for h in header) + " |" for row in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--delays", default="1,5", help="round trips added by the proxy, ms (comma-separated)"
    )
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="take the runs whose JSON is in research/results/ from there (none: only the table)",
    )
    parser.add_argument("bench_args", nargs="*", help="after --: more `specllama bench` options")
    args = parser.parse_args()
    bundled = Path(__file__).resolve().parents[1] / "specllama" / "data" / "bench_prompts.jsonl"
    lines = bundled.read_text().splitlines()
    chosen = [line for line in lines if json.loads(line)["id"] in PROMPTS]
    prompts = Path(tempfile.mkdtemp()) / "prompts.jsonl"
    prompts.write_text("\n".join(chosen) + "\n")
    extra = ["--threads", str(args.threads), *args.bench_args]

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    local = bench("local", None, prompts, extra, args.reuse)
    local_target = {r["config"]: r for r in local["summary"] if r["category"] == "all"}
    local_target = local_target["target"]["tokens_per_s"]["median"]
    rows = [summary("all local", "-", local, local_target)]
    worker = start_worker(port, args.threads)
    try:
        direct = bench("worker", f"127.0.0.1:{port}", prompts, extra, args.reuse)
        rows.append(summary("worker", f"{round_trip_ms(None):.2f}", direct, local_target))
        for delay in (float(d) for d in args.delays.split(",")):
            proxy = DelayProxy(("127.0.0.1", port), delay / 1000)
            rtt = f"{round_trip_ms(delay / 1000):.2f}"
            name = f"worker-{delay:g}ms"
            report = bench(name, f"127.0.0.1:{proxy.port}", prompts, extra, args.reuse)
            rows.append(summary(f"worker, proxy +{delay:g} ms", rtt, report, local_target))
    finally:
        worker.terminate()
        worker.wait(30)
    table = markdown(rows)
    command = " ".join(["python", "research/rpc_latency.py", *sys.argv[1:]])
    (HERE / "results" / "rpc-latency.json").write_text(
        json.dumps(
            {
                "command": command,
                "prompts": list(PROMPTS),
                "bench_args": BENCH_ARGS + extra,
                "wall_s": round(time.monotonic() - started),
                "reused": REUSED,
                "rows": rows,
            },
            indent=2,
        )
        + "\n"
    )
    print("\n" + table)


if __name__ == "__main__":
    main()
