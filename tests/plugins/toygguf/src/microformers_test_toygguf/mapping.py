"""The toy model's GGUF layout, as an invented converter would write it.

``toy.width`` is the hidden size, ``toy.depth`` the block count; blocks hold ``blk.N.norm`` (a LayerNorm
stored as ``1 + w``, undone with ``Shift(-1.0)``) and ``blk.N.proj`` (stored transposed); the embedding is
``embed.weight``. ``adjust_config`` records the file's ``toy.flavour`` string in the config.
"""

from __future__ import annotations

from typing import Any

from microformers_sdk.gguf import Check, GGUFArchitecture, GGUFView, Meta, Shift, Target, Transpose, linear


def adjust(config: dict[str, Any], gguf: GGUFView) -> None:
    config["flavour"] = gguf.metadata.get(gguf.key("flavour"), "plain")
    config["embed_norm"] = float(gguf.read("embed.weight").norm())


TOY = GGUFArchitecture(
    gguf_name="toy",
    model_type="toy",
    architectures=("ToyForCausalLM",),
    config={"hidden_size": Meta("width"), "num_layers": Meta("depth")},
    tensors={
        "embed.weight": "model.embed.weight",
        "blk.{bid}.norm.weight": Target("model.blocks.{bid}.norm.weight", (Shift(-1.0),)),
        "blk.{bid}.norm.bias": "model.blocks.{bid}.norm.bias",
        **linear("blk.{bid}.proj", "model.blocks.{bid}.proj", Transpose()),
    },
    rope=False,
    tied_output="lm_head.weight",
    token_embedding="embed.weight",
    checks=(Check("embed.weight", 1, ("hidden_size",)),),
    adjust_config="microformers_test_toygguf.mapping:adjust",
)
