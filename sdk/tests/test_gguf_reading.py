"""``microformers_sdk.gguf``: reading GGUF metadata and tensors, dequantisation and the checks on what a file
declares."""

from __future__ import annotations

import pytest
import torch

from microformers_sdk.gguf import (
    OPTIONAL,
    REQUIRED,
    GGUFArchitecture,
    Meta,
    Reshape,
    Rotary,
    Shift,
    Target,
    Transpose,
    decoder_tensors,
    linear,
)

# From test_gguf_full_mutants.py: ``microformers_sdk.gguf`` behaviour the full mutation run found unasserted
# (docs/reliability.md).


def test_the_default_markers_read_as_their_names() -> None:
    assert repr(REQUIRED) == "REQUIRED" and repr(OPTIONAL) == "OPTIONAL"
    assert repr(Meta("embedding_length")) == "Meta(key='embedding_length', kind=<class 'int'>, default=REQUIRED)"


# -- transforms -----------------------------------------------------------------------------------


def test_rotary_apply_reorders_the_rows_of_a_matrix() -> None:
    weight = torch.arange(8 * 3).view(8, 3)  # 8 rows (2 heads of 2 rotary pairs), 3 columns
    out = Rotary("num_attention_heads").apply(weight, {"num_attention_heads": 2})
    assert torch.equal(out, weight[[0, 2, 1, 3, 4, 6, 5, 7]])
    assert Rotary("num_attention_heads").shape((8, 3), {"num_attention_heads": 2}) == (8, 3)


@pytest.mark.parametrize("heads", [0, -2])
def test_rotary_refuses_a_head_count_that_is_not_positive(heads: int) -> None:
    with pytest.raises(ValueError) as info:
        Rotary("num_key_value_heads").rows(8, {"num_key_value_heads": heads})
    assert str(info.value) == f"cannot split 8 attention rows into {heads} heads of rotary pairs (num_key_value_heads)"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_shift_adds_in_float32_and_keeps_the_dtype(dtype: torch.dtype) -> None:
    """Gemma's norms: llama.cpp stores ``1 + w``; ``Shift(-1.0)`` gives ``w`` back in the tensor's own dtype."""
    stored = torch.tensor([1.0, 1.5, 0.25, 3.0]).to(dtype)
    out = Shift(-1.0).apply(stored, {})
    assert out.dtype == dtype
    # exact: Shift is these very ops
    assert torch.equal(out, (stored.float() - 1.0).to(dtype))
    assert Shift(-1.0).shape((4,), {}) == (4,)


def test_rotary_accepts_a_single_head() -> None:
    assert Rotary("num_key_value_heads").rows(4, {"num_key_value_heads": 1}).tolist() == [0, 2, 1, 3]


def test_reshape_fills_in_a_leading_free_dimension_from_every_input_dimension() -> None:
    reshape = Reshape(shape=(-1, 4))
    shape = reshape.shape((2, 6), {})
    assert shape == (3, 4) and all(type(d) is int for d in shape)
    assert reshape.apply(torch.arange(12).view(2, 6), {}).shape == (3, 4)


# -- tensor names -----------------------------------------------------------------------------------


def test_linear_maps_weight_and_bias_and_transposes_only_the_weight() -> None:
    assert linear("blk.{bid}.ffn_up", "h.{bid}.mlp.c_fc") == {
        "blk.{bid}.ffn_up.weight": "h.{bid}.mlp.c_fc.weight",
        "blk.{bid}.ffn_up.bias": "h.{bid}.mlp.c_fc.bias",
    }
    assert linear("blk.{bid}.ffn_up", "h.{bid}.mlp.c_fc", Transpose()) == {
        "blk.{bid}.ffn_up.weight": Target("h.{bid}.mlp.c_fc.weight", (Transpose(),)),
        "blk.{bid}.ffn_up.bias": "h.{bid}.mlp.c_fc.bias",
    }
    rotary = Rotary("num_attention_heads")
    assert linear("blk.{bid}.attn_q", "q", rotary, params=("weight",)) == {
        "blk.{bid}.attn_q.weight": Target("q.weight", (rotary,))
    }
    assert linear("a", "b", rotary, params=("bias",)) == {"a.bias": Target("b.bias", (rotary,))}


def _llama_like(q: tuple[object, ...] = (), k: tuple[object, ...] = ()) -> dict[str, object]:
    """The llama.cpp names of a Llama checkpoint, written out (``q``/``k``: transforms of the projections)."""
    block = "model.layers.{bid}"
    expected: dict[str, object] = {
        "token_embd.weight": "model.embed_tokens.weight",
        "output_norm.weight": "model.norm.weight",
        "output.weight": "lm_head.weight",
        "blk.{bid}.attn_norm.weight": f"{block}.input_layernorm.weight",
        "blk.{bid}.ffn_norm.weight": f"{block}.post_attention_layernorm.weight",
    }
    for gguf, hf, transforms in (
        ("attn_q", "q_proj", q),
        ("attn_k", "k_proj", k),
        ("attn_v", "v_proj", ()),
        ("attn_output", "o_proj", ()),
    ):
        for param in ("weight", "bias"):
            name = f"{block}.self_attn.{hf}.{param}"
            expected[f"blk.{{bid}}.{gguf}.{param}"] = Target(name, transforms) if transforms else name
    for gguf, hf in (("ffn_gate", "gate_proj"), ("ffn_up", "up_proj"), ("ffn_down", "down_proj")):
        expected[f"blk.{{bid}}.{gguf}.weight"] = f"{block}.mlp.{hf}.weight"
    return expected


def test_decoder_tensors_name_every_llama_tensor() -> None:
    assert decoder_tensors() == _llama_like()


def test_decoder_tensors_put_the_rotary_transforms_on_queries_and_keys() -> None:
    q, k = Rotary("num_attention_heads"), Rotary("num_key_value_heads")
    assert decoder_tensors(q=(q,), k=(k,)) == _llama_like(q=(q,), k=(k,))


def test_an_architecture_refuses_a_tensor_target_of_another_type_naming_it() -> None:
    with pytest.raises(TypeError) as info:
        GGUFArchitecture(
            gguf_name="toyarch",
            model_type="toy",
            architectures=("ToyForCausalLM",),
            config={},
            tensors={"token_embd.weight": ("model.embed_tokens.weight",)},
        )
    assert str(info.value) == (
        "GGUFArchitecture('toyarch').tensors['token_embd.weight'] is ('model.embed_tokens.weight',): "
        "use a name, Target, Experts or Part"
    )


# From test_gguf_mutants.py: ``microformers_sdk.gguf`` behaviour the mutation pass found unasserted
# (docs/reliability.md).


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
        gguf_name="toyarch",
        model_type="toy",
        architectures=("ToyForCausalLM",),
        config={},
        tensors={},
        tokenizer=tokenizer,
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
