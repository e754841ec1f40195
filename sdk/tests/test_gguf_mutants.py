"""``microformers_sdk.gguf`` behaviour the mutation pass found unasserted (docs/reliability.md)."""

from __future__ import annotations

import pytest
import torch

from microformers_sdk.gguf import OPTIONAL, GGUFArchitecture, Reshape, Rotary, Shift, Target, decoder_tensors


def test_optional_reads_as_its_name() -> None:
    assert repr(OPTIONAL) == "OPTIONAL"


def test_rotary_rows_undo_the_pair_interleave_and_refuse_rows_that_do_not_split() -> None:
    assert Rotary("heads").rows(8, {"heads": 2}).tolist() == [0, 2, 1, 3, 4, 6, 5, 7]
    with pytest.raises(ValueError) as info:
        Rotary("num_key_value_heads").rows(6, {"num_key_value_heads": 2})
    assert str(info.value) == "cannot split 6 attention rows into 2 heads of rotary pairs (num_key_value_heads)"


def test_reshape_fills_in_the_free_dimension_from_the_config() -> None:
    reshape = Reshape(shape=(1, "hidden_size", -1))
    assert reshape.shape((12,), {"hidden_size": 2}) == (1, 2, 6)
    assert reshape.apply(torch.arange(12), {"hidden_size": 2}).shape == (1, 2, 6)


def _architecture(tokenizer: str) -> GGUFArchitecture:
    return GGUFArchitecture(
        gguf_name="toyarch", model_type="toy", architectures=("ToyForCausalLM",), config={}, tensors={}, tokenizer=tokenizer
    )


@pytest.mark.parametrize("tokenizer", ["metaspace", "normalizer", "gemma"])
def test_the_three_sentencepiece_rebuilds_are_accepted(tokenizer: str) -> None:
    assert _architecture(tokenizer).tokenizer == tokenizer


def test_an_unknown_tokenizer_rebuild_is_refused_naming_the_choices() -> None:
    with pytest.raises(ValueError) as info:
        _architecture("bpe")
    assert str(info.value) == "GGUFArchitecture('toyarch').tokenizer='bpe': use 'metaspace', 'normalizer' or 'gemma'"


def test_decoder_tensors_wrap_norms_only_when_they_have_transforms() -> None:
    plain = decoder_tensors()
    assert plain["output_norm.weight"] == "model.norm.weight"
    assert plain["blk.{bid}.ffn_norm.weight"] == "model.layers.{bid}.post_attention_layernorm.weight"
    shifted = decoder_tensors(norm=(Shift(-1.0),))
    assert shifted["output_norm.weight"] == Target("model.norm.weight", (Shift(-1.0),))
    assert shifted["blk.{bid}.attn_norm.weight"] == Target("model.layers.{bid}.input_layernorm.weight", (Shift(-1.0),))
