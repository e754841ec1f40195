"""microformers-sdk's entry point through the SDK's plugin conformance checks (no torch at discovery, valid hooks)."""

from __future__ import annotations

import torch

from microformers_sdk.testing import PluginConformanceTests


class TestSdkPluginConformance(PluginConformanceTests):
    plugin_name = "sdk"
    registers = (("attention", "sdpa"), ("attention", "eager"), ("exports", "apply_chunking_to_forward"))


def test_apply_chunking_to_forward_is_importable_from_microformers_as_from_the_reference() -> None:
    import microformers
    from microformers_sdk.pytorch_utils import apply_chunking_to_forward

    assert microformers.apply_chunking_to_forward is apply_chunking_to_forward
    seen: list[int] = []

    def forward(x: torch.Tensor) -> torch.Tensor:
        seen.append(x.shape[1])
        return x + 1

    out = microformers.apply_chunking_to_forward(forward, 2, 1, torch.zeros(1, 5, 3))
    assert seen == [2, 2, 1] and torch.equal(out, torch.ones(1, 5, 3))  # exact: integers in float32
