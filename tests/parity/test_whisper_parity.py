"""Whisper (microformers-whisper) against the reference on tiny random checkpoints, both directions.

Model numbers (logits, loss, hidden states, attentions, cached decoding, audio classification), checkpoints
saved either side, the feature extractor, the tokenizer and ``generate``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from microformers_sdk.testing import one_thread  # noqa: F401  (an autouse fixture, found by name)
from parity.harness import (
    assert_close,
    assert_same_state_dict,
    load_ours,
    load_reference,
    make_reference_checkpoint,
    random_ids,
)

pytest.importorskip("transformers")

VOCAB = 120
TINY: dict[str, Any] = {
    "vocab_size": VOCAB,
    "num_mel_bins": 16,
    "d_model": 32,
    "encoder_layers": 2,
    "decoder_layers": 3,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 2,
    "encoder_ffn_dim": 40,
    "decoder_ffn_dim": 48,
    "max_source_positions": 30,
    "max_target_positions": 40,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "decoder_start_token_id": 3,
    "begin_suppress_tokens": None,
}


def features(batch: int = 2, mel: int = 16, frames: int = 60, seed: int = 0) -> torch.Tensor:
    return torch.randn(batch, mel, frames, generator=torch.Generator().manual_seed(seed))


def pair(tmp_path: Path, model_cls: str, auto: str, **overrides: Any) -> tuple[Any, Any, Path]:
    """(ours, reference) on one saved random checkpoint; the reference reloaded from the folder."""
    folder, _ = make_reference_checkpoint("WhisperConfig", model_cls, tmp_path, **{**TINY, **overrides})
    reference = load_reference(folder, model_cls, attn_implementation="eager")
    return load_ours(folder, auto), reference, folder


@pytest.mark.parametrize("auto", ["AutoModelForSpeechSeq2Seq", "AutoModelForSeq2SeqLM"])
def test_conditional_generation_logits_loss_states(tmp_path: Path, auto: str) -> None:
    ours, reference, _ = pair(tmp_path, "WhisperForConditionalGeneration", auto)
    assert type(ours).__name__ == "WhisperForConditionalGeneration"
    feats, labels = features(), random_ids(VOCAB, 2, 7, seed=1)
    labels[1, -2:] = -100
    with torch.no_grad():
        got = ours(feats, labels=labels, output_attentions=True, output_hidden_states=True)
        want = reference(feats, labels=labels, output_attentions=True, output_hidden_states=True)
    assert_close(got.logits, want.logits)
    assert_close(got.loss, want.loss, what="loss")
    for name in ("encoder_hidden_states", "decoder_hidden_states", "encoder_attentions", "decoder_attentions",
                 "cross_attentions"):  # fmt: skip
        mine, theirs = getattr(got, name), getattr(want, name)
        assert len(mine) == len(theirs), name
        for index, (a, b) in enumerate(zip(mine, theirs)):
            assert_close(a, b, what=f"{name}[{index}]")


def test_base_model_and_decoder_mask(tmp_path: Path) -> None:
    ours, reference, _ = pair(tmp_path, "WhisperModel", "AutoModel")
    decoder_ids = random_ids(VOCAB, 2, 6, seed=2)
    mask = torch.ones(2, 6, dtype=torch.long)
    mask[1, :2] = 0
    with torch.no_grad():
        got = ours(features(), decoder_input_ids=decoder_ids, decoder_attention_mask=mask)
        want = reference(features(), decoder_input_ids=decoder_ids, decoder_attention_mask=mask)
    assert_close(got.last_hidden_state, want.last_hidden_state, what="last_hidden_state", mask=mask)
    assert_close(got.encoder_last_hidden_state, want.encoder_last_hidden_state, what="encoder_last_hidden_state")


def test_cached_decoding_matches_full_forward_and_reference(tmp_path: Path) -> None:
    ours, reference, _ = pair(tmp_path, "WhisperForConditionalGeneration", "AutoModelForSpeechSeq2Seq")
    decoder_ids = random_ids(VOCAB, 2, 6, seed=3)
    with torch.no_grad():
        full = reference(features(), decoder_input_ids=decoder_ids).logits
        encoded = ours.get_encoder()(input_features=features(), return_dict=True)
        cache, steps = None, []
        for start, end in ((0, 3), (3, 4), (4, 5), (5, 6)):
            step = ours(
                encoder_outputs=encoded, decoder_input_ids=decoder_ids[:, start:end], past_key_values=cache,
                use_cache=True, return_dict=True,
            )  # fmt: skip
            cache = step.past_key_values
            steps.append(step.logits)
    assert cache.get_seq_length() == 6
    assert_close(torch.cat(steps, dim=1), full, what="cached decoding vs the reference's full forward")


@pytest.mark.parametrize("weighted", [False, True])
def test_audio_classification(tmp_path: Path, weighted: bool) -> None:
    ours, reference, _ = pair(
        tmp_path, "WhisperForAudioClassification", "AutoModelForAudioClassification",
        use_weighted_layer_sum=weighted, num_labels=3, classifier_proj_size=12,
        vocab_size=51865,  # a real checkpoint's: above every tensor dimension of this head, which has no embeddings
    )  # fmt: skip
    labels = torch.tensor([0, 2])
    with torch.no_grad():
        got, want = ours(features(), labels=labels), reference(features(), labels=labels)
    assert_close(got.logits, want.logits)
    assert_close(got.loss, want.loss, what="loss")


def test_checkpoints_both_ways(tmp_path: Path) -> None:
    ours, _, folder = pair(tmp_path, "WhisperForConditionalGeneration", "AutoModelForSpeechSeq2Seq")
    from safetensors.torch import load_file

    saved = tmp_path / "ours"
    ours.save_pretrained(saved)
    theirs = load_file(str(folder / "model.safetensors"))
    mine = load_file(str(saved / "model.safetensors"))
    assert_same_state_dict(mine, theirs)
    back = load_reference(saved, "WhisperForConditionalGeneration")
    decoder_ids = random_ids(VOCAB, 2, 5, seed=4)
    with torch.no_grad():
        assert_close(back(features(), decoder_input_ids=decoder_ids).logits,
                     ours(features(), decoder_input_ids=decoder_ids).logits)  # fmt: skip
    assert ours.proj_out.weight is ours.model.decoder.embed_tokens.weight


def test_wrong_frame_count_is_a_clear_error(tmp_path: Path) -> None:
    from microformers_whisper import WhisperInputError

    ours, _, _ = pair(tmp_path, "WhisperForConditionalGeneration", "AutoModelForSpeechSeq2Seq")
    with pytest.raises(WhisperInputError, match="max_source_positions=30"):
        ours(features(frames=50), decoder_input_ids=random_ids(VOCAB, 2, 3))
    with pytest.raises(WhisperInputError, match="num_mel_bins=16"):
        ours(features(mel=8), decoder_input_ids=random_ids(VOCAB, 2, 3))


# -- feature extractor -------------------------------------------------------------------------------------
@pytest.mark.parametrize("mel", [80, 128])
@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"return_attention_mask": True},
        {"padding": "longest", "return_attention_mask": True},
        {"do_normalize": True},
    ],
)
def test_feature_extractor_matches_reference(mel: int, settings: dict[str, Any]) -> None:
    import numpy as np
    import transformers

    from microformers_whisper import WhisperFeatureExtractor

    rng = np.random.default_rng(mel)
    batch = [rng.standard_normal(n).astype(np.float32) * 0.1 for n in (8000, 16000 * 31, 12345)]
    ours = WhisperFeatureExtractor(feature_size=mel)
    reference = transformers.WhisperFeatureExtractor(feature_size=mel)
    for audio in (batch, batch[0]):
        got = ours(audio, sampling_rate=16000, return_tensors="np", **settings)
        want = reference(audio, sampling_rate=16000, return_tensors="np", **settings)
        assert set(got) == set(want)
        for key in want:
            assert got[key].shape == want[key].shape, key
            assert np.abs(got[key].astype(np.float64) - want[key]).max() <= 1e-5, key


def test_feature_extractor_files_both_ways(tmp_path: Path) -> None:
    import transformers

    from microformers import AutoFeatureExtractor

    transformers.WhisperFeatureExtractor(feature_size=128).save_pretrained(tmp_path / "theirs")
    ours = AutoFeatureExtractor.from_pretrained(tmp_path / "theirs")
    assert type(ours).__name__ == "WhisperFeatureExtractor" and ours.feature_size == 128
    ours.save_pretrained(tmp_path / "ours")
    back = transformers.WhisperFeatureExtractor.from_pretrained(tmp_path / "ours")
    assert back.feature_size == 128 and back.n_fft == 400 and back.hop_length == 160


# -- tokenizer ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tokenizer_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "plugins" / "whisper" / "tests"))
    from tiny_whisper import build_tokenizer

    folder = tmp_path_factory.mktemp("whisper-tokenizer")
    build_tokenizer(folder)
    return folder


def test_tokenizer_ids_prefixes_and_decoding(tokenizer_folder: Path) -> None:
    import transformers

    from microformers import AutoTokenizer

    ours = AutoTokenizer.from_pretrained(tokenizer_folder)
    reference = transformers.AutoTokenizer.from_pretrained(tokenizer_folder)
    assert type(ours).__name__ == "WhisperTokenizerFast"
    texts = ["hello world", " the quick brown fox!", "Ça va? 2026"]
    for language, task, timestamps in (("en", "transcribe", False), ("french", "translate", True), (None, None, False)):
        ours.set_prefix_tokens(language=language, task=task, predict_timestamps=timestamps)
        reference.set_prefix_tokens(language=language, task=task, predict_timestamps=timestamps)
        assert ours.prefix_tokens == reference.prefix_tokens
        for text in texts:
            assert ours(text).input_ids == reference(text).input_ids
        assert ours.get_decoder_prompt_ids(task="transcribe", language="de") == reference.get_decoder_prompt_ids(
            task="transcribe", language="de"
        )

    def token(name: str) -> int:
        return reference.convert_tokens_to_ids(name)

    def words(text: str) -> list[int]:
        return reference(text, add_special_tokens=False).input_ids

    begin = token("<|0.00|>")
    sequence = [
        token("<|startoftranscript|>"), token("<|en|>"), token("<|transcribe|>"), begin, *words(" hello world"),
        begin + 50, begin + 50, *words(" the fox"), begin + 120, begin + 10, *words(" dog"), begin + 30,
        token("<|endoftext|>"),
    ]  # fmt: skip
    prompted = [token("<|startofprev|>"), *words(" a prompt"), *sequence]
    for settings in ({}, {"skip_special_tokens": True}, {"decode_with_timestamps": True}, {"output_offsets": True},
                     {"output_offsets": True, "skip_special_tokens": True}):  # fmt: skip
        assert ours.decode(sequence, **settings) == reference.decode(sequence, **settings), settings
        assert ours.decode(prompted, **settings) == reference.decode(prompted, **settings), settings
    assert ours.batch_decode([sequence, sequence], skip_special_tokens=True) == reference.batch_decode(
        [sequence, sequence], skip_special_tokens=True
    )
    # the reference strips a prompt row by row in decode() but not in batch_decode(); ours strips it in both
    assert ours.batch_decode([prompted], skip_special_tokens=True) == [ours.decode(prompted, skip_special_tokens=True)]
    assert list(ours.get_prompt_ids("hi there")) == list(reference.get_prompt_ids("hi there"))


def test_tokenizer_and_processor_files_both_ways(tokenizer_folder: Path, tmp_path: Path) -> None:
    import transformers

    from microformers import AutoProcessor, AutoTokenizer
    from microformers_whisper import WhisperFeatureExtractor, WhisperProcessor

    ours = AutoTokenizer.from_pretrained(tokenizer_folder, language="en", task="transcribe")
    processor = WhisperProcessor(feature_extractor=WhisperFeatureExtractor(feature_size=80), tokenizer=ours)
    processor.save_pretrained(tmp_path / "ours")
    theirs = transformers.WhisperProcessor.from_pretrained(tmp_path / "ours")
    again = AutoProcessor.from_pretrained(tmp_path / "ours")
    assert type(again).__name__ == "WhisperProcessor"
    for text in ("hello world", "the lazy dog."):
        assert again.tokenizer(text).input_ids == theirs.tokenizer(text).input_ids == ours(text).input_ids


# -- generate ----------------------------------------------------------------------------------------------
def generation_pair(tmp_path: Path, vocab_size: int) -> tuple[Any, Any, dict[str, int]]:
    """A 30 s, 80-mel tiny model whose vocabulary is the test tokenizer's, with a multilingual generation config."""
    import json
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "plugins" / "whisper" / "tests"))
    from tiny_whisper import build_tokenizer

    ids = build_tokenizer(tmp_path / "tokenizer")
    settings = {
        **TINY, "vocab_size": vocab_size, "num_mel_bins": 80, "max_source_positions": 1500,
        "max_target_positions": 64, "pad_token_id": ids["<|endoftext|>"], "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|endoftext|>"], "decoder_start_token_id": ids["<|startoftranscript|>"],
        "begin_suppress_tokens": [220, ids["<|endoftext|>"]], "suppress_tokens": [1, 2, ids["<|startofprev|>"]],
    }  # fmt: skip
    folder, _ = make_reference_checkpoint(
        "WhisperConfig", "WhisperForConditionalGeneration", tmp_path, seed=3, **settings
    )
    config = json.loads((folder / "generation_config.json").read_text())
    config.pop("_from_model_config", None)  # else the reference rebuilds it from config.json and drops the rest
    config.update(
        lang_to_id={f"<|{code}|>": ids[f"<|{code}|>"] for code in ("en", "de", "fr", "es")},
        task_to_id={"transcribe": ids["<|transcribe|>"], "translate": ids["<|translate|>"]},
        no_timestamps_token_id=ids["<|notimestamps|>"],
        is_multilingual=True,
        max_initial_timestamp_index=50,
        max_length=30,
        prev_sot_token_id=ids["<|startofprev|>"],
        alignment_heads=[[1, 0], [2, 1], [0, 1]],
    )
    (folder / "generation_config.json").write_text(json.dumps(config))
    reference = load_reference(folder, "WhisperForConditionalGeneration")
    return load_ours(folder, "AutoModelForSpeechSeq2Seq"), reference, ids


def mel_batch() -> torch.Tensor:
    return features(batch=2, mel=80, frames=3000)


# Without timestamp tokens in the vocabulary (408 = up to <|notimestamps|>) the reference decodes one window per
# call; a random model emitting timestamps would send it into its multi-window loop.
@pytest.mark.parametrize(
    "settings",
    [
        {},  # language detected from the first step's logits
        {"language": "de"},
        {"language": "english", "task": "translate"},
        {"language": ["fr", "es"], "max_new_tokens": 5},
        {"num_beams": 3, "language": "en"},
        {"prompt_ids": [405, 100, 101]},
    ],
)
def test_generate_matches_reference(tmp_path: Path, settings: dict[str, Any]) -> None:
    from microformers_sdk.testing import assert_similar_generation

    ours, reference, _ = generation_pair(tmp_path, 408)
    if "prompt_ids" in settings:
        settings = {**settings, "prompt_ids": torch.tensor(settings["prompt_ids"])}
    got, want = ours.generate(mel_batch(), **settings), reference.generate(mel_batch(), **settings)
    assert_similar_generation(got, want)


@pytest.mark.parametrize("settings", [{"language": "de"}, {"num_beams": 3, "language": "en"}])
def test_generate_return_dict_in_generate_argument_matches_reference(tmp_path: Path, settings: dict[str, Any]) -> None:
    from microformers_sdk.testing import assert_close, assert_similar_generation

    ours, reference, _ = generation_pair(tmp_path, 408)
    settings = {**settings, "return_dict_in_generate": True, "output_scores": True, "max_new_tokens": 6}
    got, want = ours.generate(mel_batch(), **settings), reference.generate(mel_batch(), **settings)
    assert type(got).__name__ == type(want).__name__
    assert_similar_generation(got.sequences, want.sequences)
    assert len(got.scores) == len(want.scores)
    assert_close(torch.stack(got.scores), torch.stack(want.scores), rtol=1e-4, atol=1e-4)
    if "num_beams" in settings:
        assert_close(got.sequences_scores, want.sequences_scores, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("settings", [{"language": "fr"}, {"num_beams": 2}])
def test_generate_with_timestamps_matches_reference(tmp_path: Path, settings: dict[str, Any]) -> None:
    from microformers_sdk.testing import assert_similar_generation

    ours, reference, ids = generation_pair(tmp_path, 1908)
    settings = {**settings, "return_timestamps": True, "force_unique_generate_call": True}
    got, want = ours.generate(mel_batch(), **settings), reference.generate(mel_batch(), **settings)
    assert_similar_generation(got, want)
    assert bool((got[:, 3:] >= ids["<|0.00|>"]).any())


@pytest.mark.parametrize("settings", [{"return_timestamps": True}, {"language": "de", "return_timestamps": True}])
def test_generate_windows_with_timestamps_match_reference(tmp_path: Path, settings: dict[str, Any]) -> None:
    """Without force_unique_generate_call the reference decodes window after window, resuming at the last
    complete segment, even within 30 s."""
    from microformers_sdk.testing import assert_similar_generation

    ours, reference, _ = generation_pair(tmp_path, 1908)
    got, want = ours.generate(mel_batch(), **settings), reference.generate(mel_batch(), **settings)
    assert_similar_generation(got, want)


def test_long_form_matches_reference(tmp_path: Path) -> None:
    """Over 30 s: sequential windows with timestamps; a padded batch says where each row ends."""
    from microformers_sdk.testing import assert_similar_generation

    ours, reference, _ = generation_pair(tmp_path, 1908)
    audio = features(batch=2, mel=80, frames=7000, seed=5)
    mask = torch.ones(2, 7000, dtype=torch.long)
    mask[1, 5200:] = 0
    audio[1, :, 5200:] = 0
    settings = {"attention_mask": mask, "language": "en"}
    got, want = ours.generate(audio, **settings), reference.generate(audio, **settings)
    assert_similar_generation(got, want)
    assert got.shape[1] > 40  # several windows' worth of tokens
    single = features(batch=1, mel=80, frames=4500, seed=6)
    assert_similar_generation(ours.generate(single), reference.generate(single))


@pytest.mark.parametrize("vocab_size", [408, 1908])
@pytest.mark.parametrize(
    "settings",
    [
        {"temperature": (0.0, 0.2, 0.4), "compression_ratio_threshold": 1.35},
        {"temperature": (0.0, 0.2, 0.4), "logprob_threshold": -1.0},
        {"temperature": (0.0, 0.5), "logprob_threshold": -20.0, "compression_ratio_threshold": 100.0},
    ],
)
def test_temperature_fallback_matches_reference(tmp_path: Path, vocab_size: int, settings: dict[str, Any]) -> None:
    """Windows too repetitive or too unlikely are decoded again by sampling at the next temperature (same seed,
    same draws as the reference)."""
    from microformers_sdk.testing import assert_similar_generation

    ours, reference, _ = generation_pair(tmp_path, vocab_size)
    if vocab_size > 408:
        settings = {**settings, "return_timestamps": True}
    torch.manual_seed(0)
    want = reference.generate(mel_batch(), **settings)
    torch.manual_seed(0)
    got = ours.generate(mel_batch(), **settings)
    assert_similar_generation(got, want)
    if "compression_ratio_threshold" in settings and settings["compression_ratio_threshold"] < 2:
        greedy = ours.generate(mel_batch(), return_timestamps=settings.get("return_timestamps"))
        assert got.shape != greedy.shape or not torch.equal(got, greedy)  # the fallback did run


@pytest.mark.parametrize(
    "settings",
    [
        {"condition_on_prev_tokens": True},
        {"condition_on_prev_tokens": True, "prompt_ids": [405, 100, 101]},
        {"prompt_ids": [405, 100, 101]},
        {"condition_on_prev_tokens": True, "temperature": (0.0, 0.6), "compression_ratio_threshold": 1.35},
    ],
)
def test_long_form_conditioning_and_prompts_match_reference(tmp_path: Path, settings: dict[str, Any]) -> None:
    """Each window after the first starts from the previous windows' text (rows of a batch left-padded, positions
    counted from each row's first real token)."""
    from microformers_sdk.testing import assert_similar_generation

    ours, reference, _ = generation_pair(tmp_path, 1908)
    audio = features(batch=2, mel=80, frames=9000, seed=5)
    mask = torch.ones(2, 9000, dtype=torch.long)
    mask[1, 6200:] = 0
    audio[1, :, 6200:] = 0
    if "prompt_ids" in settings:
        settings = {**settings, "prompt_ids": torch.tensor(settings["prompt_ids"])}
    torch.manual_seed(0)
    want = reference.generate(audio, attention_mask=mask, **settings)
    torch.manual_seed(0)
    got = ours.generate(audio, attention_mask=mask, **settings)
    assert_similar_generation(got, want)


@pytest.mark.parametrize(
    "settings",
    [
        {"return_timestamps": True, "with_mask": True},  # windows, aligned within the audio's frames
        # one call (the prompt's tokens at 0 s); the weights follow the kept beams
        {"num_beams": 3, "language": "en", "force_unique_generate_call": True},
    ],
)
def test_token_timestamps_match_reference(tmp_path: Path, settings: dict[str, Any]) -> None:
    """Cross-attention of the alignment heads, median filter and dynamic time warping give the reference's times."""
    from microformers_sdk.testing import assert_similar_generation

    ours, reference, _ = generation_pair(tmp_path, 1908)
    settings = dict(settings)
    if settings.pop("with_mask", False):
        mask = torch.ones(2, 3000, dtype=torch.long)
        mask[1, 1800:] = 0
        settings["attention_mask"] = mask
    got = ours.generate(mel_batch(), return_token_timestamps=True, **settings)
    want = reference.generate(mel_batch(), return_token_timestamps=True, **settings)
    assert_similar_generation(got["sequences"], want["sequences"])
    assert got["token_timestamps"].shape == want["token_timestamps"].shape
    assert_close(got["token_timestamps"], want["token_timestamps"], atol=1e-4, what="token timestamps")
    assert float(got["token_timestamps"].max()) > 0


def test_long_form_token_timestamps_and_segments_match_reference(tmp_path: Path) -> None:
    """Over 30 s: each segment's times and token times carry its window's offset; the joined times do not."""
    from microformers_sdk.testing import assert_similar_generation

    ours, reference, _ = generation_pair(tmp_path, 1908)
    audio = features(batch=1, mel=80, frames=4500, seed=6)
    settings = {"attention_mask": torch.ones(1, 4500, dtype=torch.long), "return_token_timestamps": True,
                "return_segments": True}  # fmt: skip
    got, want = ours.generate(audio, **settings), reference.generate(audio, **settings)
    assert_similar_generation(got["sequences"], want["sequences"])
    assert_close(got["token_timestamps"], want["token_timestamps"], atol=1e-4, what="token timestamps")
    mine, theirs = got["segments"][0], want["segments"][0]
    assert len(mine) == len(theirs) > 1
    for a, b in zip(mine, theirs):
        assert a["tokens"].tolist() == b["tokens"].tolist() and a["idxs"] == tuple(b["idxs"])
        assert abs(a["start"] - float(b["start"])) < 1e-9 and abs(a["end"] - float(b["end"])) < 1e-9
        assert_close(a["token_timestamps"], b["token_timestamps"], atol=1e-4, what="segment token times")
    assert float(mine[-1]["token_timestamps"].max()) > 30  # the second window's offset


def test_no_speech_threshold_skips_windows_as_reference(tmp_path: Path) -> None:
    """A window too unlikely (logprob_threshold) whose <|nospeech|> probability is above no_speech_threshold is
    skipped whole; the others are kept."""
    from microformers_sdk.testing import assert_similar_generation

    ours, reference, _ = generation_pair(tmp_path, 1908)
    audio = features(batch=2, mel=80, frames=9000, seed=5)
    mask = torch.ones(2, 9000, dtype=torch.long)
    mask[1, 6200:] = 0
    audio[1, :, 6200:] = 0
    settings = {"attention_mask": mask, "temperature": 0.0, "logprob_threshold": -1.0, "no_speech_threshold": 5e-4}
    got, want = ours.generate(audio, **settings), reference.generate(audio, **settings)
    assert_similar_generation(got, want.long())  # the reference's rows are floats when one row lost every window
    everything = ours.generate(audio, attention_mask=mask)
    assert 0 < got.shape[1] < everything.shape[1]


def test_generate_bad_settings_are_clear_errors(tmp_path: Path) -> None:
    from microformers import GenerationError

    ours, _, _ = generation_pair(tmp_path, 408)
    with pytest.raises(GenerationError, match="language='ja'"):
        ours.generate(mel_batch(), language="ja")
    with pytest.raises(GenerationError, match="task="):
        ours.generate(mel_batch(), task="summarize")
    with pytest.raises(GenerationError, match="return_timestamps=False"):
        ours.generate(features(batch=1, mel=80, frames=3100), return_timestamps=False)
    with pytest.raises(GenerationError, match="attention_mask"):
        ours.generate(features(batch=2, mel=80, frames=3100))
    with pytest.raises(GenerationError, match="return_timestamps"):
        ours.generate(mel_batch(), return_timestamps=True)  # 408 tokens: none after <|notimestamps|>
    with pytest.raises(GenerationError, match="logprob_threshold"):
        ours.generate(mel_batch(), no_speech_threshold=0.6)
    del ours.generation_config.extra["alignment_heads"]
    with pytest.raises(GenerationError, match="alignment_heads"):
        ours.generate(mel_batch(), return_token_timestamps=True)
    del ours.generation_config.extra["no_timestamps_token_id"]
    with pytest.raises(GenerationError, match="return_timestamps"):
        ours.generate(mel_batch(), return_timestamps=True)


# -- automatic-speech-recognition pipeline -----------------------------------------------------------------
def make_whisper_folder(tmp_path: Path, vocab_size: int = 408) -> Path:
    """A complete tiny Whisper folder: model, generation config, tokenizer, feature extractor."""
    import shutil

    import transformers

    ours, _, _ = generation_pair(tmp_path, vocab_size)
    folder = Path(ours.name_or_path)
    for file in (tmp_path / "tokenizer").iterdir():
        shutil.copy(file, folder / file.name)
    transformers.WhisperFeatureExtractor().save_pretrained(folder)
    return folder


@pytest.fixture
def whisper_folder(tmp_path: Path) -> Path:
    return make_whisper_folder(tmp_path)


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"generate_kwargs": {"language": "de"}},
        {"generate_kwargs": {"num_beams": 1}, "max_new_tokens": 12},
        {"chunk_length_s": 10, "batch_size": 2},
        {"chunk_length_s": 30},
    ],
)
def test_pipeline_matches_reference(whisper_folder: Path, settings: dict[str, Any]) -> None:
    import numpy as np
    import transformers

    from microformers import pipeline

    audio = np.random.default_rng(0).standard_normal(16000 * (50 if "chunk_length_s" in settings else 5)) * 0.1
    audio = audio.astype(np.float32)
    ours = pipeline("automatic-speech-recognition", model=str(whisper_folder))
    reference = transformers.pipeline("automatic-speech-recognition", model=str(whisper_folder))
    assert ours(audio.copy(), **settings) == reference(audio.copy(), **settings)


def test_pipeline_bad_input_is_a_clear_error(whisper_folder: Path) -> None:
    import numpy as np

    from microformers import GenerationError, pipeline
    from microformers.errors import ConfigError
    from microformers_audio import AudioInputError

    asr = pipeline("automatic-speech-recognition", model=str(whisper_folder))
    with pytest.raises(AudioInputError, match="empty"):
        asr(np.zeros(0, np.float32))
    with pytest.raises(AudioInputError, match="NaN"):
        asr(np.array([0.1, np.nan] * 100, np.float32))
    with pytest.raises(ConfigError, match="'word'"):
        asr(np.zeros(1600, np.float32), return_timestamps="char")
    with pytest.raises(GenerationError, match="return_timestamps"):  # this model has no timestamp tokens
        asr(np.zeros(1600, np.float32), return_timestamps="word")
    del asr.model.generation_config.extra["alignment_heads"]
    with pytest.raises(ConfigError, match="alignment_heads"):
        asr(np.zeros(1600, np.float32), return_timestamps="word")


@pytest.mark.parametrize(
    ("seconds", "settings"),
    [
        (50, {}),
        (5, {"return_timestamps": True}),
        (50, {"return_timestamps": True}),
        (5, {"return_timestamps": "word"}),  # a second window starts after the audio's end
        (50, {"return_timestamps": "word", "generate_kwargs": {"num_beams": 1}}),
        (5, {"return_language": True, "return_timestamps": True}),
        (20, {"return_language": True, "chunk_length_s": 10, "generate_kwargs": {"num_beams": 1}}),
        # overlapping pieces: timestamps inside a piece's strides are not cut at, texts joined where they overlap
        (
            10,
            {
                "return_timestamps": "word",
                "chunk_length_s": 6,
                "stride_length_s": (2, 1),
                "batch_size": 2,
                "generate_kwargs": {"num_beams": 1},
            },
        ),
    ],
)
def test_pipeline_long_audio_timestamps_and_language_match_reference(
    tmp_path: Path, seconds: int, settings: dict[str, Any]
) -> None:
    """Over 30 s without chunk_length_s the model decodes window by window; segment and word chunks (times from
    the alignment heads) and languages are the reference's, also from overlapping pieces (chunk_length_s)."""
    import numpy as np
    import transformers

    from microformers import pipeline

    folder = make_whisper_folder(tmp_path, 1908)
    audio = (np.random.default_rng(1).standard_normal(16000 * seconds) * 0.1).astype(np.float32)
    ours = pipeline("automatic-speech-recognition", model=str(folder))(audio.copy(), **settings)
    want = transformers.pipeline("automatic-speech-recognition", model=str(folder))(audio.copy(), **settings)
    assert ours == want
    if settings:
        assert len(ours["chunks"]) > 1 if "return_timestamps" in settings else ours["chunks"][0]["language"]
