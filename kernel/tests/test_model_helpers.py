"""``microformers.model_helpers``: embedding resizing, weight initialisation, device maps, input-require-grads
hooks, memory-map copies."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from microformers import ConfigError, PretrainedConfig, PreTrainedModel, model_helpers

# From test_model_helpers_full_mutants.py: ``microformers.model_helpers`` behaviour the full mutation run found
# unasserted (docs/reliability.md).


class _Custom(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(10, 4))


class _LM(PreTrainedModel):
    config_class = PretrainedConfig

    def __init__(self, config: PretrainedConfig, head: nn.Module | None = None, embed: nn.Module | None = None) -> None:
        super().__init__(config)
        self.embed = embed if embed is not None else nn.Embedding(10, 4)
        self.head = head

    def get_input_embeddings(self) -> nn.Module:
        return self.embed

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.embed = value

    def get_output_embeddings(self) -> nn.Module | None:
        return self.head

    def set_output_embeddings(self, value: nn.Module) -> None:
        self.head = value


def _model(head: nn.Module | None = None, **config: object) -> _LM:
    torch.manual_seed(0)
    config.setdefault("tie_word_embeddings", False)
    model = _LM(PretrainedConfig(vocab_size=10, **config), head)
    with torch.no_grad():
        model.embed.weight.copy_(5.0 + torch.randn(10, 4))
    return model


def test_new_rows_from_n_0_std_use_the_configured_range() -> None:
    model = _model(initializer_range=0.5)
    model.resize_token_embeddings(2010, mean_resizing=False)
    new = model.embed.weight[10:].detach()
    assert abs(float(new.std()) - 0.5) < 0.05 and abs(float(new.mean())) < 0.05
    assert not torch.equal(new[0], new[1])  # every new row drawn on its own
    model = _model()  # no initializer_range: 0.02
    model.resize_token_embeddings(2010, mean_resizing=False)
    assert abs(float(model.embed.weight[10:].detach().std()) - 0.02) < 0.003


def test_mean_resizing_is_the_default_and_samples_a_scaled_covariance() -> None:
    model = _model(head=nn.Linear(4, 10, bias=False))
    with torch.no_grad():
        model.head.weight.fill_(3.0)
    old = model.embed.weight.detach().clone()
    model.resize_token_embeddings(4010)
    new = model.embed.weight[10:].detach().double()
    centred = old.double() - old.double().mean(dim=0)
    expected = (1e-9 * (centred.T @ centred) / 10).diagonal().sqrt()
    assert torch.allclose(new.mean(dim=0), old.double().mean(dim=0), atol=1e-4)
    ratio = new.std(dim=0) / expected
    assert bool(((ratio > 0.85) & (ratio < 1.15)).all()), ratio
    assert torch.allclose(model.head.weight[10:].detach(), torch.full((4000, 4), 3.0))  # the head's mean too


def test_dtype_padding_bias_and_frozen_flags_are_kept() -> None:
    head = nn.Linear(4, 10, bias=True).to(torch.bfloat16)
    model = _model(head=head)
    model.embed = nn.Embedding(10, 4, padding_idx=1).to(torch.bfloat16)
    model.embed.weight.requires_grad_(False)
    head.bias.requires_grad_(False)
    old_bias = head.bias.detach().clone()
    model.resize_token_embeddings(12, mean_resizing=False)
    assert model.embed.weight.dtype == torch.bfloat16 and model.head.weight.dtype == torch.bfloat16
    assert model.head.bias.dtype == torch.bfloat16 and model.embed.padding_idx == 1
    assert model.embed.weight.requires_grad is False and model.head.bias.requires_grad is False
    # exact: old values copied, new ones zero-filled
    assert torch.equal(model.head.bias[:10], old_bias) and torch.equal(
        model.head.bias[10:], torch.zeros(2, dtype=torch.bfloat16)
    )
    model.resize_token_embeddings(2)  # the padding row no longer fits: dropped, as an index equal to the size
    assert model.embed.padding_idx == 1
    model.embed = nn.Embedding(10, 4, padding_idx=5)
    model.resize_token_embeddings(5)
    assert model.embed.padding_idx is None and model.embed.weight.shape == (5, 4)


def test_an_untied_head_without_bias_is_resized_and_keeps_no_bias() -> None:
    model = _model(head=nn.Linear(4, 10, bias=False))
    model.resize_token_embeddings(12)
    assert model.head.weight.shape == (12, 4) and model.head.bias is None


def test_a_model_without_a_head_and_a_tied_head_without_a_bias_attribute() -> None:
    model = _model()
    model.resize_token_embeddings(12)
    assert model.embed.weight.shape == (12, 4) and model.head is None

    class TiedHead(nn.Module):
        pass

    head = TiedHead()
    model = _model(head=head)
    head.weight = model.embed.weight
    model.resize_token_embeddings(13)
    assert model.head.weight is model.embed.weight and model.embed.weight.shape == (13, 4)


def test_only_embeddings_and_linears_can_be_resized() -> None:
    model = _LM(PretrainedConfig(vocab_size=10), embed=_Custom())
    with pytest.raises(ConfigError) as info:
        model.resize_token_embeddings(12)
    assert str(info.value) == (
        "resize_token_embeddings: cannot resize a _Custom; only nn.Embedding and nn.Linear embeddings can be resized"
    )


@pytest.mark.parametrize("value", [0, -3, True, 2.5, "3"])
def test_bad_sizes_are_refused_with_their_name(value: object) -> None:
    with pytest.raises(ConfigError) as info:
        _model().resize_token_embeddings(value)
    assert str(info.value) == f"resize_token_embeddings: new_num_tokens={value!r} must be a positive integer"
    with pytest.raises(ConfigError) as info:
        _model().resize_token_embeddings(12, pad_to_multiple_of=value)
    assert str(info.value) == f"resize_token_embeddings: pad_to_multiple_of={value!r} must be a positive integer"


def test_one_row_and_a_multiple_of_one_are_accepted() -> None:
    model = _model()
    assert model.resize_token_embeddings(1).weight.shape == (1, 4)
    assert model.resize_token_embeddings(7, pad_to_multiple_of=1).weight.shape == (7, 4)


class _Predictions(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.decoder = nn.Linear(4, 10)
        self.bias = nn.Parameter(torch.arange(10.0))


class _Cls(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.predictions = _Predictions()


class _BertLike(_LM):
    # the first entry names no parameter (skipped), the second is BERT's decoder bias tied to its source
    _tied_weights_keys = {"missing.bias": "nowhere.bias", "cls.predictions.decoder.bias": "cls.predictions.bias"}

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__(config)
        self.cls = _Cls()
        self.cls.predictions.decoder.weight = self.embed.weight
        self.cls.predictions.decoder.bias = self.cls.predictions.bias

    def get_output_embeddings(self) -> nn.Module:
        return self.cls.predictions.decoder

    def set_output_embeddings(self, value: nn.Module) -> None:
        self.cls.predictions.decoder = value


def test_a_tied_bias_source_is_resized_with_its_target() -> None:
    model = _BertLike(PretrainedConfig(vocab_size=10, tie_word_embeddings=True))
    model.resize_token_embeddings(12)
    predictions = model.cls.predictions
    assert predictions.bias.shape == (12,) and predictions.decoder.bias is predictions.bias
    # exact: old values copied, new ones zero-filled
    assert torch.equal(predictions.bias.detach(), torch.cat([torch.arange(10.0), torch.zeros(2)]))
    assert predictions.decoder.weight is model.embed.weight and model.embed.weight.shape == (12, 4)


def _wide() -> nn.Module:
    return nn.Sequential(*[nn.Linear(2, 2, bias=False) for _ in range(7)])


def test_device_map_entries_are_placed_and_errors_named() -> None:
    model = _model(head=nn.Linear(4, 10))
    model_helpers.place_modules(model, {"embed": "cpu", "head": "cpu"})
    assert model.hf_device_map == {"embed": "cpu", "head": "cpu"}
    model_helpers.place_modules(model, {"": "meta"})
    assert model.embed.weight.device.type == "meta" and model.head.bias.device.type == "meta"
    with pytest.raises(ConfigError) as info:
        model_helpers.place_modules(_model(), {"nowhere": "cpu"})
    assert str(info.value).startswith("device_map entry 'nowhere': 'cpu': ")
    with pytest.raises(ConfigError) as info:
        model_helpers.place_modules(_wide(), {"0": "cpu"})
    assert str(info.value) == (
        "device_map gives no device for 1.weight, 2.weight, 3.weight, 4.weight, 5.weight; "
        "add their module prefixes (or '') to it"
    )


def test_init_weights_uses_the_configured_range_and_resets_layer_norms() -> None:
    torch.manual_seed(0)
    owner = SimpleNamespace(config=SimpleNamespace(initializer_range=0.5))
    for module in (nn.Linear(100, 100), nn.Embedding(100, 100)):
        model_helpers.init_weights(owner, module)
        assert (
            abs(float(module.weight.detach().std()) - 0.5) < 0.02 and abs(float(module.weight.detach().mean())) < 0.02
        )
    linear = nn.Linear(100, 100)
    model_helpers.init_weights(SimpleNamespace(config=SimpleNamespace()), linear)
    assert abs(float(linear.weight.detach().std()) - 0.02) < 0.002
    norm = nn.LayerNorm(3)
    with torch.no_grad():
        norm.weight.fill_(3.0)
        norm.bias.fill_(3.0)
    model_helpers.init_weights(owner, norm)
    # exact: constants written by init_weights
    assert torch.equal(norm.weight, torch.ones(3)) and torch.equal(norm.bias, torch.zeros(3))


def test_copy_out_of_memory_map_gives_float_cpu_tensors_their_own_memory() -> None:
    shared = torch.zeros(8)
    module = nn.Module()
    module.weight = nn.Parameter(shared[:4])
    module.register_buffer("ids", torch.arange(4))
    ids_pointer = module.ids.data_ptr()
    model_helpers.copy_out_of_memory_map(module)
    shared.fill_(7.0)
    # exact: a copy of zeros
    assert torch.equal(module.weight.detach(), torch.zeros(4))  # no longer a view of ``shared``
    assert module.ids.data_ptr() == ids_pointer and torch.equal(module.ids, torch.arange(4))  # integers left alone


# From test_model_helpers_mutants.py: ``microformers.model_helpers`` behaviour the mutation pass found unasserted
# (docs/reliability.md).


class _LMWithBiasedHead(PreTrainedModel):
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


def _model_with_biased_head() -> _LMWithBiasedHead:
    torch.manual_seed(0)
    model = _LMWithBiasedHead(PretrainedConfig(vocab_size=10, tie_word_embeddings=False))
    with torch.no_grad():
        model.embed.weight.fill_(5.0)
    return model


def test_padding_rounds_the_current_size_up_and_the_config_follows() -> None:
    model = _model_with_biased_head()
    fresh = model.resize_token_embeddings(pad_to_multiple_of=8)
    assert fresh.weight.shape == (16, 4) and model.config.vocab_size == 16
    assert model.head.weight.shape == (16, 4) and model.head.bias.shape == (16,)
    model.config.text_config = PretrainedConfig(vocab_size=16)
    model.resize_token_embeddings(20)
    assert model.config.text_config.vocab_size == 20 and model.config.vocab_size == 20


def test_new_rows_around_the_old_mean_or_around_zero() -> None:
    model = _model_with_biased_head()
    model.resize_token_embeddings(400, mean_resizing=True)
    assert abs(float(model.embed.weight[10:].detach().mean()) - 5.0) < 0.5
    model = _model_with_biased_head()
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
    model = _model_with_biased_head()
    model.enable_input_require_grads()
    model.embed.weight.requires_grad_(False)
    assert model.embed(torch.tensor([1])).requires_grad is True
    model.disable_input_require_grads()
    assert model.embed(torch.tensor([1])).requires_grad is False


@pytest.mark.parametrize("device_map", ["auto", "balanced", "balanced_low_0", "sequential", "cpu", {"": "cpu"}])
def test_device_maps_place_the_model(device_map: object) -> None:
    model = _model_with_biased_head()
    model_helpers.place_modules(model, device_map)
    assert model.hf_device_map == {"": "cpu"}


def test_a_device_map_that_leaves_parameters_out_names_them() -> None:
    with pytest.raises(ConfigError) as info:
        model_helpers.place_modules(_model_with_biased_head(), {"embed": "cpu"})
    assert (
        str(info.value)
        == "device_map gives no device for head.weight, head.bias; add their module prefixes (or '') to it"
    )


def test_a_tied_head_with_a_bias_gets_its_bias_resized() -> None:
    model = _model_with_biased_head()
    model.head.weight = model.embed.weight  # tied, as BERT's decoder, whose bias is its own
    model.resize_token_embeddings(12)
    assert model.head.weight is model.embed.weight and model.head.bias.shape == (12,)
