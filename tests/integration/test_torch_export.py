"""``torch.export.export`` captures every family's forward without graph breaks from our own code: outputs are
pytree nodes (``ModelOutput`` subclasses register themselves) and the eager shortcuts that branch on tensor values
(an all-ones mask dropped, ids range-checked) are skipped while exporting. The exported program gives the eager
outputs, on the inputs it was captured with and on a padded batch of another length (and batch size, with a dynamic
batch dimension). A decoder exports with a KV cache (``DynamicCache`` is a pytree node), and ``torch.compile(...,
fullgraph=True)`` captures each encoder and decoder forward without a graph break."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import microformers
from microformers_sdk.testing import assert_close

IDS = {"vocab_size": 50}
FAMILIES: dict[str, tuple[str, dict[str, Any], str]] = {
    "llama": ("AutoModelForCausalLM", {**IDS, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
                                       "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 64},
            "decoder"),
    "gpt2": ("AutoModelForCausalLM", {**IDS, "n_embd": 16, "n_layer": 1, "n_head": 2}, "decoder"),
    "bert": ("AutoModel", {**IDS, "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
                           "intermediate_size": 20}, "encoder"),
    "roberta": ("AutoModel", {**IDS, "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
                              "intermediate_size": 20}, "encoder"),
    "distilbert": ("AutoModel", {**IDS, "dim": 16, "n_layers": 1, "n_heads": 2, "hidden_dim": 20}, "encoder"),
    "t5": ("AutoModelForSeq2SeqLM", {**IDS, "d_model": 16, "d_kv": 8, "d_ff": 32, "num_layers": 1, "num_heads": 2,
                                     "decoder_start_token_id": 0}, "seq2seq"),
    "bart": ("AutoModelForSeq2SeqLM", {**IDS, "d_model": 16, "encoder_layers": 1, "decoder_layers": 1,
                                       "encoder_attention_heads": 2, "decoder_attention_heads": 2,
                                       "encoder_ffn_dim": 20, "decoder_ffn_dim": 20, "max_position_embeddings": 32},
             "seq2seq"),
    "vit": ("AutoModelForImageClassification", {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
                                                "intermediate_size": 20, "image_size": 8, "patch_size": 4,
                                                "num_labels": 3}, "image"),
}  # fmt: skip


def _inputs(kind: str, length: int, padded: bool) -> dict[str, Any]:
    generator = torch.Generator().manual_seed(length)
    if kind == "image":
        return {"pixel_values": torch.randn(2, 3, 8, 8, generator=generator)}
    ids = torch.randint(3, 50, (2, length), generator=generator)
    mask = torch.ones_like(ids)
    if padded:
        mask[0, : length // 2] = 0  # left padding in the first row
    inputs: dict[str, Any] = {"input_ids": ids, "attention_mask": mask}
    if kind == "decoder":
        inputs["use_cache"] = False
    if kind == "seq2seq":
        inputs |= {"decoder_input_ids": torch.randint(3, 50, (2, 3), generator=generator), "use_cache": False}
    return inputs


@pytest.mark.parametrize("family", list(FAMILIES))
def test_torch_export_captures_the_forward_and_gives_the_eager_outputs(family: str) -> None:
    auto, values, kind = FAMILIES[family]
    torch.manual_seed(0)
    model = getattr(microformers, auto).from_config(microformers.AutoConfig.for_model(family, **values)).eval()
    captured = _inputs(kind, 6, padded=False)  # an unpadded batch: the eager path would drop this mask
    dynamic = None
    if kind != "image":
        length = torch.export.Dim("length", min=2, max=32)
        dynamic = {name: ({1: length} if name in ("input_ids", "attention_mask") else None) for name in captured}
    program = torch.export.export(model, (), captured, dynamic_shapes=dynamic, strict=False)
    key = "last_hidden_state" if kind == "encoder" else "logits"
    for inputs in (captured, _inputs(kind, 9 if kind != "image" else 6, padded=kind != "image")):
        exported = program.module()(**inputs)
        with torch.no_grad():
            eager = model(**inputs)
        assert type(exported) is type(eager)  # the output class survives the graph (a pytree node)
        # the same operations, but the graph may order or fuse them differently: compared with the float policy
        assert_close(exported[key], eager[key])


def _dynamic(captured: dict[str, Any]) -> dict[str, Any]:
    batch, length = torch.export.Dim("batch", min=1, max=16), torch.export.Dim("length", min=2, max=32)
    return {name: ({0: batch, 1: length} if name in ("input_ids", "attention_mask") else None) for name in captured}


@pytest.mark.parametrize("family", ["bert", "llama"])
def test_an_export_with_dynamic_batch_and_length_gives_the_eager_outputs_on_other_batches(family: str) -> None:
    auto, values, kind = FAMILIES[family]
    torch.manual_seed(0)
    model = getattr(microformers, auto).from_config(microformers.AutoConfig.for_model(family, **values)).eval()
    captured = _inputs(kind, 6, padded=False)
    program = torch.export.export(model, (), captured, dynamic_shapes=_dynamic(captured), strict=False)
    key = "last_hidden_state" if kind == "encoder" else "logits"
    for rows, length in ((1, 3), (5, 11)):
        generator = torch.Generator().manual_seed(length)
        ids = torch.randint(3, 50, (rows, length), generator=generator)
        mask = torch.ones_like(ids)
        mask[0, : length // 2] = 0
        inputs = {**captured, "input_ids": ids, "attention_mask": mask}
        with torch.no_grad():
            eager = model(**inputs)
        # the same operations, ordered or fused differently by the graph: the float policy
        assert_close(program.module()(**inputs)[key], eager[key])


@pytest.mark.parametrize("family", ["bert", "llama", "gpt2", "distilbert", "roberta"])
def test_the_forward_compiles_as_one_graph_without_breaks_from_our_code(family: str) -> None:
    auto, values, kind = FAMILIES[family]
    torch.manual_seed(0)
    model = getattr(microformers, auto).from_config(microformers.AutoConfig.for_model(family, **values)).eval()
    inputs = _inputs(kind, 6, padded=False)
    with torch.no_grad():
        eager = model(**inputs)  # (the eager call also resolves the attention function the graph reuses)
        torch._dynamo.reset()
        # fullgraph=True raises at the first graph break; the eager backend only checks the capture, compiles nothing
        compiled = torch.compile(model, fullgraph=True, backend="eager", dynamic=True)(**inputs)
        key = "last_hidden_state" if kind == "encoder" else "logits"
        assert_close(compiled[key], eager[key])
        padded = _inputs(kind, 9, padded=True)
        assert_close(
            torch.compile(model, fullgraph=True, backend="eager", dynamic=True)(**padded)[key], model(**padded)[key]
        )
    torch._dynamo.reset()


def test_a_decoder_exports_with_a_dynamic_cache_in_and_out() -> None:
    auto, values, _ = FAMILIES["llama"]
    torch.manual_seed(0)
    model = getattr(microformers, auto).from_config(microformers.AutoConfig.for_model("llama", **values)).eval()

    def prompt(rows: int, length: int) -> tuple[torch.Tensor, Any]:
        ids = torch.randint(3, 50, (rows, length), generator=torch.Generator().manual_seed(length))
        mask = torch.ones_like(ids)
        mask[0, :2] = 0  # left padding in the first row
        with torch.no_grad():
            return mask, model(ids, mask, use_cache=True).past_key_values

    mask, past = prompt(2, 5)
    step = {"input_ids": torch.randint(3, 50, (2, 2)), "attention_mask": torch.cat((mask, torch.ones(2, 2).long()), 1)}
    legacy = past.to_legacy_cache()  # the past goes in as (keys, values) per layer
    auto_dim = torch.export.Dim.AUTO
    dynamic = {"input_ids": {0: auto_dim, 1: auto_dim}, "attention_mask": {0: auto_dim, 1: auto_dim},
               "past_key_values": tuple(({0: auto_dim, 2: auto_dim}, {0: auto_dim, 2: auto_dim}) for _ in legacy)}  # fmt: skip
    program = torch.export.export(model, (), {**step, "past_key_values": legacy}, dynamic_shapes=dynamic, strict=False)
    mask, past = prompt(3, 7)  # another batch, past length and number of new tokens
    new = {"input_ids": torch.randint(3, 50, (3, 1)), "attention_mask": torch.cat((mask, torch.ones(3, 1).long()), 1)}
    exported = program.module()(**new, past_key_values=past.to_legacy_cache())
    with torch.no_grad():
        eager = model(**new, past_key_values=past)
    assert type(exported.past_key_values) is type(eager.past_key_values)  # a DynamicCache comes back (a pytree node)
    assert exported.past_key_values.get_seq_length() == 8
    assert_close(exported.logits, eager.logits)
    for (keys, values_), (eager_keys, eager_values) in zip(exported.past_key_values, eager.past_key_values):
        assert_close(keys, eager_keys)
        assert_close(values_, eager_values)
