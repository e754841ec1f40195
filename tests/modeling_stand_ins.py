"""Tiny ``PreTrainedModel`` stand-ins that several kernel test modules load, save and build (one definition each)."""

from __future__ import annotations

import torch

from microformers import modeling as modeling_module
from microformers.configuration import PretrainedConfig

__all__ = ["_Flat", "_Initialised", "_Mixed", "_Small"]


class _Flat(modeling_module.PreTrainedModel):
    """No base-model prefix; a top-level parameter, a submodule and a persistent buffer."""

    config_class = PretrainedConfig

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__(config)
        self.scale = torch.nn.Parameter(torch.ones(3))
        self.inner = torch.nn.Linear(3, 3)
        self.register_buffer("table", torch.arange(3.0))
        self.post_init()


class _Small(modeling_module.PreTrainedModel):
    """A linear layer and a frozen parameter made from values."""

    config_class = PretrainedConfig

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__(config)
        self.inner = torch.nn.Linear(3, 3)
        self.fixed = torch.nn.Parameter(torch.arange(3.0), requires_grad=False)
        self.post_init()


class _Initialised(modeling_module.PreTrainedModel):
    """Modules whose reference initialisation differs from torch's own."""

    config_class = PretrainedConfig

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__(config)
        self.linear = torch.nn.Linear(64, 64)
        self.embed = torch.nn.Embedding(8, 64, padding_idx=1)
        self.post_init()


class _Mixed(modeling_module.PreTrainedModel):
    """A trainable linear layer, a frozen float parameter and an integer parameter (e.g. a quantized table)."""

    config_class = PretrainedConfig

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__(config)
        self.linear = torch.nn.Linear(4, 4)
        self.frozen = torch.nn.Parameter(torch.ones(4), requires_grad=False)
        self.codes = torch.nn.Parameter(torch.arange(4, dtype=torch.int32), requires_grad=False)
        self.post_init()
