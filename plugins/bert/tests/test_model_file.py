"""modeling_bert.py is a self-contained model file: its own layers and forwards, the checkpoint's names."""

from __future__ import annotations

import inspect

import torch

from microformers_bert import modeling_bert
from microformers_bert.configuration_bert import BertConfig
from microformers_bert.modeling_bert import BertForMaskedLM, BertModel

TINY = {"vocab_size": 40, "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2,
        "intermediate_size": 24, "max_position_embeddings": 12}  # fmt: skip


def test_no_model_class_inherits_from_the_sdk() -> None:
    for name, cls in inspect.getmembers(modeling_bert, inspect.isclass):
        if cls.__module__ != modeling_bert.__name__:
            continue
        foreign = [base.__module__ for base in cls.__mro__ if base.__module__.startswith("microformers_sdk")]
        assert not foreign, f"{name} inherits from {foreign}"


def test_layer_parameters_carry_the_checkpoint_names() -> None:
    layer = BertModel(BertConfig(**TINY)).encoder.layer[0]
    assert sorted(name for name, _ in layer.named_parameters()) == sorted(
        f"{module}.{kind}"
        for module in ("attention.self.query", "attention.self.key", "attention.self.value",
                       "attention.output.dense", "attention.output.LayerNorm", "intermediate.dense",
                       "output.dense", "output.LayerNorm")
        for kind in ("weight", "bias")
    )  # fmt: skip


def test_resized_embeddings_stay_tied_to_the_mlm_decoder() -> None:
    torch.manual_seed(0)
    model = BertForMaskedLM(BertConfig(**TINY)).eval()
    model.resize_token_embeddings(48)
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
    assert model(torch.tensor([[1, 47, 3]])).logits.shape == (1, 3, 48)


def test_gradient_checkpointing_gives_the_same_gradients() -> None:
    torch.manual_seed(0)
    config = BertConfig(**TINY, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = BertForMaskedLM(config).train()
    ids, labels = torch.tensor([[2, 5, 7, 9]]), torch.tensor([[-100, 5, -100, 9]])

    def grads() -> dict[str, torch.Tensor]:
        model.zero_grad()
        model(ids, labels=labels).loss.backward()
        return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}

    plain = grads()
    model.gradient_checkpointing_enable()
    assert model.bert.is_gradient_checkpointing
    checkpointed = grads()
    assert plain.keys() == checkpointed.keys()
    for name, grad in plain.items():
        torch.testing.assert_close(checkpointed[name], grad, msg=name)
