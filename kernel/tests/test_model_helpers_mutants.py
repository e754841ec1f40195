"""``microformers.model_helpers`` behaviour the mutation pass found unasserted (docs/reliability.md)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from microformers import ConfigError, PretrainedConfig, PreTrainedModel, model_helpers


class _LM(PreTrainedModel):
    config_class = PretrainedConfig

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__(config)
        self.embed = nn.Embedding(10, 4)
        self.head = nn.Linear(4, 10, bias=True)  # untied, with a bias

    def get_input_embeddings(self) -> nn.Module:
        return self.embed

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.embed = value

    def get_output_embeddings(self) -> nn.Module:
        return self.head

    def set_output_embeddings(self, value: nn.Module) -> None:
        self.head = value


def _model() -> _LM:
    torch.manual_seed(0)
    model = _LM(PretrainedConfig(vocab_size=10, tie_word_embeddings=False))
    with torch.no_grad():
        model.embed.weight.fill_(5.0)
    return model


def test_padding_rounds_the_current_size_up_and_the_config_follows() -> None:
    model = _model()
    fresh = model.resize_token_embeddings(pad_to_multiple_of=8)
    assert fresh.weight.shape == (16, 4) and model.config.vocab_size == 16
    assert model.head.weight.shape == (16, 4) and model.head.bias.shape == (16,)
    model.config.text_config = PretrainedConfig(vocab_size=16)
    model.resize_token_embeddings(20)
    assert model.config.text_config.vocab_size == 20 and model.config.vocab_size == 20


def test_new_rows_around_the_old_mean_or_around_zero() -> None:
    model = _model()
    model.resize_token_embeddings(400, mean_resizing=True)
    assert abs(float(model.embed.weight[10:].detach().mean()) - 5.0) < 0.5
    model = _model()
    model.resize_token_embeddings(400, mean_resizing=False)
    assert abs(float(model.embed.weight[10:].detach().mean())) < 0.05
    # exact: the old rows are copied
    assert torch.equal(model.embed.weight[:10], torch.full((10, 4), 5.0))


def test_init_weights_zeroes_the_padding_row_and_sets_rms_norm_weights_to_one() -> None:
    owner = SimpleNamespace(config=SimpleNamespace(initializer_range=0.5))
    embedding = nn.Embedding(6, 3, padding_idx=2)
    model_helpers.init_weights(owner, embedding)
    # exact: the padding row is zero-filled
    assert torch.equal(embedding.weight[2], torch.zeros(3)) and bool(embedding.weight[0].any())
    plain = nn.Embedding(6, 3)
    model_helpers.init_weights(owner, plain)
    assert bool(plain.weight.all())

    class MyRMSNorm(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.zeros(3))

    class Other(MyRMSNorm):
        pass

    norm, other = MyRMSNorm(), Other()
    Other.__name__ = "Other"
    model_helpers.init_weights(owner, norm)
    model_helpers.init_weights(owner, other)
    # exact: constants written by init_weights
    assert torch.equal(norm.weight, torch.ones(3)) and torch.equal(other.weight, torch.zeros(3))


def test_input_require_grads_hook_is_removed() -> None:
    model = _model()
    model.enable_input_require_grads()
    model.embed.weight.requires_grad_(False)
    assert model.embed(torch.tensor([1])).requires_grad is True
    model.disable_input_require_grads()
    assert model.embed(torch.tensor([1])).requires_grad is False


@pytest.mark.parametrize("device_map", ["auto", "balanced", "balanced_low_0", "sequential", "cpu", {"": "cpu"}])
def test_device_maps_place_the_model(device_map: object) -> None:
    model = _model()
    model_helpers.place_modules(model, device_map)
    assert model.hf_device_map == {"": "cpu"}


def test_a_device_map_that_leaves_parameters_out_names_them() -> None:
    with pytest.raises(ConfigError) as info:
        model_helpers.place_modules(_model(), {"embed": "cpu"})
    assert str(info.value) == "device_map gives no device for head.weight, head.bias; add their module prefixes (or '') to it"


def test_a_tied_head_with_a_bias_gets_its_bias_resized() -> None:
    model = _model()
    model.head.weight = model.embed.weight  # tied, as BERT's decoder, whose bias is its own
    model.resize_token_embeddings(12)
    assert model.head.weight is model.embed.weight and model.head.bias.shape == (12,)
