"""Speech recognition real-time factor: microformers vs the reference on 30 s of audio, wav2vec2-base-sized model.

    .venv/bin/python bench/asr.py [--seconds 30] [--repeats 3]

The model is a randomly initialised ``Wav2Vec2ForCTC`` with the shape of facebook/wav2vec2-base-960h
(7 conv layers of 512 channels, group norm, 12 post-norm layers of 768, 32-character vocabulary),
made once by the reference, saved with its processor under ``$TMPDIR/microformers-bench`` and loaded
by both. The audio is a generated chirp with noise. Rows, each the median of ``--repeats`` interleaved
runs after a warm-up: the ``automatic-speech-recognition`` pipeline on the whole clip in one pass, the
same with ``chunk_length_s=10`` (strides 10/6 s), and the bare model forward on the processor's
output. Real-time factor = processing seconds / audio seconds (lower is better); the ratio is the
reference's time over ours. The transcripts of both implementations are compared.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common

RATE = 16000
VOCAB = {
    "<pad>": 0,
    "<s>": 1,
    "</s>": 2,
    "<unk>": 3,
    "|": 4,
    **{c: i + 5 for i, c in enumerate("ETAONIHSRDLUMWCFGYPBVKJXQZ'")},
}


def model_folder() -> Path:
    folder = common.BENCH_DIR / "wav2vec2-base-random"
    if (folder / "model.safetensors").is_file() and (folder / "processor_config.json").is_file():
        return folder
    import torch
    import transformers

    common.BENCH_DIR.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=common.BENCH_DIR))
    (staging / "vocab.json").write_text(json.dumps(VOCAB))
    tokenizer = transformers.Wav2Vec2CTCTokenizer(str(staging / "vocab.json"))
    processor = transformers.Wav2Vec2Processor(transformers.Wav2Vec2FeatureExtractor(), tokenizer)
    torch.manual_seed(0)
    model = transformers.Wav2Vec2ForCTC(transformers.Wav2Vec2Config(vocab_size=len(VOCAB)))
    model.save_pretrained(staging)
    processor.save_pretrained(staging)
    if folder.exists():
        import shutil

        shutil.rmtree(folder)
    staging.rename(folder)
    return folder


def audio(seconds: float) -> Any:
    import numpy as np

    t = np.arange(int(seconds * RATE)) / RATE
    wave = 0.4 * np.sin(2 * np.pi * (200 + 40 * t) * t) + 0.05 * np.random.default_rng(0).standard_normal(t.shape)
    return wave.astype(np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    common.set_threads()
    import torch
    import transformers

    import microformers

    folder = model_folder()
    clip = audio(args.seconds)
    pipes = {
        "reference": transformers.pipeline("automatic-speech-recognition", model=str(folder)),
        "microformers": microformers.pipeline("automatic-speech-recognition", model=str(folder)),
    }
    processor = microformers.AutoProcessor.from_pretrained(folder)
    inputs = processor(audio=clip, sampling_rate=RATE, return_tensors="pt")
    rows: list[tuple[str, Any]] = [
        ("pipeline, one pass", lambda pipe: pipe(clip.copy())),
        ("pipeline, chunk_length_s=10", lambda pipe: pipe(clip.copy(), chunk_length_s=10)),
        ("model forward only", lambda pipe: pipe.model(inputs["input_values"]).logits.argmax(-1)),
    ]
    print(f"{args.seconds:.0f} s of audio, wav2vec2-base-sized random model, {common.THREADS} threads, "
          f"median of {args.repeats}")  # fmt: skip
    print(f"{'row':34} {'ours RTF':>9} {'ref RTF':>9} {'ratio':>7}  transcripts")
    results: dict[str, Any] = {}
    for name, run in rows:
        times: dict[str, list[float]] = {impl: [] for impl in pipes}
        outputs: dict[str, Any] = {}
        with torch.inference_mode():
            for impl, pipe in pipes.items():
                outputs[impl] = run(pipe)  # warm-up
            for _ in range(args.repeats):
                for impl, pipe in pipes.items():
                    seconds, outputs[impl] = common.timed(lambda pipe=pipe, run=run: run(pipe))
                    times[impl].append(seconds)
        ours, ref = common.median(times["microformers"]), common.median(times["reference"])
        same = _same(outputs["microformers"], outputs["reference"])
        print(f"{name:34} {ours / args.seconds:9.4f} {ref / args.seconds:9.4f} {ref / ours:6.2f}x  "
              f"{'identical' if same else 'DIFFER'}")  # fmt: skip
        results[name] = {"ours_s": ours, "reference_s": ref, "identical": same}
    common.write_json("asr", results)


def _same(a: Any, b: Any) -> bool:
    if hasattr(a, "equal"):
        return bool(a.equal(b))
    return a == b


if __name__ == "__main__":
    main()
