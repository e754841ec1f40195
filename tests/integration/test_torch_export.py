"""``torch.export.export`` captures every family's forward without graph breaks from our own code: outputs are
pytree nodes (``ModelOutput`` subclasses register themselves) and the eager shortcuts that branch on tensor values
(an all-ones mask dropped, ids range-checked) are skipped while exporting. The exported program gives the eager
outputs, on the inputs it was captured with and on a padded batch of another length."""

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


def test_torchscript_is_refused_with_what_to_use_instead(tmp_path: Any) -> None:
    config = microformers.AutoConfig.for_model("gpt2", vocab_size=50, n_embd=16, n_layer=1, n_head=2)
    microformers.AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path)
    with pytest.raises(microformers.ConfigError, match=r"torchscript=True: .*torch\.export\.export.*microformers export onnx"):
        microformers.AutoModelForCausalLM.from_pretrained(tmp_path, torchscript=True)
    assert microformers.AutoModelForCausalLM.from_pretrained(tmp_path, torchscript=False) is not None  # the default
