"""``fill-mask``: the most likely tokens for each mask token."""

from __future__ import annotations

from typing import Any

import torch

from microformers import ConfigError

from ._common import check_text, logits_of
from .base import Pipeline


class FillMaskPipeline(Pipeline):
    """``pipe("Paris is the [MASK] of France.", top_k=5, targets=None)``.

    One mask: a list of ``{"score", "token", "token_str", "sequence"}`` best first; several masks: one such
    list per mask. ``targets`` restricts the candidates to those words (the first sub-token of a word that
    is not in the vocabulary).
    """

    def _sanitize_parameters(
        self, top_k: int | None = None, targets: Any = None, tokenizer_kwargs: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        if getattr(self.tokenizer, "mask_token_id", None) is None:
            raise ConfigError("fill-mask: the tokenizer defines no mask token; use a masked-LM model's tokenizer")
        postprocess: dict[str, Any] = {}
        if targets is not None:
            postprocess["target_ids"] = self._target_ids(targets)
        if top_k is not None:
            if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
                raise ConfigError(f"fill-mask: top_k={top_k!r}; pass a positive integer")
            postprocess["top_k"] = top_k
        preprocess = {"tokenizer_kwargs": tokenizer_kwargs} if tokenizer_kwargs else {}
        return preprocess, {}, postprocess

    def _target_ids(self, targets: Any) -> list[int]:
        targets = [targets] if isinstance(targets, str) else list(targets)
        vocab = self.tokenizer.get_vocab()
        ids: set[int] = set()
        for target in targets:
            token_id = vocab.get(target)
            if token_id is None:
                pieces = self.tokenizer(target, add_special_tokens=False)["input_ids"]
                if not pieces:
                    continue
                token_id = pieces[0]
            ids.add(int(token_id))
        if not ids:
            raise ConfigError(f"fill-mask: none of targets={targets!r} maps to a token; pass words in the vocabulary")
        return sorted(ids)

    def __call__(self, inputs: Any = None, *args: Any, **kwargs: Any) -> Any:
        outputs = super().__call__(inputs, *args, **kwargs)
        # As the reference: a one-element list gives that element's result, not a list of one.
        if isinstance(inputs, list) and len(inputs) == 1:
            return outputs[0]
        return outputs

    def preprocess(self, text: Any, tokenizer_kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
        check_text(text, "fill-mask")
        encoded = dict(self.tokenizer(text, return_tensors="pt", **(tokenizer_kwargs or {})))
        if not (encoded["input_ids"] == self.tokenizer.mask_token_id).any():
            raise ConfigError(
                f"fill-mask: no mask token ({self.tokenizer.mask_token}) in the input {text!r}; "
                f"put {self.tokenizer.mask_token} where a word should be predicted"
            )
        return encoded

    def _forward(self, model_inputs: dict[str, Any]) -> dict[str, Any]:
        return {"logits": logits_of(self.model(**model_inputs)), "input_ids": model_inputs["input_ids"]}

    def postprocess(
        self, model_outputs: dict[str, Any], top_k: int = 5, target_ids: list[int] | None = None
    ) -> list[dict[str, Any]] | list[list[dict[str, Any]]]:
        input_ids = model_outputs["input_ids"][0]
        positions = torch.nonzero(input_ids == self.tokenizer.mask_token_id).squeeze(-1)
        probs = model_outputs["logits"][0, positions].float().softmax(dim=-1)
        candidates = None
        if target_ids is not None:
            candidates = torch.tensor(target_ids)
            probs = probs[..., candidates]
        values, indices = probs.topk(min(top_k, probs.shape[-1]))
        single = len(positions) == 1
        pad_id = self.tokenizer.pad_token_id
        results = []
        for position, row_values, row_indices in zip(positions.tolist(), values.tolist(), indices.tolist()):
            row = []
            for score, index in zip(row_values, row_indices):
                token = int(candidates[index]) if candidates is not None else index
                tokens = input_ids.clone()
                tokens[position] = token
                if pad_id is not None:
                    tokens = tokens[tokens != pad_id]
                row.append(
                    {
                        "score": score,
                        "token": token,
                        "token_str": self.tokenizer.decode([token]),
                        "sequence": self.tokenizer.decode(tokens.tolist(), skip_special_tokens=single),
                    }
                )
            results.append(row)
        return results[0] if single else results
