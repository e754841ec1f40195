"""Serving throughput: ``microformers serve`` vs ``transformers serve``, same float32 SmolLM2 weights.

    .venv/bin/python bench/serve.py [--clients 1 4 16] [--new-tokens 128] [--servers microformers transformers]
    .venv/bin/python bench/serve.py --clients 16 --threads 1     # the figure docs/serving.md records
    .venv/bin/python bench/serve.py --quick          # 1 and 4 clients, 32 new tokens, microformers only
    .venv/bin/python bench/serve.py --servers microformers --quantize int8 --clients 1 2 4 --threads 1
    .venv/bin/python bench/serve.py --servers microformers --quantize int8 --native-rows 0 ...  # batched only
    .venv/bin/python bench/serve.py --servers microformers --native-rows 0 --clients 16 --threads 1  # float, batched

A second anchor, llama.cpp's own server (``python -m llama_cpp.server`` from ``llama-cpp-python[server]``, a
bench-only extra, on the same model's Q4_1 GGUF file), joins when it is importable; otherwise the script says
that it is not installed. Its answers come from other (quantized) weights, so they are not compared. That server
has no parallel slots (one ``Llama`` context, requests served one after another behind a lock); it runs with
``--interrupt_requests False``, since by default each new request cuts the one being served short.

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
  how much work each token costs (wall time then depends on what else runs);
* TTFT CPU-s = the server's CPU time from the level's start to a request's first content chunk
  (median): the work done before a client sees anything, which machine load does not stretch.

The fault row (microformers by default; ``--fault-servers`` picks the servers, none to skip it) runs
the largest client count again while hostile requests arrive alongside: a tiny temperature with
negative penalties (refused) and the least one allowed (served), a 3,000-token prompt (served,
prefilled in chunks between the clients' decoding steps), a prompt over the context, a 4 MB body,
100,000-deep JSON, a 5,000-digit number, huge stop strings, stop strings at the length limit, and a
stop string held back at every step. It reports the clients' aggregate throughput (against the
clean level), how many of their answers equal the clean level's, and each hostile request's status.

The answers to the same prompt are compared across client counts (a batched answer should equal
the single-client one) and between the two servers. Both servers get the same thread setting
(``--threads``, passed as ``OMP_NUM_THREADS``; default: torch's). The machine load (``uptime``) is
printed with the numbers: other work on the machine changes them.

``--quantize int8|int4`` serves our side quantized (``microformers serve --quantize``; the reference stays
float32, so answers are not compared with it) and ``--native-rows N`` passes on when the native decode step
(float32 or quantized) decodes (0: always the batched eager step), for a before/after of that step.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib
import importlib.util
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common

REPO = Path(__file__).resolve().parents[1]
SERVERS = ("microformers", "transformers", "llama.cpp")
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


def serve_folder(kind: str = "smollm2") -> Path:
    """The float32 folder of the other benchmarks (SmolLM2, or its random stand-in), plus SmolLM2's tokenizer files
    (written by microformers)."""
    source = common.model_folder(kind)
    folder = common.BENCH_DIR / f"{source.name}-serve"
    if not (folder / "tokenizer.json").is_file():
        import microformers

        staging = folder.with_name(folder.name + ".tmp")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        for item in source.iterdir():
            if item.name != "chat_template.jinja":
                os.link(item, staging / item.name) if item.stat().st_dev == staging.stat().st_dev else shutil.copy(
                    item, staging
                )
        microformers.AutoTokenizer.from_pretrained("smollm2-135m-instruct").save_pretrained(staging)
        shutil.rmtree(folder, ignore_errors=True)
        staging.rename(folder)
    return folder


def llama_cpp_missing() -> str | None:
    """Why llama.cpp's server cannot run here (``None`` when it can)."""
    if importlib.util.find_spec("llama_cpp") is None:
        return "not installed (pip install 'llama-cpp-python[server]', a bench-only extra)"
    try:
        importlib.import_module("llama_cpp.server")
    except Exception as exc:
        return f"llama_cpp.server does not import: {exc} (pip install 'llama-cpp-python[server]')"
    return None


class Server:
    def __init__(
        self, kind: str, folder: Path, port: int, threads: int | None, max_batch: int, extra: list[str] | None = None
    ) -> None:
        self.kind, self.port, self.folder = kind, port, folder
        self.ready_path = "/health"
        env = dict(os.environ)
        if threads:
            env["OMP_NUM_THREADS"] = str(threads)
        if kind == "microformers":
            command = [sys.executable, "-m", "microformers.cli", "serve", str(folder), "--port", str(port),
                       "--max-batch-size", str(max_batch), *(extra or [])]  # fmt: skip
            self.model = str(folder)
        elif kind == "llama.cpp":
            gguf = common.gguf_folder() / common.GGUF_NAME
            command = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--port", str(port),
                       "--n_ctx", "8192", "--n_threads", str(threads or os.cpu_count() or 1),
                       "--interrupt_requests", "False"]  # fmt: skip
            self.model = gguf.name
            self.ready_path = "/v1/models"
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
                if httpx.get(f"http://127.0.0.1:{self.port}{self.ready_path}", timeout=2).status_code == 200:
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


def one_request(
    server: Server,
    index: int,
    new_tokens: int,
    start: float,
    cpu_start: float = 0.0,
    client: Any = None,
    ready: threading.Barrier | None = None,
) -> dict[str, Any]:
    """One streamed chat request; ``client``: an ``httpx.Client`` made beforehand (making one loads an SSL context,
    30-70 ms of the bench process's CPU: sixteen made at the level's start sent the requests over half a second
    instead of at once); ``ready``: a barrier the level's clients pass together just before sending."""
    import httpx

    body = {
        "model": server.model, "messages": [{"role": "user", "content": prompt(index)}], "max_tokens": new_tokens,
        "temperature": 0, "stream": True, "stream_options": {"include_usage": True},
    }  # fmt: skip
    if ready is not None:
        ready.wait()
    sent = time.perf_counter()
    first = None
    first_cpu = None
    pieces: list[str] = []
    usage = None
    url = f"http://127.0.0.1:{server.port}/v1/chat/completions"
    stream = (
        client.stream("POST", url, json=body)
        if client is not None
        else httpx.stream("POST", url, json=body, timeout=3600)
    )
    with stream as r:
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
                    if first is None:
                        first, first_cpu = time.perf_counter(), cpu_seconds(server.process.pid) - cpu_start
                    pieces.append(text)
    done = time.perf_counter()
    tokens = usage["completion_tokens"] if usage else len(pieces)
    return {"ttft": (first or done) - sent, "latency": done - sent, "tokens": tokens, "text": "".join(pieces),
            "end": done - start, "counted": "usage" if usage else "chunks",
            "ttft_cpu": first_cpu if first_cpu is not None else cpu_seconds(server.process.pid) - cpu_start}  # fmt: skip


def hostile_requests(server: Server, new_tokens: int) -> list[tuple[str, dict[str, Any] | bytes]]:
    """(kind, body) pairs of the kinds tests/robustness/test_serve_robustness.py sends: each must be refused or
    served without changing any other client's answer."""
    chat = {
        "model": server.model,
        "messages": [{"role": "user", "content": "Tell me a story."}],
        "max_tokens": new_tokens,
    }
    raw = json.dumps(chat).encode()[:-1]
    return [
        ("tiny temperature, negative penalties", {**chat, "temperature": 1e-36, "frequency_penalty": -2.0,
                                                  "presence_penalty": -2.0, "seed": 0, "stream": True}),
        ("least temperature, negative penalties", {**chat, "temperature": 1e-3, "frequency_penalty": -2.0,
                                                   "presence_penalty": -2.0, "seed": 1, "stream": True}),
        ("stop strings at the limit (4 x 512 chars)", {**chat, "stop": [c * 512 for c in "abcd"], "stream": True}),
        ("underflowing temperature", {**chat, "temperature": 1e-300}),
        ("long prompt (about 3,000 tokens, read in chunks)", {**chat, "max_tokens": 8, "temperature": 0,
                                                              "messages": [{"role": "user", "content": "word " * 3000}]}),
        ("prompt over the context", {**chat, "messages": [{"role": "user", "content": "word " * 12000}]}),
        ("4 MB prompt", {**chat, "messages": [{"role": "user", "content": "x" * (4 * 2**20)}]}),
        ("100,000-deep JSON", raw + b', "stop": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
        ("5,000-digit number", raw + b', "seed": ' + b"9" * 5000 + b"}"),
        ("huge stop strings", {**chat, "stop": ["z" * 2**20] * 4}),
        ("held-back stop string", {**chat, "stop": ["Once upon a time there was a " * 8], "temperature": 0,
                                   "stream": True}),
    ]  # fmt: skip


def send_hostile(server: Server, kind: str, body: dict[str, Any] | bytes, delay: float) -> tuple[str, str]:
    """Send one hostile request after ``delay`` seconds; returns (kind, what came back)."""
    import httpx

    time.sleep(delay)
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    try:
        with httpx.stream(
            "POST", f"http://127.0.0.1:{server.port}/v1/chat/completions", content=content,
            headers={"content-type": "application/json"}, timeout=600,
        ) as response:  # fmt: skip
            text = b"".join(response.iter_bytes()).decode("utf-8", "replace")
        outcome = str(response.status_code)
        if response.status_code == 200 and '"error"' in text:
            outcome += " (error event)"
        return kind, outcome
    except Exception as exc:
        return kind, f"{type(exc).__name__}"


def guarded_request(
    server: Server,
    index: int,
    new_tokens: int,
    start: float,
    cpu: float,
    client: Any = None,
    ready: threading.Barrier | None = None,
) -> dict[str, Any]:
    """``one_request``; a request that fails (a server that cuts a stream, say) is counted instead of ending the run."""
    try:
        return one_request(server, index, new_tokens, start, cpu, client, ready)
    except Exception as exc:
        return {"error": f"client {index}: {type(exc).__name__}: {exc}"[:300]}


def run_level(server: Server, clients: int, new_tokens: int, hostile: bool = False) -> dict[str, Any]:
    import httpx

    connections = [httpx.Client(timeout=3600) for _ in range(clients)]  # made before the clock starts
    ready = threading.Barrier(clients)
    cpu = cpu_seconds(server.process.pid)
    start = time.perf_counter()
    attacks = hostile_requests(server, new_tokens) if hostile else []
    try:
        with concurrent.futures.ThreadPoolExecutor(clients + len(attacks)) as pool:
            outcomes = [
                pool.submit(send_hostile, server, kind, body, 0.2 * i) for i, (kind, body) in enumerate(attacks)
            ]
            results = list(
                pool.map(
                    lambda i: guarded_request(server, i, new_tokens, start, cpu, connections[i], ready), range(clients)
                )
            )
            hostile_seen = [f.result() for f in outcomes]
    finally:
        for connection in connections:
            connection.close()
    wall = time.perf_counter() - start
    cpu = cpu_seconds(server.process.pid) - cpu
    failed = [r["error"] for r in results if "error" in r]
    texts = [r.get("text") for r in results]  # None where a request failed: equal to nothing
    results = [r for r in results if "error" not in r] or [{"ttft": wall, "ttft_cpu": cpu, "latency": wall, "tokens": 0,
                                                           "text": "", "counted": "none"}]  # fmt: skip
    tokens = sum(r["tokens"] for r in results)
    latencies = sorted(r["latency"] for r in results)
    return {
        "clients": clients, "tokens": tokens, "wall_s": wall, "tok_s": tokens / wall, "cpu_s": cpu,
        "tok_cpu_s": tokens / max(cpu, 1e-9), "load": common.load_average(),
        "ttft_s": statistics.median(r["ttft"] for r in results),
        "ttft_cpu_s": statistics.median(r["ttft_cpu"] for r in results), "hostile": hostile_seen,
        "p50_s": statistics.median(latencies), "p95_s": latencies[min(len(latencies) - 1, round(0.95 * (len(latencies) - 1)))],
        "texts": texts, "counted": results[0]["counted"], "failed": failed,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, nargs="+", default=None, help="client counts (default 1 4 16)")
    parser.add_argument("--new-tokens", type=int, default=None, help="max_tokens per request (default 128)")
    parser.add_argument("--servers", nargs="+", choices=SERVERS, default=None, help=f"default: {' '.join(SERVERS)}")
    parser.add_argument("--threads", type=int, default=None, help="threads of every server (default: unset)")
    parser.add_argument("--max-batch-size", type=int, default=16, help="microformers --max-batch-size")
    parser.add_argument("--fault-servers", nargs="*", choices=SERVERS, default=None,
                        help="servers that get the fault row (default: microformers; none: no fault row)")  # fmt: skip
    parser.add_argument("--model", choices=["smollm2", "random"], default="smollm2", help="weights (default smollm2)")
    parser.add_argument("--quick", action="store_true", help="1 and 4 clients, 32 new tokens, microformers only")
    parser.add_argument("--quantize", choices=["int8", "int4"], default=None, help="serve our side quantized")
    parser.add_argument(
        "--native-rows", type=int, default=None, help="microformers --native-rows (0: the batched eager step)"
    )
    args = parser.parse_args()
    our_flags = [*(["--quantize", args.quantize] if args.quantize else []),
            *(["--native-rows", str(args.native_rows)] if args.native_rows is not None else [])]  # fmt: skip
    clients = args.clients or ([1, 4] if args.quick else [1, 4, 16])
    new_tokens = args.new_tokens or (32 if args.quick else 128)
    servers = args.servers or (["microformers"] if args.quick else list(SERVERS))
    fault_servers = ["microformers"] if args.fault_servers is None else args.fault_servers
    folder = serve_folder(args.model)
    weights = f"float32; ours with {' '.join(our_flags)}" if our_flags else "float32"
    print(
        f"model: {folder} ({weights}); clients {clients}; {new_tokens} new tokens; threads {args.threads or 'default'}"
    )
    print(f"load before: {common.load_average()} on {os.cpu_count()} CPUs")
    report: dict[str, Any] = {}
    running: dict[str, Server] = {}
    for offset, kind in enumerate(servers):
        missing = llama_cpp_missing() if kind == "llama.cpp" else None
        if missing:
            print(f"llama.cpp server: {missing}")
            report[kind] = {"error": missing}
            continue
        try:
            port = 18000 + os.getpid() % 1000 + offset
            running[kind] = Server(kind, folder, port, args.threads, args.max_batch_size, our_flags)
            run_level(running[kind], 1, 8)  # warm-up
        except Exception as exc:  # report and go on: the reference may not run here
            print(f"{kind}: could not start: {exc}")
            report[kind] = {"error": str(exc)}
            if kind in running:
                running.pop(kind).stop()
    # Levels interleaved between the servers (all stay up), so load drift hits them alike.
    levels: dict[str, list[dict[str, Any]]] = {kind: [] for kind in running}
    faults: dict[str, dict[str, Any]] = {}
    try:
        for n in clients:
            for kind, server in running.items():
                levels[kind].append(run_level(server, n, new_tokens))
                level = levels[kind][-1]
                print(f"  {kind} {n} clients: {level['tok_s']:.1f} tok/s, {level['tok_cpu_s']:.1f} tok/CPU-s, "
                      f"TTFT {level['ttft_s']:.2f} s (load {level['load']})", flush=True)  # fmt: skip
                for error in level["failed"]:
                    print(f"    failed: {error}", flush=True)
        for kind in fault_servers:
            if kind in running:
                faults[kind] = run_level(running[kind], clients[-1], new_tokens, hostile=True)
                print(f"  {kind} {clients[-1]} clients under attack: {faults[kind]['tok_s']:.1f} tok/s "
                      f"(load {faults[kind]['load']})", flush=True)  # fmt: skip
    finally:
        for server in running.values():
            server.stop()
    for kind, server in running.items():
        report[kind] = {"startup_s": server.startup_s, "levels": levels[kind]}
        if kind == "microformers":
            report[kind]["flags"] = our_flags
        print(f"\n== {kind} serve (startup {server.startup_s:.1f} s)")
        print(f"{'clients':>7} {'tokens':>7} {'wall s':>7} {'tok/s':>7} {'x 1':>6} {'tok/CPU-s':>9} {'x 1':>6} "
              f"{'TTFT s':>7} {'TTFT CPU-s':>10} {'p50 s':>7} {'p95 s':>7}")  # fmt: skip
        base, base_cpu = max(levels[kind][0]["tok_s"], 1e-9), max(levels[kind][0]["tok_cpu_s"], 1e-9)
        for level in levels[kind]:
            print(f"{level['clients']:>7} {level['tokens']:>7} {level['wall_s']:>7.1f} {level['tok_s']:>7.1f} "
                  f"{level['tok_s'] / base:>6.2f} {level['tok_cpu_s']:>9.1f} {level['tok_cpu_s'] / base_cpu:>6.2f} "
                  f"{level['ttft_s']:>7.2f} {level['ttft_cpu_s']:>10.2f} {level['p50_s']:>7.1f} {level['p95_s']:>7.1f}")  # fmt: skip
        same = all(
            None in (level["texts"][i], other["texts"][i]) or level["texts"][i] == other["texts"][i]
            for level in levels[kind] for other in levels[kind]
            for i in range(min(len(level["texts"]), len(other["texts"])))
        )  # fmt: skip
        print(
            f"answers to the same prompt identical at every client count: {same} (tokens counted from {levels[kind][0]['counted']})"
        )
    for kind, fault in faults.items():
        clean = levels[kind][-1]
        agree = sum(a is not None and a == b for a, b in zip(fault["texts"], clean["texts"], strict=False))
        report[kind]["fault"] = fault
        print(
            f"\n== fault row: {kind}, {fault['clients']} clients while {len(fault['hostile'])} hostile requests arrive"
        )
        print(f"aggregate {fault['tok_s']:.1f} tok/s ({fault['tok_s'] / clean['tok_s']:.2f}x the clean level), "
              f"{fault['tok_cpu_s']:.1f} tok/CPU-s ({fault['tok_cpu_s'] / clean['tok_cpu_s']:.2f}x), TTFT {fault['ttft_s']:.2f} s; "
              f"answers equal to the clean level's: {agree}/{fault['clients']}; failed clients: {len(fault['failed'])}")  # fmt: skip
        for error in fault["failed"]:
            print(f"  {error}")
        for what, outcome in fault["hostile"]:
            print(f"  {what}: {outcome}")
    ours = report.get("microformers", {}).get("levels")
    for kind in running:
        if kind == "microformers" or not ours:
            continue
        print(
            f"\n== microformers / {kind}"
            + (" (its answers come from the Q4_1 file: not compared)" if kind == "llama.cpp" else "")
            + (" (ours are quantized: answers not compared)" if args.quantize and kind != "llama.cpp" else "")
        )
        for a, b in zip(ours, levels[kind], strict=True):
            agree = sum(x is not None and x == y for x, y in zip(a["texts"], b["texts"], strict=True))
            print(f"{a['clients']:>3} clients: tok/s {a['tok_s'] / b['tok_s']:.2f}x, tok/CPU-s {a['tok_cpu_s'] / b['tok_cpu_s']:.2f}x, "
                  f"median TTFT {a['ttft_s'] / max(b['ttft_s'], 1e-9):.2f}x theirs (CPU-s {a['ttft_cpu_s'] / max(b['ttft_cpu_s'], 1e-9):.2f}x)"
                  + ("" if kind == "llama.cpp" or args.quantize else f", identical answers {agree}/{a['clients']}")
                  + (f"; failed requests: ours {len(a['failed'])}, theirs {len(b['failed'])}" if a["failed"] or b["failed"] else ""))  # fmt: skip
    print(f"load after: {common.load_average()}")
    for entry in report.values():
        for level in [*entry.get("levels", []), entry.get("fault", {})]:
            level.pop("texts", None)
    common.write_json("serve", report)


if __name__ == "__main__":
    main()
