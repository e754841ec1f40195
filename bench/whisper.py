"""Whisper transcription speed: microformers vs the reference on 30 s and 70 s of speech-like audio, in CPU time.

    .venv/bin/python bench/whisper.py [--shape tiny|base] [--seconds 30 70] [--repeats 1] [--max-new-tokens 128]

The model is a randomly initialised ``WhisperForConditionalGeneration`` with the shape of openai/whisper-tiny
(or -base): 80 mel bins, 4 (6) encoder and decoder layers of 384 (512), 51865 tokens, made once by the reference,
saved under ``$TMPDIR/microformers-bench`` and loaded by both. Its generation config lists English and the two
tasks; each run transcribes in English with timestamps, so audio over 30 s is decoded window by window (long-form)
and 30 s of audio may take more than one window too (a random model's segments end anywhere). Each window stops
after ``--max-new-tokens`` (a random model rarely says eos; 128 is about what 30 s of real speech gives).

The audio is synthetic: syllable-like tone bursts with a moving pitch, pauses between words, noise. A row is the
feature extractor (each implementation's own) plus ``generate``, timed with ``time.process_time`` (CPU time of
the process, all threads) after a warm-up on 5 s; the median of ``--repeats`` interleaved runs. Real-time factor
= audio seconds per CPU second (higher is better); the ratio is ours over the reference's. The generated tokens
of the two implementations are compared.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common

RATE = 16000
SHAPES: dict[str, dict[str, int]] = {
    "tiny": {"d_model": 384, "encoder_layers": 4, "decoder_layers": 4, "encoder_attention_heads": 6,
             "decoder_attention_heads": 6, "encoder_ffn_dim": 1536, "decoder_ffn_dim": 1536},
    "base": {"d_model": 512, "encoder_layers": 6, "decoder_layers": 6, "encoder_attention_heads": 8,
             "decoder_attention_heads": 8, "encoder_ffn_dim": 2048, "decoder_ffn_dim": 2048},
}  # fmt: skip
# the multilingual vocabulary's special tokens
END, START, ENGLISH, TRANSLATE, TRANSCRIBE, PREVIOUS, NO_TIMESTAMPS = 50257, 50258, 50259, 50358, 50359, 50361, 50363


def model_folder(shape: str) -> Path:
    folder = common.BENCH_DIR / f"whisper-{shape}-random"
    if (folder / "model.safetensors").is_file() and (folder / "generation_config.json").is_file():
        return folder
    import torch
    import transformers

    common.BENCH_DIR.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=common.BENCH_DIR))
    config = transformers.WhisperConfig(
        vocab_size=51865, num_mel_bins=80, max_source_positions=1500, max_target_positions=448, pad_token_id=END,
        bos_token_id=END, eos_token_id=END, decoder_start_token_id=START, begin_suppress_tokens=[220, END],
        suppress_tokens=[], **SHAPES[shape],
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.WhisperForConditionalGeneration(config)
    model.save_pretrained(staging)
    generation = json.loads((staging / "generation_config.json").read_text())
    generation.pop("_from_model_config", None)
    generation.update(
        lang_to_id={"<|en|>": ENGLISH}, task_to_id={"transcribe": TRANSCRIBE, "translate": TRANSLATE},
        no_timestamps_token_id=NO_TIMESTAMPS, prev_sot_token_id=PREVIOUS, is_multilingual=True,
        max_initial_timestamp_index=50, max_length=448, begin_suppress_tokens=[220, END], suppress_tokens=[],
    )  # fmt: skip
    (staging / "generation_config.json").write_text(json.dumps(generation, indent=2))
    transformers.WhisperFeatureExtractor().save_pretrained(staging)
    if folder.exists():
        import shutil

        shutil.rmtree(folder)
    staging.rename(folder)
    return folder


def speech_like(seconds: float) -> Any:
    """Tone bursts of 120-300 ms whose pitch glides, 60-400 ms pauses between them, a little noise."""
    import numpy as np

    rng = np.random.default_rng(0)
    total = int(seconds * RATE)
    wave = np.zeros(total, dtype=np.float64)
    at = 0
    while at < total:
        length = int(rng.uniform(0.12, 0.3) * RATE)
        t = np.arange(min(length, total - at)) / RATE
        pitch = rng.uniform(120, 260)
        burst = np.sin(2 * np.pi * (pitch + rng.uniform(-60, 60) * t) * t) * np.hanning(len(t))
        burst += 0.3 * np.sin(2 * np.pi * 3 * pitch * t) * np.hanning(len(t))
        wave[at : at + len(t)] = 0.4 * burst
        at += length + int(rng.uniform(0.06, 0.4) * RATE)
    return (wave + 0.01 * rng.standard_normal(total)).astype(np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    parser.add_argument("--seconds", type=float, nargs="+", default=[30.0, 70.0])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    args = parser.parse_args()
    common.set_threads()
    import torch
    import transformers

    import microformers

    folder = model_folder(args.shape)
    implementations = {
        "microformers": (
            microformers.AutoFeatureExtractor.from_pretrained(folder),
            microformers.AutoModelForSpeechSeq2Seq.from_pretrained(folder, dtype=torch.float32).eval(),
        ),
        "reference": (
            transformers.WhisperFeatureExtractor.from_pretrained(folder),
            transformers.WhisperForConditionalGeneration.from_pretrained(folder, dtype=torch.float32).eval(),
        ),
    }
    settings = {"language": "en", "task": "transcribe", "return_timestamps": True,
                "max_new_tokens": args.max_new_tokens, "num_beams": 1}  # fmt: skip

    def transcribe(implementation: str, clip: Any) -> Any:
        extractor, model = implementations[implementation]
        features = extractor(
            clip, sampling_rate=RATE, return_tensors="pt", truncation=False, padding="longest",
            return_attention_mask=True,
        )  # fmt: skip
        if features["input_features"].shape[-1] < 3000:  # under 30 s: the usual padded window
            features = extractor(clip, sampling_rate=RATE, return_tensors="pt", return_attention_mask=True)
        with torch.inference_mode():
            return model.generate(features["input_features"], attention_mask=features["attention_mask"], **settings)

    for implementation in implementations:
        transcribe(implementation, speech_like(5.0))  # warm-up
    print(f"whisper-{args.shape}-shaped random model, {common.THREADS} threads, CPU time, "
          f"median of {args.repeats}, max_new_tokens={args.max_new_tokens} per window, load {common.load_average()}")  # fmt: skip
    rows, results = [], {}
    for seconds in args.seconds:
        clip = speech_like(seconds)
        times: dict[str, list[float]] = {name: [] for name in implementations}
        outputs: dict[str, Any] = {}
        for _ in range(args.repeats):
            for name in implementations:
                spent, outputs[name] = common.timed(
                    lambda name=name, clip=clip: transcribe(name, clip), clock=time.process_time
                )
                times[name].append(spent)
        ours, reference = common.median(times["microformers"]), common.median(times["reference"])
        same = outputs["microformers"].shape == outputs["reference"].shape and bool(
            (outputs["microformers"] == outputs["reference"]).all()
        )
        tokens = int(outputs["microformers"].shape[-1])
        rows.append(
            (f"{seconds:.0f} s audio, RTF (audio s / CPU s)", f"{seconds / ours:.2f}", f"{seconds / reference:.2f}",
             f"{reference / ours:.2f}x")
        )  # fmt: skip
        results[f"{seconds:.0f}s"] = {"ours_cpu_s": ours, "reference_cpu_s": reference, "tokens": tokens,
                                      "identical_tokens": same}  # fmt: skip
        print(f"{seconds:.0f} s: ours {ours:.2f} CPU s, reference {reference:.2f} CPU s, {tokens} tokens, "
              f"{'identical' if same else 'DIFFERENT'} tokens")  # fmt: skip
    common.print_table(f"Whisper ({args.shape}) real-time factor, higher is better", rows)
    common.write_json(f"whisper_{args.shape}", results)


if __name__ == "__main__":
    main()
