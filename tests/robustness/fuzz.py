"""Fuzz and fault cases for every loader, run in a worker subprocess with a memory cap and per-case time limit.

Families: ``config`` (hostile config.json values), ``safetensors`` (byte mutations of a single-file
checkpoint), ``sharded`` (index and shard mutations), ``gguf`` (byte and size-field mutations),
``tokenizer`` (tokenizer.json / tokenizer_config.json mutations, bytes and values) and ``template``
(hostile chat templates). Saves under SIGKILL live in ``save_kill.py``.

Every case is deterministic in (family, seed, index). The parent starts one worker for all cases, watches
its progress, and starts a new one after a case that crashed or hung. Outcomes:

- ``clean``: a MicroformersError whose message names the mutated file (or its folder);
- ``unnamed``: a MicroformersError that does not name it;
- ``other``: any other exception; ``crash``: the worker died (signal); ``hang``: past the time limit;
- ``memory``: MemoryError / allocator failure under the address-space cap;
- ``accepted-same``: loaded, and the result equals the unmutated original (the bytes did not matter);
- ``accepted-changed``: loaded with different values; documented as acceptable only where the
  family says so (see ``ACCEPTABLE``): formats without checksums cannot tell a flipped data byte.

Usage: ``python tests/robustness/fuzz.py --seeds 0 --per-family 40 --json out.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import resource
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
FAMILIES = ("config", "safetensors", "sharded", "gguf", "tokenizer", "template")
# accepted-changed is a documented acceptance for these families (see docs/reliability.md, "Fuzzing")
ACCEPTABLE = {
    "config": "only a number replaced by another number (rope_theta=1e308 is a model, if a strange one)",
    "safetensors": "a mutated tensor data byte is a different valid weight (safetensors has no checksum); a mutated "
    "head tensor name loads like a base checkpoint (head newly initialised, warned)",
    "sharded": "a mutated tensor data byte is a different valid weight (safetensors has no checksum); an index or "
    "tensor name that no longer names the head loads like a base checkpoint (head newly initialised, warned)",
    "gguf": "a mutated data byte or numeric metadata byte is a different valid file (GGUF has no checksum)",
    "tokenizer": "a well-formed tokenizer file with different values is a different tokenizer",
    "template": "a template that renders is a template",
}
FAILURES = ("unnamed", "other", "crash", "hang", "memory")
MEMORY_CAP = 3 * 2**30
CASE_SECONDS = 20


class Hang(BaseException):
    """Raised by SIGALRM when a case runs past its time limit."""


# -- fixtures -------------------------------------------------------------------------------------
def build_fixtures(root: Path) -> dict[str, Path]:
    sys.path.insert(0, str(HERE.parent))
    from tokenizers import Tokenizer, models, pre_tokenizers

    from microformers_tokenizers import PreTrainedTokenizerFast
    from robustness._build import llama_folder, llama_gguf

    single = llama_folder(root / "single")
    sharded = llama_folder(root / "sharded", max_shard_size="8KB")
    llama_gguf(root / "gguf" / "model.gguf") if (root / "gguf").mkdir() is None else None
    vocab = {w: i for i, w in enumerate(["<unk>", "<s>", "</s>", "hello", "world", "a", "b", "!"])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<unk>",
        chat_template="{{ 1 }}",
    )
    tok.save_pretrained(root / "tokenizer")
    return {"single": single, "sharded": sharded, "gguf": root / "gguf", "tokenizer": root / "tokenizer"}


def copy_folder(source: Path, dest: Path) -> Path:
    dest.mkdir(parents=True)
    for item in source.iterdir():
        if item.is_file():
            (dest / item.name).write_bytes(item.read_bytes())
    return dest


# -- mutations --------------------------------------------------------------------------------------
HOSTILE_VALUES: list[Any] = [
    -1,
    0,
    2**31,
    10**12,
    10**30,
    1e308,
    -1e-9,
    1.5,
    "abc",
    "",
    None,
    True,
    [],
    {},
    [1, 2],
    {"a": 1},
    "NaN",
    "Infinity",
    "DEEP",
]


def hostile_json(value: Any) -> str:
    if value in ("NaN", "Infinity"):
        return value
    if value == "DEEP":
        return "[" * 5000 + "]" * 5000
    return json.dumps(value)


def dumps_with(data: dict[str, Any], key: str, value: Any) -> str:
    marker = "\u0000HOSTILE\u0000"
    return json.dumps({**data, key: marker}).replace(json.dumps(marker), hostile_json(value))


def mutate_bytes(rng: random.Random, data: bytes, header_end: int) -> tuple[bytes, str]:
    kind = rng.choice(["flip-header", "flip-header", "truncate", "insert", "flip-data", "zero-run"])
    if kind == "truncate":
        cut = rng.randrange(0, len(data))
        return data[:cut], f"truncate at {cut}"
    if kind == "insert":
        at = rng.randrange(0, header_end)
        return data[:at] + bytes(rng.randrange(256) for _ in range(rng.randint(1, 8))) + data[at:], f"insert at {at}"
    if kind == "zero-run":
        at = rng.randrange(0, header_end)
        return data[:at] + b"\0" * 8 + data[at + 8 :], f"zero 8 bytes at {at}"
    lo, hi = (0, header_end) if kind == "flip-header" else (header_end, len(data))
    at = rng.randrange(lo, max(hi, lo + 1))
    at = min(at, len(data) - 1)
    return data[:at] + bytes([data[at] ^ (1 << rng.randrange(8))]) + data[at + 1 :], f"{kind} at {at}"


def make_case(family: str, seed: int, index: int, fixtures: dict[str, Path], work: Path) -> dict[str, Any]:
    """Build case ``index`` of ``family`` under ``work``; returns what to load and which file was mutated."""
    rng = random.Random(f"{family}-{seed}-{index}")
    if family == "config":
        folder = copy_folder(fixtures["single"], work)
        data = json.loads((folder / "config.json").read_text())
        keys = [*sorted(data), "model_type", "auto_map", "id2label", "num_labels", "__class__", "to_dict", "label2id"]
        key, value = rng.choice(keys), rng.choice(HOSTILE_VALUES)
        (folder / "config.json").write_text(dumps_with(data, key, value))
        original = data.get(key)
        same_type = isinstance(value, (int, float)) and isinstance(original, (int, float))
        same_type = same_type and not isinstance(value, bool) and not isinstance(original, bool)
        same_type = same_type or (value is None and key.endswith("_token_id"))
        same_type = same_type or (isinstance(value, bool) and isinstance(original, bool))
        what = f"{key}={value!r:.40}"
        return {"load": "model", "folder": folder, "file": folder / "config.json", "what": what, "same_type": same_type}
    if family in ("safetensors", "sharded"):
        folder = copy_folder(fixtures["single" if family == "safetensors" else "sharded"], work)
        shards = sorted(folder.glob("model*.safetensors"))
        if family == "sharded" and rng.random() < 0.4:
            index_file = folder / "model.safetensors.index.json"
            data = json.loads(index_file.read_text())
            name = rng.choice(sorted(data["weight_map"]))
            value = rng.choice(["../x.safetensors", "/etc/hostname", 7, None, "missing.safetensors", shards[0].name])
            data["weight_map"][name] = value
            index_file.write_text(json.dumps(data))
            return {"load": "model", "folder": folder, "file": index_file, "what": f"weight_map[{name}]={value!r}"}
        path = rng.choice(shards)
        raw = path.read_bytes()
        header_end = 8 + struct.unpack_from("<Q", raw)[0]
        if rng.random() < 0.15:
            raw, what = struct.pack("<Q", rng.choice([0, 2**63, 2**40, len(raw)])) + raw[8:], "header length"
        else:
            raw, what = mutate_bytes(rng, raw, header_end)
        path.write_bytes(raw)
        return {"load": "model", "folder": folder, "file": path, "what": what, "data_from": header_end}
    if family == "gguf":
        folder = copy_folder(fixtures["gguf"], work)
        path = folder / "model.gguf"
        raw = path.read_bytes()
        tensor_data = _gguf_data_start(raw)
        if rng.random() < 0.3:
            from robustness._build import patch_gguf_u32

            key = rng.choice(
                [
                    "llama.block_count",
                    "llama.embedding_length",
                    "llama.feed_forward_length",
                    "llama.attention.head_count",
                    "llama.attention.head_count_kv",
                    "llama.context_length",
                    "llama.rope.dimension_count",
                ]
            )
            value = rng.choice([0, 1, 3, 1000, 10**6, 2**31, 2**32 - 1])
            raw, what = patch_gguf_u32(raw, key, value), f"{key}={value}"
        else:
            raw, what = mutate_bytes(rng, raw, tensor_data)
        path.write_bytes(raw)
        return {"load": "gguf", "folder": folder, "file": path, "what": what, "data_from": tensor_data}
    if family == "tokenizer":
        folder = copy_folder(fixtures["tokenizer"], work)
        name = rng.choice(["tokenizer.json", "tokenizer.json", "tokenizer_config.json"])
        path = folder / name
        if rng.random() < 0.3:
            raw, what = mutate_bytes(rng, path.read_bytes(), len(path.read_bytes()))
            path.write_bytes(raw)
        else:
            data = json.loads(path.read_text())
            target, key = _random_node(rng, data)
            value = rng.choice(HOSTILE_VALUES)
            what = f"{name}:{key}={value!r:.40}"
            if value in ("NaN", "Infinity", "DEEP"):
                value = float("nan") if value == "NaN" else [[[[[[[[[[[]]]]]]]]]]]
            target[key] = value
            path.write_text(json.dumps(data))
        return {"load": "tokenizer", "folder": folder, "file": path, "what": what}
    if family == "template":
        folder = copy_folder(fixtures["tokenizer"], work)
        template = TEMPLATES[index % len(TEMPLATES)]
        (folder / "chat_template.jinja").write_text(template)
        return {"load": "template", "folder": folder, "file": folder / "chat_template.jinja", "what": template[:60]}
    raise ValueError(family)


TEMPLATES = [
    "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
    "{{ 10**100000000 }}",
    "{{ lipsum(10**7) }}",
    "{{ 'a' * 3000000000 }}",
    "{% include 'other.jinja' %}",
    "{{ 1 / 0 }}",
    "{{ messages[10] }}",
    "{{ messages[0].content.__class__.__mro__ }}",
    "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "{{ unclosed ",
    "{% for %}",
    "{{ raise_exception('no') }}",
    "{{ messages | tojson }}{{ 'ok' }}",
    "{{ (messages * 1000000) | length }}",
    "{{ [0] * 10**9 }}",
]


def _random_node(rng: random.Random, data: Any) -> tuple[Any, Any]:
    """A random (container, key) inside a JSON tree."""
    node, key = {"root": data}, "root"
    for _ in range(rng.randint(1, 6)):
        child = node[key]
        if isinstance(child, dict) and child:
            node, key = child, rng.choice(sorted(child))
        elif isinstance(child, list) and child:
            node, key = child, rng.randrange(len(child))
        else:
            break
    if node is not data and key == "root":
        return data, rng.choice(sorted(data))
    return (data, rng.choice(sorted(data))) if key == "root" else (node, key)


def _gguf_data_start(raw: bytes) -> int:
    """Where tensor data begins (header, metadata and tensor table before it)."""
    sys.path.insert(0, str(HERE.parent))
    import tempfile as _tf

    from microformers_gguf.reader import read_gguf

    with _tf.NamedTemporaryFile(suffix=".gguf") as handle:
        handle.write(raw)
        handle.flush()
        return read_gguf(handle.name).data_offset


# -- running one case -------------------------------------------------------------------------------
def run_case(case: dict[str, Any], originals: dict[str, Any]) -> tuple[str, str]:
    from microformers.errors import MicroformersError, UnknownModelTypeError

    folder = Path(case["folder"])
    try:
        result = _observe(case["load"], folder)
    except Hang:
        return "hang", "past the time limit"
    except MemoryError as exc:
        return "memory", repr(exc)[:300]
    except UnknownModelTypeError as exc:  # names the model_type and the plugin to install (documented)
        return "clean", f"{type(exc).__name__}: {exc}"[:300]
    except MicroformersError as exc:
        named = str(folder) in str(exc)
        return ("clean" if named else "unnamed"), f"{type(exc).__name__}: {exc}"[:300]
    except BaseException as exc:
        text = f"{type(exc).__name__}: {exc}"
        if "can't allocate memory" in text or "DefaultCPUAllocator" in text or "std::bad_alloc" in text:
            return "memory", text[:300]
        return "other", text[:300]
    original = originals[case["load"]]
    if case["load"] in ("model", "gguf"):
        same = result[0] == original[0] and _same_state(result[1], original[1]) and result[2:] == original[2:]
    else:
        same = repr(result) == repr(original)
    if case["load"] in ("model", "gguf") and not result[2]:
        return "accepted-changed", "loads, but the logits are not finite"
    return ("accepted-same" if same else "accepted-changed"), ""


def _same_state(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Exact: the same bytes loaded give the same tensors, and the same code on them the same logits."""
    import torch

    return a.keys() == b.keys() and all(a[k].shape == b[k].shape and torch.equal(a[k], b[k]) for k in a)


def worker(args: argparse.Namespace) -> int:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))
    import torch

    torch.set_num_threads(1)
    cases = json.loads(Path(args.cases).read_text())
    root = Path(tempfile.mkdtemp(prefix="mf-fuzz-", dir=args.root))  # inside the parent's temporary folder
    fixtures = build_fixtures(root / "fixtures")
    originals = _originals(fixtures)

    def alarm(*_: Any) -> None:
        raise Hang()

    signal.signal(signal.SIGALRM, alarm)
    warned: list[str] = []

    class Recorder(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            warned.append(record.getMessage())

    logging.getLogger("microformers").addHandler(Recorder(logging.WARNING))
    with open(args.out, "a") as out:
        for number in range(args.start, len(cases)):
            family, seed, index = cases[number]
            out.write(json.dumps({"n": number, "started": True}) + "\n")
            out.flush()
            work = root / f"case-{number}"
            try:
                case = make_case(family, seed, index, fixtures, work)
            except Exception as exc:
                out.write(json.dumps({"n": number, "status": "other", "detail": f"case generator: {exc!r}"}) + "\n")
                continue
            signal.alarm(CASE_SECONDS)
            warned.clear()
            try:
                status, detail = run_case(case, originals)
            except Hang:
                status, detail = "hang", "past the time limit"
            finally:
                signal.alarm(0)
            if status == "accepted-changed" and "data_from" in case and _only_data(case):
                detail = "data bytes"
            if status == "accepted-changed" and any("Newly initialised weights" in w for w in warned):
                detail = "newly initialised weights, with the warning"
            if status == "accepted-changed" and case.get("same_type"):
                detail = "a number replaced by a number"
            record = {"n": number, "family": family, "what": case["what"], "status": status, "detail": detail}
            out.write(json.dumps(record) + "\n")
            out.flush()
            _rmtree(work)
    return 0


def _only_data(case: dict[str, Any]) -> bool:
    what = case["what"]
    return what.startswith("flip-data")


def _originals(fixtures: dict[str, Path]) -> dict[str, Any]:
    out = {load: _observe(load, fixtures[name]) for load, name in (("model", "single"), ("gguf", "gguf"))}
    out["tokenizer"] = _observe("tokenizer", fixtures["tokenizer"])
    out["template"] = _observe("template", fixtures["tokenizer"])
    return out


def _observe(load: str, folder: Path) -> Any:
    """Load what ``load`` names from ``folder`` and use it; the result is compared with the original's."""
    import torch

    from microformers import AutoModelForCausalLM, AutoTokenizer

    if load in ("model", "gguf"):
        kwargs = {"gguf_file": "model.gguf"} if load == "gguf" else {}
        model = AutoModelForCausalLM.from_pretrained(folder, **kwargs)
        with torch.no_grad():
            logits = model(torch.tensor([[1, 2, 3, 4]]))[0]  # [0]: return_dict=False gives a tuple
        result: Any = (
            "model",
            {**{k: v.clone() for k, v in model.state_dict().items()}, "<logits>": logits},
            bool(torch.isfinite(logits).all()),
        )
        if load == "gguf":
            tok = AutoTokenizer.from_pretrained(folder, gguf_file="model.gguf")
            result = (*result, tok("\u2581t1 \u2581t2 hello")["input_ids"])
        return result
    tok = AutoTokenizer.from_pretrained(str(folder))
    if load == "tokenizer":
        ids = tok(["hello world !", "a b"], padding=True)["input_ids"]
        return ("tokenizer", ids, tok.decode(ids[0]), tok.get_vocab())
    return ("template", tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)[:100])


def _rmtree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


# -- the parent -----------------------------------------------------------------------------------
def run_all(cases: list[tuple[str, int, int]], json_out: Path | None = None) -> dict[str, Any]:
    """Run every case in worker subprocesses; restart after a crash or hang. Returns the report."""
    with tempfile.TemporaryDirectory(prefix="mf-fuzz-parent-") as tmp:
        spec, out = Path(tmp) / "cases.json", Path(tmp) / "results.jsonl"
        spec.write_text(json.dumps(cases))
        out.touch()
        records: dict[int, dict[str, Any]] = {}
        start = 0
        while start < len(cases):
            proc = subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--worker",
                    "--cases",
                    str(spec),
                    "--out",
                    str(out),
                    "--start",
                    str(start),
                    "--root",
                    tmp,
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            last_progress, seen_lines, started = time.monotonic(), 0, None
            killed = False
            while proc.poll() is None:
                time.sleep(0.2)
                lines = out.read_text().splitlines()
                if len(lines) != seen_lines:
                    seen_lines, last_progress = len(lines), time.monotonic()
                limit = 120 if started is None and not records else CASE_SECONDS + 15
                started = started or bool(lines)
                if time.monotonic() - last_progress > limit:
                    proc.kill()
                    killed = True
            stderr = proc.stderr.read().decode(errors="replace")[-2000:] if proc.stderr else ""
            pending = None
            for line in out.read_text().splitlines():
                entry = json.loads(line)
                if entry.get("started"):
                    pending = entry["n"]
                else:
                    records[entry["n"]] = entry
                    pending = None if pending == entry["n"] else pending
            if pending is None:
                if proc.returncode not in (0, None) and len(records) < len(cases):
                    raise RuntimeError(f"fuzz worker failed before any case: {stderr}")
                break
            family, seed, index = cases[pending]
            status = "hang" if killed else "memory" if proc.returncode == -signal.SIGKILL else "crash"
            records[pending] = {
                "n": pending,
                "family": family,
                "what": f"case {index} (seed {seed})",
                "status": status,
                "detail": f"worker exit {proc.returncode}: {stderr[-300:]}",
            }
            start = pending + 1
    report = summarise([records[n] for n in sorted(records)])
    if json_out is not None:
        json_out.write_text(json.dumps(report, indent=2))
    return report


def summarise(records: list[dict[str, Any]]) -> dict[str, Any]:
    counts: dict[str, Counter[str]] = {}
    failures = []
    for record in records:
        family, status = record["family"], record["status"]
        counts.setdefault(family, Counter())[status] += 1
        data_only = family in ("safetensors", "sharded")  # their headers are fully checked
        documented = ("data bytes", "newly initialised weights, with the warning")
        acceptable = family in ACCEPTABLE and (not data_only or record.get("detail") in documented)
        if family == "config":
            acceptable = record.get("detail") == "a number replaced by a number"
        bad = status in FAILURES or (status == "accepted-changed" and not acceptable)
        if bad:
            failures.append(record)
    return {
        "counts": {f: dict(c) for f, c in counts.items()},
        "failures": failures,
        "total": len(records),
        "records": records,
    }


def plan(seeds: list[int], per_family: int, families: tuple[str, ...] = FAMILIES) -> list[tuple[str, int, int]]:
    count = {"template": min(per_family, len(TEMPLATES))}
    return [(f, s, i) for s in seeds for f in families for i in range(count.get(f, per_family))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cases")
    parser.add_argument("--out")
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--root")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds")
    parser.add_argument("--per-family", type=int, default=40)
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--json", help="write the report here")
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args)
    cases = plan([int(s) for s in args.seeds.split(",")], args.per_family, tuple(args.families.split(",")))
    report = run_all(cases, Path(args.json) if args.json else None)
    print(json.dumps(report["counts"], indent=2))
    for failure in report["failures"]:
        print("FAIL", json.dumps(failure)[:400])
    return 1 if report["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
