"""``my-task``: character statistics computed by a tiny torch module, through the four pipeline steps."""

from __future__ import annotations

from typing import Any

import torch

from microformers import ConfigError
from microformers.pipelines import Pipeline

VOWELS = "aeiouAEIOU"


class VowelCounter(torch.nn.Module):
    """Counts, per row, the code points that are vowels (padding is code point 0, never a vowel)."""

    def __init__(self) -> None:
        super().__init__()
        table = torch.zeros(128)
        table[[ord(v) for v in VOWELS]] = 1.0
        self.register_buffer("is_vowel", table)

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        return self.is_vowel[codes.clamp(max=127)].sum(dim=-1)


class CharacterCountPipeline(Pipeline):
    needs_tokenizer = False
    needs_model = False

    def __init__(self, model: Any = None, tokenizer: Any = None, **kwargs: Any) -> None:
        super().__init__(model if model is not None else VowelCounter(), tokenizer, **kwargs)

    def _sanitize_parameters(self, shout: bool | None = None) -> tuple[dict, dict, dict]:
        return {}, {}, ({} if shout is None else {"shout": shout})

    def preprocess(self, text: Any) -> dict[str, Any]:
        if not isinstance(text, str) or not text:
            raise ConfigError(f"my-task: pass a non-empty string, got {text!r}")
        return {"codes": torch.tensor([[ord(c) for c in text]]), "text": text}

    def _forward(self, inputs: dict[str, Any]) -> dict[str, Any]:
        return {"vowels": self.model(inputs["codes"]), "length": (inputs["codes"] > 0).sum(-1), "text": inputs["text"]}

    def postprocess(self, outputs: dict[str, Any], shout: bool = False) -> dict[str, Any]:
        text = outputs["text"]
        return {
            "text": text.upper() if shout else text,
            "length": int(outputs["length"][0]),
            "vowels": int(outputs["vowels"][0]),
        }
