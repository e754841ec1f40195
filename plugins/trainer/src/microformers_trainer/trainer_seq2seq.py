"""``Seq2SeqTrainer``: a :class:`Trainer` whose evaluation and prediction can generate (``predict_with_generate``).

With ``Seq2SeqTrainingArguments(predict_with_generate=True)``, each evaluation batch runs ``model.generate``
on the encoder inputs (``max_length`` / ``num_beams`` from ``generation_max_length`` /
``generation_num_beams``, or from ``evaluate(max_length=..., num_beams=...)``), pads the generated ids to a
common length with the pad token, and computes the loss on the labels as usual; ``compute_metrics`` gets the
generated ids as ``predictions``.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from microformers import ConfigError

from .trainer import PredictionOutput, Trainer, _detach

# Keys of a batch that are no input of ``generate``: the targets and the teacher-forced decoder inputs built from them.
_NOT_GENERATE_INPUTS = ("labels", "decoder_input_ids", "decoder_attention_mask", "return_loss")


class Seq2SeqTrainer(Trainer):
    """:class:`Trainer` for encoder-decoder (or any generating) models; see the module docstring."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._gen_kwargs: dict[str, Any] = {}
        self._generate_override: bool | None = None
        config = getattr(self.args, "generation_config", None)
        if config is not None:
            self.model.generation_config = self.load_generation_config(config)

    @staticmethod
    def load_generation_config(config: Any) -> Any:
        """A copy of a ``GenerationConfig``, or one read from a folder or a ``generation_config.json`` file;
        invalid settings are refused before training starts."""
        from microformers import GenerationConfig

        if isinstance(config, (str, os.PathLike)):
            path = Path(config)
            if path.is_file():
                loaded = GenerationConfig.from_pretrained(path.parent, path.name)
            else:
                loaded = GenerationConfig.from_pretrained(os.fspath(config))
        elif isinstance(config, GenerationConfig):
            loaded = copy.deepcopy(config)
        else:
            raise ConfigError(
                f"generation_config={config!r}: pass a GenerationConfig, or a folder or generation_config.json file"
            )
        try:
            loaded.validate()
        except Exception as exc:
            raise ConfigError(f"Seq2SeqTrainingArguments(generation_config=...): {exc}. Fix it to train.") from exc
        return loaded

    # -- evaluation and prediction with generation settings ----------------------------------------------
    def _set_gen_kwargs(self, gen_kwargs: dict[str, Any]) -> None:
        """The call's ``generate`` settings, ``generation_max_length`` / ``generation_num_beams`` where it sets none."""
        gen_kwargs = dict(gen_kwargs)
        self._generate_override = gen_kwargs.pop("predict_with_generate", None)
        if gen_kwargs.get("max_length") is None and gen_kwargs.get("max_new_tokens") is None:
            if getattr(self.args, "generation_max_length", None) is not None:
                gen_kwargs["max_length"] = self.args.generation_max_length
        if gen_kwargs.get("num_beams") is None and getattr(self.args, "generation_num_beams", None) is not None:
            gen_kwargs["num_beams"] = self.args.generation_num_beams
        self._gen_kwargs = {key: value for key, value in gen_kwargs.items() if value is not None}

    def evaluate(
        self,
        eval_dataset: Any = None,
        ignore_keys: list[str] | None = None,
        metric_key_prefix: str = "eval",
        **gen_kwargs: Any,
    ) -> dict[str, float]:
        """As :meth:`Trainer.evaluate`; ``max_length``, ``num_beams`` and any other ``generate`` argument apply
        to this call's generation (``predict_with_generate=`` overrides the training arguments' for it)."""
        self._set_gen_kwargs(gen_kwargs)
        try:
            return super().evaluate(eval_dataset, ignore_keys=ignore_keys, metric_key_prefix=metric_key_prefix)
        finally:
            self._generate_override = None

    def predict(
        self,
        test_dataset: Any,
        ignore_keys: list[str] | None = None,
        metric_key_prefix: str = "test",
        **gen_kwargs: Any,
    ) -> PredictionOutput:
        """As :meth:`Trainer.predict`; with ``predict_with_generate`` the predictions are generated token ids
        (``[samples, length]``, padded with the pad token; -100 where batches of different lengths meet)."""
        self._set_gen_kwargs(gen_kwargs)
        try:
            return super().predict(test_dataset, ignore_keys=ignore_keys, metric_key_prefix=metric_key_prefix)
        finally:
            self._generate_override = None

    @property
    def _predict_with_generate(self) -> bool:
        if self._generate_override is not None:
            return bool(self._generate_override)
        return bool(getattr(self.args, "predict_with_generate", False))

    def prediction_step(
        self,
        model: nn.Module,
        inputs: dict[str, Any],
        prediction_loss_only: bool,
        ignore_keys: list[str] | None = None,
        **gen_kwargs: Any,
    ) -> tuple[torch.Tensor | None, Any, Any]:
        """``(loss, generated ids, labels)`` with ``predict_with_generate``, else :meth:`Trainer.prediction_step`."""
        if not self._predict_with_generate or prediction_loss_only:
            return super().prediction_step(model, inputs, prediction_loss_only, ignore_keys)
        generator = self.model
        if not callable(getattr(generator, "generate", None)):
            raise ConfigError(
                f"predict_with_generate=True needs a model with generate(); {type(generator).__name__} has none"
            )
        has_labels = inputs.get("labels") is not None
        inputs = self._prepare_inputs(inputs)
        gen_kwargs = dict(gen_kwargs or self._gen_kwargs)
        generation_inputs = {k: v for k, v in inputs.items() if k not in _NOT_GENERATE_INPUTS}
        with torch.no_grad(), self._autocast():
            generated = generator.generate(**generation_inputs, **gen_kwargs)
        generated = generated.sequences if hasattr(generated, "sequences") else generated
        length = self._padded_length(gen_kwargs)
        if generated.shape[-1] < length:
            generated = self._pad_tensors_to_max_len(generated, length)
        loss = None
        if has_labels:
            with torch.no_grad(), self._autocast():
                num_items = self._num_items([inputs], across_processes=False)
                loss = self.compute_loss(model, dict(inputs), num_items_in_batch=num_items)
            loss = loss.detach().mean()
        if self.args.prediction_loss_only:
            return loss, None, None
        labels = None
        if has_labels:
            labels = inputs["labels"]
            if labels.shape[-1] < length:
                labels = self._pad_tensors_to_max_len(labels, length)
            labels = _detach(labels)
        return loss, _detach(generated), labels

    def _padded_length(self, gen_kwargs: dict[str, Any]) -> int:
        """What generated ids are padded to: the call's ``max_length`` (or ``max_new_tokens`` + the decoder start
        token), else the model's generation config's, else 20 (the default ``max_length``)."""
        if gen_kwargs.get("max_length") is not None:
            return int(gen_kwargs["max_length"])
        if gen_kwargs.get("max_new_tokens") is not None:
            return int(gen_kwargs["max_new_tokens"]) + 1
        config = getattr(self.model, "generation_config", None)
        if getattr(config, "max_new_tokens", None) is not None:
            return int(config.max_new_tokens) + 1
        return int(getattr(config, "max_length", None) or 20)

    def _pad_tensors_to_max_len(self, tensor: torch.Tensor, max_length: int) -> torch.Tensor:
        """``tensor`` right-padded to ``max_length`` with the tokenizer's pad token (else its eos token, else the
        model config's pad token)."""
        tokenizer = self.processing_class
        pad_id = None
        if tokenizer is not None and hasattr(tokenizer, "pad_token_id"):
            pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        if pad_id is None:
            pad_id = getattr(getattr(self.model, "config", None), "pad_token_id", None)
        if pad_id is None:
            raise ConfigError(
                "predict_with_generate pads the generated ids to one length but neither the tokenizer "
                "(processing_class) nor config.pad_token_id names a pad token; set one of them"
            )
        padded = tensor.new_full((tensor.shape[0], max_length), pad_id)
        padded[:, : tensor.shape[-1]] = tensor
        return padded


__all__ = ["Seq2SeqTrainer"]
