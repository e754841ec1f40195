"""microformers-whisper through the SDK's plugin checks, plus the model's own behaviour on a tiny config."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from microformers_sdk.testing import PluginConformanceTests
from microformers_whisper.configuration_whisper import WhisperConfig
from microformers_whisper.modeling_whisper import (
    WhisperForAudioClassification,
    WhisperForConditionalGeneration,
    WhisperInputError,
    WhisperModel,
)

TINY: dict[str, Any] = {
    "vocab_size": 50,
    "num_mel_bins": 8,
    "d_model": 16,
    "encoder_layers": 1,
    "decoder_layers": 2,
    "encoder_attention_heads": 2,
    "decoder_attention_heads": 2,
    "encoder_ffn_dim": 20,
    "decoder_ffn_dim": 24,
    "max_source_positions": 10,
    "max_target_positions": 12,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "decoder_start_token_id": 3,
    "begin_suppress_tokens": None,
}


class TestWhisperPluginConformance(PluginConformanceTests):
    plugin_name = "whisper"
    registers = (("configs", "whisper"), ("processors", "WhisperFeatureExtractor"), ("tokenizers", "whisper"))


def tiny_features(batch: int = 2, frames: int = 20) -> torch.Tensor:
    return torch.randn(batch, 8, frames, generator=torch.Generator().manual_seed(0))


def test_encoder_positions_are_sinusoids_and_heads_are_tied() -> None:
    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(WhisperConfig(**TINY)).eval()
    table = model.model.encoder.embed_positions.weight
    assert table.shape == (10, 16) and not table.requires_grad
    assert torch.allclose(table[0, :8], torch.zeros(8)) and torch.allclose(table[0, 8:], torch.ones(8))
    assert model.proj_out.weight is model.model.decoder.embed_tokens.weight


def test_save_load_and_cached_decoding(tmp_path: Any) -> None:
    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(WhisperConfig(**TINY)).eval()
    model.save_pretrained(tmp_path)
    loaded = WhisperForConditionalGeneration.from_pretrained(tmp_path).eval()
    ids = torch.tensor([[3, 5, 6, 7], [3, 8, 9, 10]])
    with torch.no_grad():
        full = model(tiny_features(), decoder_input_ids=ids).logits
        first = loaded(tiny_features(), decoder_input_ids=ids[:, :2], use_cache=True)
        rest = loaded(
            encoder_outputs=(first.encoder_last_hidden_state,), decoder_input_ids=ids[:, 2:],
            past_key_values=first.past_key_values, use_cache=True,
        )  # fmt: skip
    assert torch.allclose(torch.cat([first.logits, rest.logits], 1), full, atol=1e-5)


def test_labels_give_a_loss_and_gradients() -> None:
    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(WhisperConfig(**TINY))
    labels = torch.tensor([[5, 6, 2, -100], [7, 8, 9, 2]])
    out = model(tiny_features(), labels=labels)
    out.loss.backward()
    assert out.logits.shape == (2, 4, 50)
    assert model.model.encoder.conv1.weight.grad is not None


def test_bad_inputs_name_the_setting() -> None:
    model = WhisperModel(WhisperConfig(**TINY)).eval()
    with pytest.raises(WhisperInputError, match="max_source_positions"):
        model(tiny_features(frames=18), decoder_input_ids=torch.tensor([[3]]))
    with pytest.raises(WhisperInputError, match="max_target_positions"):
        model(tiny_features(batch=1), decoder_input_ids=torch.zeros(1, 13, dtype=torch.long))
    with pytest.raises(WhisperInputError, match="input_features"):
        model(decoder_input_ids=torch.tensor([[3]]))


def test_audio_classification_shapes() -> None:
    model = WhisperForAudioClassification(WhisperConfig(**TINY, num_labels=4, use_weighted_layer_sum=True)).eval()
    out = model(tiny_features(), labels=torch.tensor([1, 3]))
    assert out.logits.shape == (2, 4) and out.loss is not None


def test_window_segmentation_rules() -> None:
    from microformers_whisper.generation_whisper import _segment_times, _windows_of

    begin = 100  # <|0.00|>
    # two closed pairs then a lone closing timestamp: the window is consumed whole
    tokens = [100, 5, 6, 110, 110, 7, 120]
    slices, advance = _windows_of(tokens, begin, 3000, 2)
    assert [tokens[a:b] for a, b in slices] == [[100, 5, 6, 110], [110, 7, 120]] and advance == 3000
    assert _segment_times(tokens, slices, begin, 3000, 1.0, 0.02) == [(1.0, 1.2), (1.2, 1.4)]
    # ends inside a segment: resume at the last complete one's end (timestamp 10 -> 20 frames)
    tokens = [100, 5, 110, 110, 7, 8]
    slices, advance = _windows_of(tokens, begin, 3000, 2)
    assert [tokens[a:b] for a, b in slices] == [[100, 5, 110, 110]] and advance == 20
    assert _segment_times(tokens, slices, begin, 3000, 0.0, 0.02) == [(0.0, 0.2)]
    # no timestamp pairs: the whole window is one segment, to its last timestamp or its end
    assert _windows_of([5, 6, 7], begin, 1234, 2) == ([(0, 3)], 1234)
    assert _segment_times([5, 6, 7], [(0, 3)], begin, 1234, 0.0, 0.02) == [(0.0, 617 * 0.02)]
    assert _segment_times([5, 120, 7], [(0, 3)], begin, 1234, 2.0, 0.02) == [(2.0, 2.0 + 20 * 0.02)]


def test_dynamic_time_warping_and_median_filter() -> None:
    import numpy as np

    from microformers_whisper.alignment import dynamic_time_warping, median_filter

    # cheapest cells on a staircase: token 0 on frames 0-1, token 1 on frame 2, token 2 on frames 3-5
    cost = np.ones((3, 6))
    for token, frames in ((0, (0, 1)), (1, (2,)), (2, (3, 4, 5))):
        cost[token, list(frames)] = 0
    tokens, frames = dynamic_time_warping(cost)
    assert tokens.tolist() == [0, 0, 1, 2, 2, 2] and frames.tolist() == [0, 1, 2, 3, 4, 5]
    values = torch.tensor([[1.0, 9.0, 2.0, 3.0, 8.0, 4.0]])
    assert median_filter(values, 3).tolist() == [[9.0, 2.0, 3.0, 3.0, 4.0, 8.0]]  # mirrored edges
    assert torch.equal(median_filter(values[:, :1], 3), values[:, :1])  # too short to mirror: as it is
    with pytest.raises(Exception, match="odd"):
        median_filter(values, 4)


def test_generate_builds_whisper_prompt_without_reference() -> None:
    from microformers import GenerationError

    torch.manual_seed(0)
    config = WhisperConfig(**{**TINY, "vocab_size": 60, "max_source_positions": 10})
    model = WhisperForConditionalGeneration(config).eval()
    model.generation_config.lang_to_id = {"<|en|>": 40, "<|de|>": 41}
    model.generation_config.task_to_id = {"transcribe": 45, "translate": 44}
    model.generation_config.no_timestamps_token_id = 47
    model.generation_config.max_length = 8
    seen: list[list[int]] = []

    def spy(input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        seen.append(input_ids[0].tolist())
        return scores

    out = model.generate(tiny_features(batch=1), language="de", task="translate", logits_processor=[spy])
    assert seen[0] == [3, 41, 44, 47]  # start, <|de|>, <|translate|>, <|notimestamps|>
    assert out.shape[0] == 1 and 3 not in out[0, :1].tolist()
    with pytest.raises(GenerationError, match="language='fr'"):
        model.generate(tiny_features(batch=1), language="fr")
