"""A toy architecture: embedding -> blocks of (LayerNorm, Linear, GELU) -> LM head."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from microformers import PretrainedConfig, PreTrainedModel
from microformers_sdk.outputs import BaseModelOutput, CausalLMOutput


class ToyConfig(PretrainedConfig):
    model_type = "toy"

    def __init__(self, vocab_size: int = 32, hidden_size: int = 16, num_layers: int = 2, **kwargs: Any) -> None:
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        kwargs.setdefault("tie_word_embeddings", True)
        super().__init__(**kwargs)


class ToyBlock(nn.Module):
    def __init__(self, config: ToyConfig) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(config.hidden_size)
        self.proj = nn.Linear(config.hidden_size, config.hidden_size)
        self.register_buffer("scale", torch.tensor(0.5), persistent=False)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden + self.scale * torch.nn.functional.gelu(self.proj(self.norm(hidden)))


class ToyPreTrainedModel(PreTrainedModel):
    config_class = ToyConfig
    base_model_prefix = "model"


class ToyModel(ToyPreTrainedModel):
    def __init__(self, config: ToyConfig) -> None:
        super().__init__(config)
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.blocks = nn.ModuleList(ToyBlock(config) for _ in range(config.num_layers))
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.embed

    def forward(self, input_ids: torch.Tensor, **_: Any) -> BaseModelOutput:
        hidden = self.embed(input_ids)
        for block in self.blocks:
            hidden = block(hidden)
        return BaseModelOutput(last_hidden_state=hidden)


class ToyForCausalLM(ToyPreTrainedModel):
    _tied_weights_keys = {"lm_head.weight": "model.embed.weight"}

    def __init__(self, config: ToyConfig) -> None:
        super().__init__(config)
        self.model = ToyModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_output_embeddings(self) -> nn.Module:
        return self.lm_head

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None, **_: Any) -> CausalLMOutput:
        logits = self.lm_head(self.model(input_ids).last_hidden_state)
        loss = None
        if labels is not None:
            loss = nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten())
        return CausalLMOutput(loss=loss, logits=logits)


def hello_command(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    parser.add_argument("name")

    def run(args: argparse.Namespace) -> int:
        print(f"hello {args.name}")
        return 0

    return run
