"""TorchScript mode (``torchscript=True``), as the reference documents it: models return tuples, tied embeddings are
cloned, and ``torch.jit.trace`` records a graph that gives the eager outputs after ``torch.jit.save``/``load`` on other
batch sizes and lengths, padded or not (no shortcut taken on the example's values or sizes is baked in)."""

from __future__ import annotations

import io
import json
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import microformers
from microformers_sdk.testing import assert_close

IDS = {"vocab_size": 50}
FAMILIES: dict[str, tuple[str, dict[str, Any]]] = {
    "bert": ("AutoModel", {**IDS, "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
                           "intermediate_size": 20}),
    "roberta": ("AutoModel", {**IDS, "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
                              "intermediate_size": 20}),
    "distilbert": ("AutoModel", {**IDS, "dim": 16, "n_layers": 1, "n_heads": 2, "hidden_dim": 20}),
    "llama": ("AutoModelForCausalLM", {**IDS, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2,
                                       "num_attention_heads": 2, "num_key_value_heads": 1,
                                       "max_position_embeddings": 64}),
    "gpt2": ("AutoModelForCausalLM", {**IDS, "n_embd": 16, "n_layer": 2, "n_head": 2}),
    # through the SDK's shared layers: sliding-window layers (Gemma 2) and routed experts (Mixtral)
    "gemma2": ("AutoModelForCausalLM", {**IDS, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2,
                                        "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8,
                                        "sliding_window": 4}),
    "mixtral": ("AutoModelForCausalLM", {**IDS, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
                                         "num_attention_heads": 2, "num_key_value_heads": 1, "num_local_experts": 3,
                                         "num_experts_per_tok": 2}),
}  # fmt: skip


def _model(family: str, **settings: Any) -> Any:
    auto, values = FAMILIES[family]
    torch.manual_seed(0)
    config = microformers.AutoConfig.for_model(family, **values, **settings)
    return getattr(microformers, auto).from_config(config).eval()


def _batch(rows: int, length: int, padded: bool, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 50, (rows, length), generator=generator)
    mask = torch.ones_like(ids)
    if padded:
        mask[0, : length // 2] = 0  # left padding in the first row
    return ids, mask


def _round_trip(traced: torch.jit.ScriptModule) -> torch.jit.ScriptModule:
    buffer = io.BytesIO()
    torch.jit.save(traced, buffer)
    buffer.seek(0)
    return torch.jit.load(buffer)


def _trace(model: Any, *args: Any, **kwargs: Any) -> torch.jit.ScriptModule:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)  # shape-only checks become constants, as expected
        return torch.jit.trace(model, *args, **kwargs)


def _assert_same(traced: Any, eager: Any) -> None:
    """Every tensor of the traced output against the eager one; an eager cache is compared in its per-layer form."""
    if isinstance(eager, torch.Tensor):
        # the same operations in another order (the graph's replay): the float policy, not equality
        assert_close(traced, eager)
        return
    if hasattr(eager, "to_legacy_cache"):
        eager = eager.to_legacy_cache()
    assert len(traced) == len(eager)
    for traced_part, eager_part in zip(traced, eager):
        _assert_same(traced_part, eager_part)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_traced_model_gives_the_eager_outputs_on_other_shapes_and_padding_after_save_and_load(family: str) -> None:
    model = _model(family, torchscript=True)
    # traced on an unpadded batch: the eager forward would drop its all-ones mask, the trace must not
    loaded = _round_trip(_trace(model, _batch(2, 6, padded=False, seed=1)))
    for rows, length, padded in ((3, 9, True), (1, 4, False), (2, 6, True), (1, 1, False)):
        ids, mask = _batch(rows, length, padded, seed=length)
        with torch.no_grad():
            eager = model(ids, mask)
        traced = loaded(ids, mask)
        assert isinstance(traced, tuple) and isinstance(eager, tuple)  # TorchScript mode returns tuples
        _assert_same(traced, eager)


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_a_decoder_traced_with_a_past_takes_other_past_and_new_lengths(family: str) -> None:
    model = _model(family, torchscript=True)

    def prompt(rows: int, length: int, seed: int) -> tuple[torch.Tensor, Any]:
        ids, mask = _batch(rows, length, padded=True, seed=seed)
        with torch.no_grad():
            return mask, model(ids, mask)[1].to_legacy_cache()

    mask, past = prompt(2, 5, seed=0)
    step = {"input_ids": torch.randint(3, 50, (2, 1)), "attention_mask": torch.cat((mask, mask[:, :1] * 0 + 1), 1)}
    loaded = _round_trip(_trace(model, example_kwarg_inputs={**step, "past_key_values": past}))
    mask, past = prompt(3, 7, seed=1)  # another batch, past length and number of new tokens
    new = {"input_ids": torch.randint(3, 50, (3, 2)), "attention_mask": torch.cat((mask, torch.ones(3, 2).long()), 1)}
    with torch.no_grad():
        eager = model(**new, past_key_values=past)
    traced = loaded(**new, past_key_values=prompt(3, 7, seed=1)[1])
    _assert_same(traced, eager)
    assert traced[1][0][0].shape[2] == 9  # the returned past holds the 7 cached positions and the 2 new ones


def test_torchscript_mode_unties_the_embeddings_by_cloning_them() -> None:
    model = _model("llama", torchscript=True, tie_word_embeddings=True)
    embeddings, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    assert head is not embeddings and head.data_ptr() != embeddings.data_ptr()  # two parameters now
    assert torch.equal(head, embeddings)  # a copy: exact
    tied = _model("llama", tie_word_embeddings=True)
    assert tied.lm_head.weight is tied.model.embed_tokens.weight  # without TorchScript mode they stay one


def test_torchscript_is_saved_in_config_json_and_from_pretrained_sets_it(tmp_path: Path) -> None:
    model = _model("gpt2")
    model.save_pretrained(tmp_path / "plain")
    assert "torchscript" not in json.loads((tmp_path / "plain" / "config.json").read_text())  # only when set
    loaded = microformers.AutoModelForCausalLM.from_pretrained(tmp_path / "plain", torchscript=True)
    assert loaded.config.torchscript is True and loaded.config.return_dict is False
    assert loaded.lm_head.weight is not loaded.transformer.wte.weight
    assert torch.equal(loaded.lm_head.weight, model.lm_head.weight)  # the checkpoint's embeddings, copied: exact
    ids, mask = _batch(2, 5, padded=True, seed=3)
    output = loaded(ids, mask)
    assert isinstance(output, tuple)
    assert_close(output[0], model(ids, mask).logits)
    loaded.save_pretrained(tmp_path / "traced")
    saved = json.loads((tmp_path / "traced" / "config.json").read_text())
    assert saved["torchscript"] is True and saved["return_dict"] is False
    assert microformers.AutoConfig.from_pretrained(tmp_path / "traced").torchscript is True


def test_torchscript_mode_returns_tuples_but_a_call_may_still_ask_for_a_dict() -> None:
    config = microformers.AutoConfig.for_model("bert", torchscript=True, return_dict=True, **FAMILIES["bert"][1])
    assert config.return_dict is False and config.use_return_dict is False  # the reference's use_return_dict
    model = _model("bert", torchscript=True)
    ids, mask = _batch(1, 4, padded=False, seed=0)
    assert isinstance(model(ids, mask), tuple)
    assert "last_hidden_state" in model(ids, mask, return_dict=True)


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_a_torchscript_value_that_is_not_a_bool_is_refused_naming_it(value: Any, tmp_path: Path) -> None:
    with pytest.raises(microformers.ConfigError, match=r"torchscript=.* must be true or false"):
        microformers.AutoConfig.for_model("gpt2", torchscript=value)
    _model("gpt2").save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**data, "torchscript": value}))
    with pytest.raises(microformers.ConfigError, match=r"config\.json.*torchscript"):
        microformers.AutoModelForCausalLM.from_pretrained(tmp_path)


@pytest.mark.parametrize("family", ["bert", "distilbert", "roberta", "llama", "gpt2"])
def test_our_traced_graph_matches_the_reference_traced_graph(family: str, tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    auto = FAMILIES[family][0]
    _model(family).save_pretrained(tmp_path)
    decoder = auto == "AutoModelForCausalLM"
    settings = {"use_cache": False} if decoder else {}
    ours = getattr(microformers, auto).from_pretrained(tmp_path, torchscript=True, **settings)
    # the reference's own decoders do not trace with return_dict=False; their dict output is traced non-strictly
    reference = getattr(transformers, auto).from_pretrained(
        tmp_path, **settings, **({} if decoder else {"return_dict": False})
    )
    example = dict(zip(("input_ids", "attention_mask"), _batch(2, 6, padded=True, seed=1)))
    ours_traced = _trace(ours, tuple(example.values()))
    reference_traced = _trace(reference.eval(), example_kwarg_inputs=example, strict=False, check_trace=False)
    for rows, length, padded in ((3, 9, True), (1, 3, False)):
        ids, mask = _batch(rows, length, padded, seed=length)
        expected = reference_traced(input_ids=ids, attention_mask=mask)
        expected = tuple(expected.values()) if isinstance(expected, dict) else expected
        got = ours_traced(ids, mask)
        assert len(got) == len(expected)
        # A left-padded row's positions: ours count its real tokens (as generate does), the reference's decoders
        # count from the first column unless given position_ids; that row is compared for the encoders only.
        rows_compared = slice(1 if decoder and padded else 0, None)
        for got_part, expected_part in zip(got, expected):
            # another implementation: the parity tolerance
            assert_close(got_part[rows_compared], expected_part[rows_compared], atol=1e-5, rtol=1e-4)
