"""T5 behaviour: checkpoint names, tying, different stack depths, the decoding contract, and the errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

import microformers
from microformers.errors import ConfigError, InputError
from microformers_sdk.seq2seq import EncoderDecoderCache
from microformers_sdk.testing import assert_close, build_model
from microformers_t5 import (
    MT5Config,
    T5Config,
    T5EncoderModel,
    T5ForConditionalGeneration,
    T5ForSequenceClassification,
    T5InputError,
    T5Model,
)
from microformers_t5.modeling_t5 import relative_position_bucket

TINY: dict[str, Any] = {"vocab_size": 80, "d_model": 32, "d_kv": 8, "d_ff": 48, "num_layers": 2, "num_heads": 4,
                        "relative_attention_num_buckets": 8, "relative_attention_max_distance": 16}  # fmt: skip


def _ids(batch: int, length: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(2, TINY["vocab_size"], (batch, length), generator=torch.Generator().manual_seed(seed))


def test_config_derives_activation_gating_and_decoder_depth() -> None:
    relu = T5Config(**TINY)
    assert (relu.dense_act_fn, relu.is_gated_act, relu.num_decoder_layers) == ("relu", False, 2)
    assert relu.scale_decoder_outputs and relu.hidden_size == 32 and relu.num_hidden_layers == 2
    flan = T5Config(**TINY, feed_forward_proj="gated-gelu", tie_word_embeddings=False, num_decoder_layers=3)
    assert (flan.dense_act_fn, flan.is_gated_act, flan.num_decoder_layers) == ("gelu_new", True, 3)
    assert not flan.scale_decoder_outputs
    # The reference writes tie_word_embeddings=true with scale_decoder_outputs=false for v1.1 files: the latter wins.
    assert not T5Config(**TINY, tie_word_embeddings=True, scale_decoder_outputs=False).scale_decoder_outputs
    assert not MT5Config(**TINY).scale_decoder_outputs
    assert MT5Config().feed_forward_proj == "gated-gelu"


@pytest.mark.parametrize("value", ["gelu-gated", "gated-gelu-new", "", 3])
def test_malformed_feed_forward_proj_is_a_config_error_naming_it(value: Any) -> None:
    with pytest.raises(ConfigError, match="feed_forward_proj"):
        T5Config(**{**TINY, "feed_forward_proj": value})


def test_unknown_activation_is_a_config_error_naming_feed_forward_proj() -> None:
    with pytest.raises(ConfigError, match="feed_forward_proj"):
        T5ForConditionalGeneration(T5Config(**TINY, feed_forward_proj="gated-nonsense"))


def test_saved_tensor_names_are_the_reference_checkpoint_names(tmp_path: Path) -> None:
    tied = T5ForConditionalGeneration(T5Config(**TINY))
    tied.save_pretrained(tmp_path / "tied")
    names = set(load_file(tmp_path / "tied" / "model.safetensors"))
    assert "shared.weight" in names and "lm_head.weight" not in names
    assert not any("embed_tokens" in name for name in names)
    for name in ("encoder.block.0.layer.0.SelfAttention.q.weight",
                 "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
                 "encoder.block.1.layer.1.DenseReluDense.wi.weight", "encoder.block.1.layer.1.DenseReluDense.wo.weight",
                 "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
                 "decoder.block.1.layer.1.EncDecAttention.k.weight", "decoder.block.1.layer.2.layer_norm.weight",
                 "encoder.final_layer_norm.weight", "decoder.final_layer_norm.weight"):  # fmt: skip
        assert name in names, name
    assert not any("block.1.layer.0.SelfAttention.relative_attention_bias" in name for name in names)
    assert not any("EncDecAttention.relative_attention_bias" in name for name in names)

    untied = T5ForConditionalGeneration(T5Config(**TINY, feed_forward_proj="gated-gelu", tie_word_embeddings=False))
    untied.save_pretrained(tmp_path / "untied")
    names = set(load_file(tmp_path / "untied" / "model.safetensors"))
    assert {"lm_head.weight", "shared.weight", "encoder.block.0.layer.1.DenseReluDense.wi_0.weight",
            "encoder.block.0.layer.1.DenseReluDense.wi_1.weight"} <= names  # fmt: skip


def test_stacks_share_the_embedding_and_lm_head_ties_only_when_asked() -> None:
    tied = T5ForConditionalGeneration(T5Config(**TINY))
    assert tied.encoder.embed_tokens is tied.shared and tied.decoder.embed_tokens is tied.shared
    assert tied.lm_head.weight is tied.shared.weight
    untied = T5ForConditionalGeneration(T5Config(**TINY, tie_word_embeddings=False))
    assert untied.encoder.embed_tokens is untied.shared
    assert untied.lm_head.weight is not untied.shared.weight


def test_tied_model_scales_the_decoder_output_before_the_head() -> None:
    model = build_model(T5ForConditionalGeneration, T5Config(**TINY))
    ids, decoder = _ids(2, 5), _ids(2, 3, seed=1)
    with torch.no_grad():
        output = model(input_ids=ids, decoder_input_ids=decoder, output_hidden_states=True)
        hidden = output.decoder_hidden_states[-1]
        assert_close(output.logits, model.lm_head(hidden * TINY["d_model"] ** -0.5))
        model.config.scale_decoder_outputs = False
        assert_close(model(input_ids=ids, decoder_input_ids=decoder).logits, model.lm_head(hidden))


def test_relative_position_buckets() -> None:
    distances = torch.tensor([-20, -8, -3, -1, 0, 1, 3, 8, 20])
    both = relative_position_bucket(distances, bidirectional=True, num_buckets=8, max_distance=16)
    assert both.tolist() == [3, 3, 2, 1, 0, 5, 6, 7, 7]
    causal = relative_position_bucket(distances, bidirectional=False, num_buckets=8, max_distance=16)
    assert causal.tolist() == [7, 6, 3, 1, 0, 0, 0, 0, 0]


@pytest.mark.parametrize("decoder_layers", [1, 3])
def test_encoder_and_decoder_of_different_depths(decoder_layers: int) -> None:
    model = build_model(T5ForConditionalGeneration, T5Config(**TINY, num_decoder_layers=decoder_layers))
    assert len(model.encoder.block) == 2 and len(model.decoder.block) == decoder_layers
    ids, decoder = _ids(2, 6), _ids(2, 4, seed=1)
    with torch.no_grad():
        output = model(input_ids=ids, decoder_input_ids=decoder, output_attentions=True, output_hidden_states=True)
        assert len(output.encoder_attentions) == 2 and len(output.encoder_hidden_states) == 3
        assert len(output.decoder_attentions) == decoder_layers and len(output.cross_attentions) == decoder_layers
        assert len(output.decoder_hidden_states) == decoder_layers + 1
        assert len(output.past_key_values) == decoder_layers
        generated = model.generate(input_ids=ids, max_new_tokens=4, do_sample=False, eos_token_id=None)
    assert generated.shape == (2, 5)


def test_decoding_contract_one_token_per_call_with_the_returned_cache() -> None:
    """As generate calls it: encoder once; then new decoder tokens with encoder_outputs and the last cache."""
    model = build_model(T5ForConditionalGeneration, T5Config(**TINY))
    ids, mask = _ids(2, 6), torch.tensor([[1] * 6, [1] * 3 + [0] * 3])
    decoder = _ids(2, 5, seed=2)
    cross_key_calls = []
    model.decoder.block[0].layer[1].EncDecAttention.k.register_forward_hook(lambda *_: cross_key_calls.append(1))
    with torch.no_grad():
        full = model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder, use_cache=False)
        assert full.past_key_values is None
        cross_key_calls.clear()
        encoder_outputs = model.get_encoder()(input_ids=ids, attention_mask=mask, return_dict=True)
        first = model(attention_mask=mask, decoder_input_ids=decoder[:, :2], encoder_outputs=encoder_outputs,
                      past_key_values=None, use_cache=True, return_dict=True)  # fmt: skip
        cache = first.past_key_values
        assert isinstance(cache, EncoderDecoderCache) and cache.get_seq_length() == 2
        logits = [first.logits]
        for position in range(2, 5):
            step = model(attention_mask=mask, decoder_input_ids=decoder[:, position : position + 1],
                         encoder_outputs=encoder_outputs, past_key_values=cache, use_cache=True, return_dict=True)  # fmt: skip
            assert step.past_key_values is cache
            logits.append(step.logits)
        assert len(cross_key_calls) == 1, "cross-attention keys were recomputed"
    assert_close(torch.cat(logits, dim=1), full.logits)


def test_reordered_cache_continues_as_the_selected_rows() -> None:
    """Beam search reorders the cache; the next step then equals decoding the selected rows from scratch."""
    model = build_model(T5ForConditionalGeneration, T5Config(**TINY))
    ids, decoder = _ids(3, 5), _ids(3, 4, seed=3)
    order = torch.tensor([2, 2, 0])
    with torch.no_grad():
        encoder_outputs = model.get_encoder()(input_ids=ids, return_dict=True)
        cache = model(decoder_input_ids=decoder[:, :3], encoder_outputs=encoder_outputs, use_cache=True).past_key_values
        cache.reorder_cache(order)
        encoder_outputs.last_hidden_state = encoder_outputs.last_hidden_state[order]
        step = model(decoder_input_ids=decoder[order, 3:], encoder_outputs=encoder_outputs, past_key_values=cache)
        want = model(input_ids=ids[order], decoder_input_ids=torch.cat([decoder[order, :3], decoder[order, 3:]], 1))
    assert_close(step.logits[:, -1], want.logits[:, -1])


def test_labels_are_shifted_into_decoder_inputs_and_minus_100_is_ignored() -> None:
    model = build_model(T5ForConditionalGeneration, T5Config(**TINY))
    ids, labels = _ids(2, 5), _ids(2, 4, seed=4)
    labels[1, 2:] = -100
    with torch.no_grad():
        output = model(input_ids=ids, labels=labels)
        shifted = torch.cat([torch.zeros(2, 1, dtype=torch.long), labels[:, :-1].clamp(min=0)], dim=1)
        explicit = model(input_ids=ids, decoder_input_ids=shifted, labels=labels)
    assert torch.equal(model.prepare_decoder_input_ids_from_labels(labels), shifted)
    assert_close(output.logits, explicit.logits)
    keep = labels != -100
    want = torch.nn.functional.cross_entropy(output.logits[keep], labels[keep])
    assert_close(output.loss, want)


def test_mismatched_decoder_inputs_and_labels_are_refused() -> None:
    model = build_model(T5ForConditionalGeneration, T5Config(**TINY))
    with pytest.raises(InputError, match="labels"):
        model(input_ids=_ids(2, 5), decoder_input_ids=_ids(2, 3), labels=_ids(2, 4))


def test_missing_decoder_inputs_are_refused() -> None:
    for model_class in (T5ForConditionalGeneration, T5Model):
        model = build_model(model_class, T5Config(**TINY))
        with pytest.raises(T5InputError, match="decoder_input_ids"):
            model(input_ids=_ids(2, 5))


def test_encoder_refuses_use_cache_and_mask_of_the_wrong_width() -> None:
    model = build_model(T5EncoderModel, T5Config(**TINY))
    with pytest.raises(T5InputError, match="use_cache"):
        model.encoder(input_ids=_ids(1, 4), use_cache=True)
    with pytest.raises(T5InputError, match="attention_mask"):
        model(input_ids=_ids(1, 4), attention_mask=torch.ones(1, 6, dtype=torch.long))


def test_sequence_classification_needs_the_same_number_of_eos_tokens_per_row() -> None:
    model = build_model(T5ForSequenceClassification, T5Config(**TINY, num_labels=2))
    ids = _ids(2, 5)
    ids[0, 4] = 1
    with pytest.raises(T5InputError, match="eos"):
        model(input_ids=ids)


def test_return_dict_false_gives_a_tuple() -> None:
    model = build_model(T5ForConditionalGeneration, T5Config(**TINY))
    with torch.no_grad():
        as_tuple = model(input_ids=_ids(1, 4), decoder_input_ids=_ids(1, 2), return_dict=False)
        as_dict = model(input_ids=_ids(1, 4), decoder_input_ids=_ids(1, 2))
    assert isinstance(as_tuple, tuple)
    assert_close(as_tuple[0], as_dict.logits)


@pytest.mark.parametrize(("setting", "saved", "claimed"), [("num_decoder_layers", 2, 3), ("num_layers", 2, 1)])
def test_stack_depth_that_disagrees_with_the_weights_is_a_config_error_naming_it(
    setting: str, saved: int, claimed: int, tmp_path: Path
) -> None:
    T5ForConditionalGeneration(T5Config(**TINY)).save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config[setting] = claimed
    if setting == "num_layers":
        config["num_decoder_layers"] = saved
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match=f"{setting}={claimed}.*{saved}"):
        microformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path)


def test_auto_classes_resolve_t5_and_mt5(tmp_path: Path) -> None:
    for model_type in ("t5", "mt5", "umt5"):
        config = microformers.AutoConfig.for_model(model_type, **TINY)
        model = microformers.AutoModelForSeq2SeqLM.from_config(config)
        assert type(model).__name__.lower().startswith(model_type)
        assert model.main_input_name == "input_ids"
        assert model.get_encoder() is model.encoder and model.get_decoder() is model.decoder
    from microformers.plugins import registry

    assert registry.get("architectures", "T5EncoderModel").load() is T5EncoderModel


def test_gradient_checkpointing_gives_the_same_gradients() -> None:
    config = T5Config(**TINY, dropout_rate=0.0)
    model = build_model(T5ForConditionalGeneration, config).train()
    ids, labels = _ids(2, 5), _ids(2, 4, seed=5)
    model(input_ids=ids, labels=labels).loss.backward()
    plain = {name: param.grad.clone() for name, param in model.named_parameters()}
    model.zero_grad()
    model.gradient_checkpointing_enable()
    model(input_ids=ids, labels=labels).loss.backward()
    for name, param in model.named_parameters():
        assert_close(param.grad, plain[name], msg=name)
