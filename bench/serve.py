"""Serving throughput: ``microformers serve`` vs ``transformers serve``, same float32 SmolLM2 weights.

    .venv/bin/python bench/serve.py [--clients 1 4 16] [--new-tokens 128] [--servers microformers transformers]
    .venv/bin/python bench/serve.py --quick          # 1 and 4 clients, 32 new tokens, microformers only

Each server runs in its own process on a local port (``microformers serve FOLDER`` and
``transformers serve FOLDER --device cpu --continuous-batching``); both stay up and the client
counts are interleaved between them (ours N, reference N, ours next N, ...), so drifting machine
load hits both alike. For each client count N, N clients each send one streamed greedy chat request
at the same moment (distinct prompts asking for long answers, ``max_tokens`` = new tokens) and read
the SSE stream:

* aggregate tokens/s = completion tokens of all N requests / wall time from the first send to the
  last ``[DONE]`` (tokens counted from ``usage`` where the server sends it, else content chunks);
* TTFT = time from a request's send to its first content chunk (median over the N requests);
* latency p50 / p95 = per-request time to ``[DONE]``;
* tokens per CPU-second = the same tokens / the server process's user+system CPU time over the
  level: on a machine shared with other work this, with ``--threads 1``, is the stable measure of
  how much work each token costs (wall time then depends on what else runs).

The answers to the same prompt are compared across client counts (a batched answer should equal
the single-client one) and between the two servers. Both servers get the same thread setting
(``--threads``, passed as ``OMP_NUM_THREADS``; default: torch's). The machine load (``uptime``) is
printed with the numbers: other work on the machine changes them.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common

REPO = Path(__file__).resolve().parents[1]
TOPICS = [
    "a dragon who learns to bake bread", "the history of the bicycle", "a journey to the bottom of the sea",
    "how a city wakes up in the morning", "a robot that wants to become a gardener", "the life of a honeybee",
    "a lighthouse keeper and a storm", "the invention of paper", "a cat who runs a small hotel",
    "how rivers shape valleys", "a detective who solves puzzles with music", "the first day at a new school",
    "a mountain village in winter", "how bridges are built", "a friendship between a whale and a seagull",
    "the secret life of libraries",
]  # fmt: skip


def prompt(i: int) -> str:
    return f"Write a long, detailed story about {TOPICS[i % len(TOPICS)]}. Use at least five paragraphs."


def serve_folder() -> Path:
    """The float32 SmolLM2 folder of the other benchmarks, plus tokenizer files (written by microformers)."""
    source = common.model_folder("smollm2")
    folder = common.BENCH_DIR / "smollm2-135m-f32-serve"
    if not (folder / "tokenizer.json").is_file():
        import microformers

        staging = folder.with_name(folder.name + ".tmp")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        for item in source.iterdir():
            if item.name != "chat_template.jinja":
                os.link(item, staging / item.name) if item.stat().st_dev == staging.stat().st_dev else shutil.copy(item, staging)
        microformers.AutoTokenizer.from_pretrained("smollm2-135m-instruct").save_pretrained(staging)
        shutil.rmtree(folder, ignore_errors=True)
        staging.rename(folder)
    return folder


class Server:
    def __init__(self, kind: str, folder: Path, port: int, threads: int | None, max_batch: int) -> None:
        self.kind, self.port, self.folder = kind, port, folder
        env = dict(os.environ)
        if threads:
            env["OMP_NUM_THREADS"] = str(threads)
        if kind == "microformers":
            command = [sys.executable, "-m", "microformers.cli", "serve", str(folder), "--port", str(port),
                       "--max-batch-size", str(max_batch)]  # fmt: skip
            self.model = str(folder)
        else:
            exe = Path(sys.executable).with_name("transformers")
            command = [str(exe), "serve", str(folder), "--port", str(port), "--device", "cpu", "--continuous-batching",
                       "--dtype", "float32"]  # fmt: skip
            env["HF_HUB_OFFLINE"] = "1"
            self.model = str(folder)
        self.log = open(common.BENCH_DIR / f"serve-{kind}.log", "w")
        started = time.perf_counter()
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        self.wait_ready()
        self.startup_s = time.perf_counter() - started

    def wait_ready(self, timeout: float = 600) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.kind} serve exited; see {self.log.name}")
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"{self.kind} serve did not start within {timeout} s")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux ``/proc``), the measure that survives a busy machine."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_request(server: Server, index: int, new_tokens: int, start: float) -> dict[str, Any]:
    import httpx

    body = {
        "model": server.model, "messages": [{"role": "user", "content": prompt(index)}], "max_tokens": new_tokens,
        "temperature": 0, "stream": True, "stream_options": {"include_usage": True},
    }  # fmt: skip
    sent = time.perf_counter()
    first = None
    pieces: list[str] = []
    usage = None
    with httpx.stream("POST", f"http://127.0.0.1:{server.port}/v1/chat/completions", json=body, timeout=3600) as r:
        if r.status_code != 200:
            raise RuntimeError(f"{server.kind}: HTTP {r.status_code}: {r.read()[:300]!r}")
        for line in r.iter_lines():
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data.strip() == "[DONE]":
                break
            chunk = json.loads(data)
            if chunk.get("usage"):
                usage = chunk["usage"]
            for choice in chunk.get("choices") or []:
                text = (choice.get("delta") or {}).get("content")
                if text:
                    first = first or time.perf_counter()
                    pieces.append(text)
    done = time.perf_counter()
    tokens = usage["completion_tokens"] if usage else len(pieces)
    return {"ttft": (first or done) - sent, "latency": done - sent, "tokens": tokens, "text": "".join(pieces),
            "end": done - start, "counted": "usage" if usage else "chunks"}  # fmt: skip


def run_level(server: Server, clients: int, new_tokens: int) -> dict[str, Any]:
    cpu = cpu_seconds(server.process.pid)
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(lambda i: one_request(server, i, new_tokens, start), range(clients)))
    wall = time.perf_counter() - start
    cpu = cpu_seconds(server.process.pid) - cpu
    tokens = sum(r["tokens"] for r in results)
    latencies = sorted(r["latency"] for r in results)
    return {
        "clients": clients, "tokens": tokens, "wall_s": wall, "tok_s": tokens / wall, "cpu_s": cpu,
        "tok_cpu_s": tokens / max(cpu, 1e-9), "load": common.load_average(),
        "ttft_s": statistics.median(r["ttft"] for r in results),
        "p50_s": statistics.median(latencies), "p95_s": latencies[min(len(latencies) - 1, round(0.95 * (len(latencies) - 1)))],
        "texts": [r["text"] for r in results], "counted": results[0]["counted"],
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, nargs="+", default=None, help="client counts (default 1 4 16)")
    parser.add_argument("--new-tokens", type=int, default=None, help="max_tokens per request (default 128)")
    parser.add_argument("--servers", nargs="+", choices=["microformers", "transformers"], default=None)
    parser.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS for both servers (default: unset)")
    parser.add_argument("--max-batch-size", type=int, default=16, help="microformers --max-batch-size")
    parser.add_argument("--quick", action="store_true", help="1 and 4 clients, 32 new tokens, microformers only")
    args = parser.parse_args()
    clients = args.clients or ([1, 4] if args.quick else [1, 4, 16])
    new_tokens = args.new_tokens or (32 if args.quick else 128)
    servers = args.servers or (["microformers"] if args.quick else ["microformers", "transformers"])
    folder = serve_folder()
    print(f"model: {folder} (float32); clients {clients}; {new_tokens} new tokens; threads {args.threads or 'default'}")
    print(f"load before: {common.load_average()}")
    report: dict[str, Any] = {}
    running: dict[str, Server] = {}
    for offset, kind in enumerate(servers):
        try:
            running[kind] = Server(kind, folder, 18000 + os.getpid() % 1000 + offset, args.threads, args.max_batch_size)
            run_level(running[kind], 1, 8)  # warm-up
        except Exception as exc:  # report and go on: the reference may not run here
            print(f"{kind}: could not start: {exc}")
            report[kind] = {"error": str(exc)}
            if kind in running:
                running.pop(kind).stop()
    # Levels interleaved between the servers (both stay up), so load drift hits both alike.
    levels: dict[str, list[dict[str, Any]]] = {kind: [] for kind in running}
    try:
        for n in clients:
            for kind, server in running.items():
                levels[kind].append(run_level(server, n, new_tokens))
                level = levels[kind][-1]
                print(f"  {kind} {n} clients: {level['tok_s']:.1f} tok/s, {level['tok_cpu_s']:.1f} tok/CPU-s (load {level['load']})", flush=True)
    finally:
        for server in running.values():
            server.stop()
    for kind, server in running.items():
        report[kind] = {"startup_s": server.startup_s, "levels": levels[kind]}
        print(f"\n== {kind} serve (startup {server.startup_s:.1f} s)")
        print(f"{'clients':>7} {'tokens':>7} {'wall s':>7} {'tok/s':>7} {'x 1':>6} {'tok/CPU-s':>9} {'x 1':>6} {'TTFT s':>7} {'p50 s':>7} {'p95 s':>7}")
        base, base_cpu = levels[kind][0]["tok_s"], levels[kind][0]["tok_cpu_s"]
        for level in levels[kind]:
            print(f"{level['clients']:>7} {level['tokens']:>7} {level['wall_s']:>7.1f} {level['tok_s']:>7.1f} "
                  f"{level['tok_s'] / base:>6.2f} {level['tok_cpu_s']:>9.1f} {level['tok_cpu_s'] / base_cpu:>6.2f} "
                  f"{level['ttft_s']:>7.2f} {level['p50_s']:>7.1f} {level['p95_s']:>7.1f}")  # fmt: skip
        same = all(
            level["texts"][i] == other["texts"][i]
            for level in levels[kind] for other in levels[kind]
            for i in range(min(len(level["texts"]), len(other["texts"])))
        )  # fmt: skip
        print(f"answers to the same prompt identical at every client count: {same} (tokens counted from {levels[kind][0]['counted']})")
    ok = [k for k in servers if "levels" in report.get(k, {})]
    if len(ok) == 2:
        ours, ref = (report[k]["levels"] for k in ok)
        print("\n== microformers / transformers")
        for a, b in zip(ours, ref, strict=True):
            agree = sum(x == y for x, y in zip(a["texts"], b["texts"], strict=True))
            print(f"{a['clients']:>3} clients: tok/s {a['tok_s'] / b['tok_s']:.2f}x, tok/CPU-s {a['tok_cpu_s'] / b['tok_cpu_s']:.2f}x, "
                  f"TTFT {b['ttft_s'] / max(a['ttft_s'], 1e-9):.2f}x faster, identical answers {agree}/{a['clients']}")  # fmt: skip
    print(f"load after: {common.load_average()}")
    for entry in report.values():
        for level in entry.get("levels", []):
            level.pop("texts", None)
    common.write_json("serve", report)


if __name__ == "__main__":
    main()
