"""``ModuleUtilsMixin`` on every ``PreTrainedModel``: extended attention masks, head masks, token and FLOP
estimates, memory hooks (the helpers the reference documented before version 5, still called by model code
written against it)."""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn

from microformers import InputError, PretrainedConfig, PreTrainedModel
from microformers.modeling import ModuleUtilsMixin
from microformers_sdk.testing import assert_close


class _Tiny(PreTrainedModel):
    config_class = PretrainedConfig

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__(config)
        self.embed = nn.Embedding(10, 4)  # 40 parameters
        self.proj = nn.Linear(4, 3)  # 15 parameters

    def get_input_embeddings(self) -> nn.Module:
        return self.embed

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.proj(self.embed(input_ids))


def tiny(**config: object) -> _Tiny:
    torch.manual_seed(0)
    return _Tiny(PretrainedConfig(**config))


MIN = torch.finfo(torch.float32).min


def test_every_model_has_the_mixin() -> None:
    assert isinstance(tiny(), ModuleUtilsMixin)


def test_encoder_mask_becomes_additive_and_broadcastable_over_heads() -> None:
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    extended = tiny().get_extended_attention_mask(mask, (2, 3))
    assert extended.shape == (2, 1, 1, 3) and extended.dtype == torch.float32
    expected = torch.tensor([[0.0, 0.0, MIN], [0.0, MIN, MIN]])[:, None, None, :]
    assert torch.equal(extended, expected)  # exact: 0 * min and 1 * min are exact


def test_decoder_mask_is_causal_and_padded() -> None:
    mask = torch.tensor([[0, 1, 1]])
    extended = tiny(is_decoder=True).get_extended_attention_mask(mask, (1, 3))
    visible = extended[0, 0] == 0
    assert visible.tolist() == [[False, False, False], [False, True, False], [False, True, True]]


def test_decoder_mask_longer_than_the_input_keeps_the_prefix_visible() -> None:
    mask = torch.ones(1, 5)
    causal = ModuleUtilsMixin.create_extended_attention_mask_for_decoder((1, 2), mask)
    assert causal.shape == (1, 1, 2, 5)
    assert causal[0, 0].tolist() == [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]


def test_three_dimensional_mask_and_requested_dtype() -> None:
    mask = torch.tensor([[[1, 0], [1, 1]]])
    extended = tiny().get_extended_attention_mask(mask, (1, 2), dtype=torch.float16)
    assert extended.dtype == torch.float16 and extended.shape == (1, 1, 2, 2)
    assert (extended[0, 0] == 0).tolist() == [[True, False], [True, True]]


def test_invert_attention_mask_matches_the_encoder_extension() -> None:
    model = tiny()
    mask = torch.tensor([[1, 0, 1]])
    assert_close(model.invert_attention_mask(mask), model.get_extended_attention_mask(mask, (1, 3)), atol=0)


@pytest.mark.parametrize("bad", [torch.ones(3), torch.ones(1, 1, 1, 3), [[1, 0]]])
def test_a_mask_of_the_wrong_shape_names_the_argument(bad: object) -> None:
    with pytest.raises(InputError, match=r"get_extended_attention_mask\(attention_mask=\.\.\.\).*\(batch, seq\)"):
        tiny().get_extended_attention_mask(bad, (1, 3))  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"invert_attention_mask\(encoder_attention_mask=\.\.\.\)"):
        tiny().invert_attention_mask(bad)  # type: ignore[arg-type]


def test_head_masks_expand_to_one_row_per_layer() -> None:
    model = tiny()
    assert model.get_head_mask(None, 3) == [None, None, None]
    every_layer = model.get_head_mask(torch.tensor([1, 0]), 3)
    assert every_layer.shape == (3, 1, 2, 1, 1)
    assert every_layer[:, 0, :, 0, 0].tolist() == [[1.0, 0.0]] * 3
    per_layer = model.get_head_mask(torch.tensor([[1, 0], [0, 1]]), 2, is_attention_chunked=True)
    assert per_layer.shape == (2, 1, 2, 1, 1, 1) and per_layer.dtype == torch.float32
    assert per_layer[:, 0, :, 0, 0, 0].tolist() == [[1.0, 0.0], [0.0, 1.0]]


def test_head_mask_with_the_wrong_layer_count_is_refused() -> None:
    with pytest.raises(
        InputError, match=r"get_head_mask\(head_mask=\.\.\.\): 3 rows of layers for num_hidden_layers=2"
    ):
        tiny().get_head_mask(torch.ones(3, 2), 2)
    with pytest.raises(InputError, match=r"get_head_mask\(head_mask=\.\.\.\): expected .* got \(1, 1, 2\)"):
        tiny().get_head_mask(torch.ones(1, 1, 2), 2)


def test_tokens_and_floating_point_ops(caplog: pytest.LogCaptureFixture) -> None:
    model = tiny()
    inputs = {"input_ids": torch.ones(2, 5, dtype=torch.long)}
    assert model.estimate_tokens(inputs) == 10
    assert model.floating_point_ops(inputs) == 6 * 10 * 15  # embeddings left out
    assert model.floating_point_ops(inputs, exclude_embeddings=False) == 6 * 10 * 55
    with caplog.at_level(logging.WARNING, logger="microformers"):
        assert model.floating_point_ops({"pixel_values": torch.ones(1, 3)}) == 0
    assert "no 'input_ids' tensor" in caplog.text


def test_memory_hooks_record_and_reset_each_modules_rss_change() -> None:
    pytest.importorskip("psutil")
    model = tiny()
    model.add_memory_hooks()
    assert model.proj.mem_rss_diff == 0
    model(torch.tensor([[1, 2]]))
    assert model.proj.mem_rss_pre_forward > 0 and model.proj.mem_rss_post_forward > 0
    assert model.proj.mem_rss_diff == model.proj.mem_rss_post_forward - model.proj.mem_rss_pre_forward
    model.reset_memory_hooks_state()
    assert (model.proj.mem_rss_diff, model.proj.mem_rss_pre_forward) == (0, 0)
