"""Speech (issue 15) against the reference implementation on tiny random Wav2Vec2 checkpoints.

Two checkpoints, one per feature-encoder variant: ``feat_extract_norm="group"`` (post-norm layers, no
attention mask from the feature extractor, like wav2vec2-base) and ``"layer"`` with
``do_stable_layer_norm`` (attention mask, like wav2vec2-large-lv60). Each carries a real character
vocabulary (``<pad>`` blank, ``|`` delimiter, A-Z and the apostrophe), saved by the reference's own
processor. The head's blank bias is raised so the random model emits blanks, repeats and words — the
cases CTC decoding has to get right. Audio is generated (tones, chirps, noise); nothing is downloaded.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import microformers
from microformers_sdk.testing import one_thread  # noqa: F401  (an autouse fixture, found by name)
from parity.harness import assert_close, make_reference_model, reference_module

pytest.importorskip("transformers")

RATE = 16000
VOCAB = {
    "<pad>": 0,
    "<s>": 1,
    "</s>": 2,
    "<unk>": 3,
    "|": 4,
    **{c: i + 5 for i, c in enumerate("ETAONIHSRDLUMWCFGYPBVKJXQZ'")},
}
TINY: dict[str, Any] = {
    "vocab_size": len(VOCAB),
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 37,
    "conv_dim": (16, 16, 16),
    "conv_stride": (5, 2, 2),
    "conv_kernel": (10, 3, 3),
    "num_conv_pos_embeddings": 16,
    "num_conv_pos_embedding_groups": 2,
    "classifier_proj_size": 8,
}
VARIANTS = {
    "group": {"feat_extract_norm": "group"},
    "layer": {"feat_extract_norm": "layer", "do_stable_layer_norm": True},
}
TEXTS = ["HELLO WORLD", "IT'S A TEST  OF <unk> THE  VOCAB", "the quick brown fox", "ÉTÉ 42 Q"]


def tone(seconds: float, freq: float = 440.0, seed: int = 0) -> np.ndarray:
    """A chirp around ``freq`` with a little noise, float32."""
    t = np.arange(int(seconds * RATE)) / RATE
    rng = np.random.default_rng(seed)
    wave = 0.5 * np.sin(2 * math.pi * (freq + 200 * t) * t) + 0.05 * rng.standard_normal(t.shape)
    return wave.astype(np.float32)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Any]]:
    transformers = reference_module()
    root = tmp_path_factory.mktemp("speech")
    (root / "vocab.json").write_text(json.dumps(VOCAB))
    tokenizer = transformers.Wav2Vec2CTCTokenizer(str(root / "vocab.json"))
    made = {}
    for name, variant in VARIANTS.items():
        model = make_reference_model("Wav2Vec2Config", "Wav2Vec2ForCTC", seed=3, **TINY, **variant)
        with torch.no_grad():
            model.lm_head.bias[0] += 0.4  # blanks between characters, as in a trained model
        feature_extractor = transformers.Wav2Vec2FeatureExtractor(return_attention_mask=name == "layer")
        processor = transformers.Wav2Vec2Processor(feature_extractor=feature_extractor, tokenizer=tokenizer)
        folder = root / name
        model.save_pretrained(folder)
        processor.save_pretrained(folder)
        made[name] = (folder, model)
    return made


def _processors(folder: Path) -> tuple[Any, Any]:
    return microformers.AutoProcessor.from_pretrained(folder), reference_module().AutoProcessor.from_pretrained(folder)


# -- feature extractor -------------------------------------------------------------------------------
FEATURE_CASES: list[dict[str, Any]] = [
    {},
    {"padding": True},
    {"padding": "max_length", "max_length": 9000, "truncation": True},
    {"padding": True, "pad_to_multiple_of": 1024, "return_attention_mask": True},
    {"padding": "longest", "return_attention_mask": False},
    {"padding": True, "return_tensors": "np"},
    {"padding": True, "return_tensors": "pt"},
]


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_feature_extractor_outputs_identical(checkpoints: dict, variant: str) -> None:
    ours, theirs = _processors(checkpoints[variant][0])
    assert type(ours.feature_extractor).__name__ == "Wav2Vec2FeatureExtractor"
    batch = [tone(0.6), tone(0.4, 300, seed=1) * 3 + 0.2, tone(0.5, 900, seed=2)]
    for case in FEATURE_CASES:
        for audio in (batch, batch[1], np.stack([batch[0], batch[0][::-1]])):
            got = ours.feature_extractor(audio, sampling_rate=RATE, **case)
            want = theirs.feature_extractor(audio, sampling_rate=RATE, **case)
            assert list(got) == list(want), case
            for key in want:
                assert type(got[key]) is type(want[key]), (case, key)
                for g, w in zip(got[key], want[key]):
                    g, w = np.asarray(g), np.asarray(w)
                    # exact: both normalise with the same numpy expression on the same samples
                    assert g.dtype == w.dtype and np.array_equal(g, w), (case, key)
    feature_extractor = ours.feature_extractor
    feature_extractor.do_normalize = False
    theirs.feature_extractor.do_normalize = False
    np.testing.assert_array_equal(  # exact: without normalisation, padding only copies the samples
        feature_extractor(batch, sampling_rate=RATE, padding=True, return_tensors="np")["input_values"],
        theirs.feature_extractor(batch, sampling_rate=RATE, padding=True, return_tensors="np")["input_values"],
    )


# -- model -------------------------------------------------------------------------------------------
def _padded(processor: Any, audio: list[np.ndarray]) -> Any:
    return processor(audio=audio, sampling_rate=RATE, padding=True, return_attention_mask=True, return_tensors="pt")


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_logits_match_including_padded_batches(checkpoints: dict, variant: str) -> None:
    folder, reference = checkpoints[variant]
    ours = microformers.AutoModelForCTC.from_pretrained(folder)
    processor, _ = _processors(folder)
    single = processor(audio=tone(0.7), sampling_rate=RATE, return_tensors="pt")
    batch = _padded(processor, [tone(0.7), tone(0.45, 250, seed=4), tone(0.3, 700, seed=5)])
    with torch.no_grad():
        assert_close(ours(**single).logits, reference(**single).logits, atol=1e-4)
        got, want = ours(**batch, output_hidden_states=True), reference(**batch, output_hidden_states=True)
        assert_close(got.logits, want.logits, atol=1e-4, what="padded-batch logits")
        assert len(got.hidden_states) == len(want.hidden_states)
        for index, (g, w) in enumerate(zip(got.hidden_states, want.hidden_states)):
            assert_close(g, w, atol=1e-4, what=f"hidden_states[{index}]")
        no_mask = {"input_values": batch["input_values"]}
        assert_close(ours(**no_mask).logits, reference(**no_mask).logits, atol=1e-4, what="padded, no mask")


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_ctc_loss_matches(checkpoints: dict, variant: str) -> None:
    folder, reference = checkpoints[variant]
    processor, _ = _processors(folder)
    batch = _padded(processor, [tone(0.9), tone(0.6, 250, seed=4)])
    labels = processor.tokenizer(["HELLO WORLD", "A CAT"], padding=True, return_tensors="pt")
    label_ids = labels["input_ids"].masked_fill(labels["attention_mask"] == 0, -100)
    for reduction in ("sum", "mean"):
        ours = microformers.AutoModelForCTC.from_pretrained(
            folder, ctc_loss_reduction=reference.config.ctc_loss_reduction
        )
        ours.config.ctc_loss_reduction = reference.config.ctc_loss_reduction = reduction
        with torch.no_grad():
            got = ours(**batch, labels=label_ids).loss
            want = reference(**batch, labels=label_ids).loss
        assert abs(got.item() - want.item()) <= 1e-5 * max(1.0, abs(want.item())), (reduction, got, want)
    reference.config.ctc_loss_reduction = "sum"


# -- tokenizer and decoding --------------------------------------------------------------------------
def test_tokenizer_ids_text_and_offsets_identical(checkpoints: dict) -> None:
    folder, reference = checkpoints["layer"]
    ours, theirs = _processors(folder)
    for text in TEXTS:
        assert ours.tokenizer(text)["input_ids"] == theirs.tokenizer(text)["input_ids"], text
    assert ours.tokenizer(TEXTS, padding=True)["input_ids"] == theirs.tokenizer(TEXTS, padding=True)["input_ids"]
    with torch.no_grad():
        ids = reference(**_padded(ours, [tone(1.0), tone(0.8, 600, seed=7)])).logits.argmax(-1)
    crafted = torch.tensor([[0, 8, 8, 0, 8, 4, 4, 0, 9, 3, 1, 2, 4, 0, 0, 31, 5, 5]])
    for sequences in (ids, crafted):
        for kwargs in (
            {},
            {"skip_special_tokens": True},
            {"output_char_offsets": True},
            {"output_word_offsets": True},
            {"output_char_offsets": True, "output_word_offsets": True, "skip_special_tokens": True},
        ):
            got, want = ours.batch_decode(sequences, **kwargs), theirs.batch_decode(sequences, **kwargs)
            if not kwargs.get("output_char_offsets") and not kwargs.get("output_word_offsets"):
                assert got == want, kwargs
                continue
            assert list(got) == list(want), kwargs
            for key in want:
                assert got[key] == want[key], (kwargs, key)
        assert ours.decode(sequences[0], group_tokens=False) == theirs.decode(sequences[0], group_tokens=False)
    assert any(len(row) > 1 for row in ours.batch_decode(ids)), "the random model should emit some text"


# -- pipelines ---------------------------------------------------------------------------------------
def _pipelines(folder: Path, task: str = "automatic-speech-recognition") -> tuple[Any, Any]:
    return microformers.pipeline(task, model=str(folder)), reference_module().pipeline(task, model=str(folder))


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_asr_pipeline_matches_short_and_chunked(checkpoints: dict, variant: str) -> None:
    ours, theirs = _pipelines(checkpoints[variant][0])
    short, long = tone(0.6, seed=8), np.concatenate([tone(0.8, 300, seed=9), tone(0.8, 800, seed=10)])
    cases: list[tuple[Any, dict[str, Any]]] = [
        (short, {"return_timestamps": "char"}),
        (long, {"chunk_length_s": 0.5, "stride_length_s": (0.1, 0.15), "return_timestamps": "word"}),
        ([short, long[:9000], short[:5000]], {"batch_size": 2}),
    ]
    if variant == "layer":  # the pipeline's own logic does not depend on the variant: the rest once
        cases += [
            (short, {}),
            (long, {"chunk_length_s": 0.6}),
            ({"raw": long, "sampling_rate": RATE}, {"chunk_length_s": 0.4, "stride_length_s": 0.1}),
            ([long, short], {"batch_size": 2, "chunk_length_s": 0.45}),
        ]
    for inputs, kwargs in cases:
        copy = [x.copy() for x in inputs] if isinstance(inputs, list) else inputs
        want = theirs(dict(copy) if isinstance(copy, dict) else copy, **kwargs)
        got = ours(dict(inputs) if isinstance(inputs, dict) else inputs, **kwargs)
        if got != want:  # two implementations' argmax may differ only where the logits tie
            assert_frames_near_a_tie(theirs, copy, kwargs)
    assert ours(long)["text"], "one pass over the long input should give text"


def assert_frames_near_a_tie(pipe: Any, inputs: Any, what: Any) -> None:
    """Explain two transcripts that differ: some frame of ``pipe``'s model on the (unchunked) audio has its two
    best tokens within 1e-4, where two kernels' roundings may pick either (the numeric policy's near tie)."""
    audios = inputs if isinstance(inputs, list) else [inputs["raw"] if isinstance(inputs, dict) else inputs]
    gaps = []
    for audio in audios:
        features = pipe.feature_extractor(audio, sampling_rate=RATE, return_tensors="pt")
        with torch.no_grad():
            top = pipe.model(features["input_values"]).logits.topk(2, dim=-1).values
        gaps.append(float((top[..., 0] - top[..., 1]).min()))
    assert min(gaps) <= 1e-4, f"{what}: transcripts differ, but no frame is a near tie (smallest top-2 gap {min(gaps):.3g})"


def test_chunking_gives_one_pass_text_where_the_audio_fits(checkpoints: dict) -> None:
    ours, _ = _pipelines(checkpoints["layer"][0])
    audio = tone(0.9, 500, seed=11)
    one_pass = ours(audio, return_timestamps="word")
    # a chunk is a differently shaped (padded) input: the same text, unless a frame's two best tokens tie
    for chunked in (
        ours(audio, chunk_length_s=1.0, return_timestamps="word"),
        ours(audio, chunk_length_s=2.0, stride_length_s=0.5, return_timestamps="word"),
    ):
        if chunked != one_pass:
            assert_frames_near_a_tie(ours, audio, "chunked vs one pass")


def test_audio_classification_pipeline_matches(tmp_path: Path) -> None:
    transformers = reference_module()
    labels = {0: "yes", 1: "no", 2: "up", 3: "down"}
    model = make_reference_model(
        "Wav2Vec2Config", "Wav2Vec2ForSequenceClassification", seed=5, **TINY, id2label=labels,
        label2id={v: k for k, v in labels.items()},
    )  # fmt: skip
    model.save_pretrained(tmp_path)
    transformers.Wav2Vec2FeatureExtractor().save_pretrained(tmp_path)
    ours, theirs = _pipelines(tmp_path, "audio-classification")
    for kwargs in ({}, {"top_k": 2}, {"function_to_apply": "sigmoid"}):
        got, want = ours(tone(0.5, seed=12), **kwargs), theirs(tone(0.5, seed=12), **kwargs)
        assert [g["label"] for g in got] == [w["label"] for w in want], kwargs
        np.testing.assert_allclose([g["score"] for g in got], [w["score"] for w in want], atol=1e-6)


# -- files both ways ---------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_checkpoints_and_processors_load_both_ways(checkpoints: dict, variant: str, tmp_path: Path) -> None:
    transformers = reference_module()
    folder, reference = checkpoints[variant]
    ours = microformers.AutoModelForCTC.from_pretrained(folder)
    processor = microformers.AutoProcessor.from_pretrained(folder)
    ours.save_pretrained(tmp_path)
    processor.save_pretrained(tmp_path)
    back = transformers.AutoModelForCTC.from_pretrained(tmp_path).eval()
    back_processor = transformers.AutoProcessor.from_pretrained(tmp_path)
    assert type(back_processor).__name__ == "Wav2Vec2Processor"
    assert (
        back_processor.feature_extractor.to_dict()
        == reference_module().AutoProcessor.from_pretrained(folder).feature_extractor.to_dict()
    )
    inputs = back_processor(audio=tone(0.5), sampling_rate=RATE, return_tensors="pt")
    with torch.no_grad():
        assert_close(back(**inputs).logits, reference(**inputs).logits, atol=1e-6)
    # The older layout (preprocessor_config.json, no processor_class anywhere) is read through the model type.
    legacy = tmp_path / "legacy"
    reference.save_pretrained(legacy)
    back_processor.feature_extractor.save_pretrained(legacy)
    back_processor.tokenizer.save_pretrained(legacy)
    config = json.loads((legacy / "tokenizer_config.json").read_text())
    config.pop("processor_class", None)
    (legacy / "tokenizer_config.json").write_text(json.dumps(config))
    loaded = microformers.AutoProcessor.from_pretrained(legacy)
    assert type(loaded).__name__ == "Wav2Vec2Processor"
    assert type(microformers.AutoFeatureExtractor.from_pretrained(legacy)).__name__ == "Wav2Vec2FeatureExtractor"
