"""``text2text-generation``, ``summarization`` and ``translation``: encoder-decoder models run through ``generate``.

The reference 5.x removed these three pipelines; they keep the reference 4.x behaviour here: one list of
records per input (``[{"generated_text": ...}]``, ``summary_text``, ``translation_text``; ``*_token_ids`` with
``return_tensors=True``), a list of inputs giving one record per input when each has one result, the prefix
and generation settings of ``config.task_specific_params[task]`` (T5's ``"summarize: "``), and
``src_lang``/``tgt_lang`` for translation (from the arguments or a ``translation_xx_to_yy`` task name).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from microformers import ConfigError

from ._common import check_text
from .base import Pipeline
from .plugin import TRANSLATION_TASK_PATTERN

logger = logging.getLogger("microformers.pipelines")

#: ``translation_en_to_de`` -> ("en", "de")
TRANSLATION_TASK = re.compile(TRANSLATION_TASK_PATTERN)

# Encoder-side keys kept from the tokenizer's output (``token_type_ids`` is no argument of generate).
_INPUT_KEYS = ("input_ids", "attention_mask")


def translation_languages(task: str) -> tuple[str, str] | None:
    """``("en", "de")`` for ``translation_en_to_de``; ``None`` for any other task name."""
    match = TRANSLATION_TASK.fullmatch(task or "")
    return (match["src"], match["tgt"]) if match else None


class Text2TextGenerationPipeline(Pipeline):
    """``pipe("question: ... context: ...")`` -> ``[{"generated_text": "..."}]`` with an encoder-decoder model.

    Options: ``return_tensors=True`` (``[{"generated_token_ids": tensor}]``), ``return_text``,
    ``clean_up_tokenization_spaces`` (default False, as the reference 4.x), ``skip_special_tokens`` (default
    True), ``truncation`` (passed to the tokenizer), ``stop_sequence`` (its first token ends generation),
    and any ``generate`` argument (``max_new_tokens``, ``num_beams``, ``num_return_sequences`` -> several
    records, ``do_sample`` ...). A list of inputs gives a list of results, ``batch_size`` of them padded and
    generated together.
    """

    #: ``generated_text`` / ``generated_token_ids``
    return_name = "generated"

    def __init__(self, model: Any, tokenizer: Any = None, **kwargs: Any) -> None:
        check_encoder_decoder(model, kwargs.get("task") or self.default_task())
        super().__init__(model, tokenizer, **kwargs)
        self.prefix, self.task_generate_kwargs = task_settings(self.model, self.task or self.default_task())

    @classmethod
    def default_task(cls) -> str:
        return "text2text-generation"

    # -- parameters --------------------------------------------------------------------------------
    def _sanitize_parameters(
        self,
        return_tensors: bool | None = None,
        return_text: bool | None = None,
        return_type: str | None = None,
        clean_up_tokenization_spaces: bool | None = None,
        skip_special_tokens: bool | None = None,
        truncation: Any = None,
        stop_sequence: str | None = None,
        prefix: str | None = None,
        **generate_kwargs: Any,
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        preprocess: dict[str, Any] = {}
        if truncation is not None:
            preprocess["truncation"] = truncation
        if prefix is not None:
            preprocess["prefix"] = prefix
        postprocess: dict[str, Any] = {}
        if return_tensors is not None and return_type is None:
            return_type = "tensors" if return_tensors else "text"
        elif return_text is not None and return_type is None:
            return_type = "text" if return_text else "tensors"
        if return_type is not None:
            return_type = str(getattr(return_type, "value", return_type)).lower()
            if return_type not in ("text", "tensors"):
                raise ConfigError(f"{self.task}: return_type={return_type!r}; use 'text' or 'tensors'")
            postprocess["return_type"] = return_type
        if clean_up_tokenization_spaces is not None:
            postprocess["clean_up_tokenization_spaces"] = clean_up_tokenization_spaces
        if skip_special_tokens is not None:
            postprocess["skip_special_tokens"] = skip_special_tokens
        if stop_sequence is not None:
            ids = self.tokenizer.encode(stop_sequence, add_special_tokens=False)
            if not ids:
                raise ConfigError(f"{self.task}: stop_sequence={stop_sequence!r} encodes to no token")
            if len(ids) > 1:
                logger.warning(
                    "stop_sequence %r is %d tokens; only its first token ends generation, as in the reference",
                    stop_sequence,
                    len(ids),
                )
            generate_kwargs["eos_token_id"] = ids[0]
        return preprocess, generate_kwargs, postprocess

    # -- running -----------------------------------------------------------------------------------
    def __call__(self, inputs: Any = None, *args: Any, **kwargs: Any) -> Any:
        """As the reference 4.x: a list of strings whose every result is one record gives a flat list of records."""
        result = super().__call__(inputs, *args, **kwargs)
        if (
            isinstance(inputs, list)
            and all(isinstance(item, str) for item in inputs)
            and isinstance(result, list)
            and all(isinstance(res, list) and len(res) == 1 for res in result)
        ):
            return [res[0] for res in result]
        return result

    def is_single_input(self, inputs: Any, preprocess_params: dict[str, Any]) -> bool:
        return isinstance(inputs, str) or super().is_single_input(inputs, preprocess_params)

    def tokenize(self, text: str, prefix: str, truncation: Any) -> Mapping[str, Any]:
        kwargs: dict[str, Any] = {"return_tensors": "pt"}
        if truncation is not None:
            kwargs["truncation"] = truncation
        return self.tokenizer(prefix + text, **kwargs)

    def preprocess(self, text: Any, truncation: Any = None, prefix: str | None = None) -> dict[str, Any]:
        check_text(text, self.task, "input")
        encoded = self.tokenize(text, self.prefix if prefix is None else prefix, truncation)
        return model_inputs(encoded)

    def padding_value(self, key: str) -> Any:
        if key == "input_ids" and getattr(self.tokenizer, "pad_token_id", None) is None:
            raise ConfigError(
                f"{self.task}: a batch of inputs needs padding but the tokenizer has no pad token; set "
                "tokenizer.pad_token or use batch_size=1"
            )
        return super().padding_value(key)

    def generate_kwargs(self, call_kwargs: dict[str, Any]) -> dict[str, Any]:
        """``task_specific_params`` settings of the task, overridden by the call's; the tokenizer's pad token
        when the model's generation config has none."""
        kwargs = {**self.task_generate_kwargs, **call_kwargs}
        generation_config = getattr(self.model, "generation_config", None)
        pad_id = getattr(self.tokenizer, "pad_token_id", None)
        if (
            "pad_token_id" not in kwargs
            and pad_id is not None
            and getattr(generation_config, "pad_token_id", None) is None
            and getattr(self.model.config, "pad_token_id", None) is None
        ):
            kwargs["pad_token_id"] = pad_id
        return kwargs

    def check_inputs(self, input_length: int, min_length: int, max_length: int) -> None:
        """Warn about lengths that make no sense for the task (summarization, translation)."""

    def _forward(self, inputs: dict[str, Any], **generate_kwargs: Any) -> dict[str, Any]:
        input_ids = inputs["input_ids"]
        batch, input_length = input_ids.shape
        extra = {key: _one(value) for key, value in inputs.items() if key not in _INPUT_KEYS}
        kwargs = self.generate_kwargs({**extra, **generate_kwargs})
        config = getattr(self.model, "generation_config", None)
        self.check_inputs(
            input_length,
            _setting(kwargs, config, "min_length", 0),
            _setting(kwargs, config, "max_length", 20),
        )
        output = self.model.generate(input_ids=input_ids, attention_mask=inputs.get("attention_mask"), **kwargs)
        sequences = output.sequences if hasattr(output, "sequences") else output
        sequences = sequences.reshape(batch, sequences.shape[0] // batch, *sequences.shape[1:])
        return {"output_ids": sequences}

    def postprocess(
        self,
        outputs: Mapping[str, Any],
        return_type: str = "text",
        clean_up_tokenization_spaces: bool = False,
        skip_special_tokens: bool = True,
    ) -> list[dict[str, Any]]:
        records = []
        for output_ids in outputs["output_ids"][0]:
            if return_type == "tensors":
                records.append({f"{self.return_name}_token_ids": output_ids})
            else:
                text = self.tokenizer.decode(
                    output_ids.tolist(),
                    skip_special_tokens=skip_special_tokens,
                    clean_up_tokenization_spaces=clean_up_tokenization_spaces,
                )
                records.append({f"{self.return_name}_text": text})
        return records


class SummarizationPipeline(Text2TextGenerationPipeline):
    """``summarizer(article, min_length=5, max_length=20)`` -> ``[{"summary_text": "..."}]``.

    Uses ``config.task_specific_params["summarization"]`` (T5's ``"summarize: "`` prefix, BART's beam
    settings) when the model has it. Warns, as the reference 4.x, when ``max_length`` is below
    ``min_length`` or not shorter than the input.
    """

    return_name = "summary"

    @classmethod
    def default_task(cls) -> str:
        return "summarization"

    def check_inputs(self, input_length: int, min_length: int, max_length: int) -> None:
        if max_length < min_length:
            logger.warning("summarization: min_length=%d is larger than max_length=%d", min_length, max_length)
        if input_length < max_length:
            logger.warning(
                "summarization: max_length is %d but the input is only %d tokens; a summary is usually shorter than "
                "its input, consider a smaller max_length, e.g. summarizer('...', max_length=%d)",
                max_length,
                input_length,
                input_length // 2,
            )


class TranslationPipeline(Text2TextGenerationPipeline):
    """``translator("How old are you?")`` -> ``[{"translation_text": "..."}]``.

    The languages come from ``src_lang=``/``tgt_lang=`` (at construction or call time) or from a
    ``translation_xx_to_yy`` task name. A tokenizer that builds translation inputs itself (mBART-style, with
    ``src_lang`` and the language-code token of ``tgt_lang`` forced as the first generated token) is used
    that way; otherwise the text gets the prefix of ``config.task_specific_params["translation_xx_to_yy"]``
    (T5's ``"translate English to German: "``) when the model has one.
    """

    return_name = "translation"

    @classmethod
    def default_task(cls) -> str:
        return "translation"

    def _sanitize_parameters(
        self, src_lang: str | None = None, tgt_lang: str | None = None, **kwargs: Any
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        preprocess, forward, postprocess = super()._sanitize_parameters(**kwargs)
        if src_lang is not None:
            preprocess["src_lang"] = src_lang
        if tgt_lang is not None:
            preprocess["tgt_lang"] = tgt_lang
        if src_lang is None and tgt_lang is None:
            languages = translation_languages(self.task)
            if languages is not None:
                preprocess["src_lang"], preprocess["tgt_lang"] = languages
        return preprocess, forward, postprocess

    def check_inputs(self, input_length: int, min_length: int, max_length: int) -> None:
        if input_length > 0.9 * max_length:
            logger.warning(
                "translation: the input is %d tokens and max_length is %d; the translation may be cut off, "
                "consider a larger max_length (translator('...', max_length=400))",
                input_length,
                max_length,
            )

    def preprocess(  # type: ignore[override]
        self,
        text: Any,
        truncation: Any = None,
        prefix: str | None = None,
        src_lang: str | None = None,
        tgt_lang: str | None = None,
    ) -> dict[str, Any]:
        check_text(text, self.task, "input")
        build = getattr(self.tokenizer, "_build_translation_inputs", None)
        if build is not None:
            extra = {"truncation": truncation} if truncation is not None else {}
            encoded = build(text, return_tensors="pt", src_lang=src_lang, tgt_lang=tgt_lang, **extra)
            inputs = model_inputs(encoded)
            if encoded.get("forced_bos_token_id") is not None:
                inputs["forced_bos_token_id"] = int(encoded["forced_bos_token_id"])
            return inputs
        pair_prefix, pair_generate = self._pair_settings(src_lang, tgt_lang)
        if prefix is None:
            prefix = pair_prefix if pair_prefix is not None else self.prefix
        inputs = model_inputs(self.tokenize(text, prefix, truncation))
        if pair_generate:  # the pair's generation settings travel with the item (lowest priority)
            inputs["task_generate_kwargs"] = pair_generate
        return inputs

    def _pair_settings(self, src_lang: str | None, tgt_lang: str | None) -> tuple[str | None, dict[str, Any]]:
        """The prefix and generation settings of ``translation_{src}_to_{tgt}`` when that is not already the task."""
        if src_lang is None or tgt_lang is None:
            return None, {}
        key = f"translation_{src_lang}_to_{tgt_lang}"
        if key == self.task:
            return None, {}
        params = getattr(self.model.config, "task_specific_params", None) or {}
        if key not in params:
            return None, {}
        prefix, generate = task_settings(self.model, key)
        return prefix, generate

    def generate_kwargs(self, call_kwargs: dict[str, Any]) -> dict[str, Any]:
        pair = call_kwargs.pop("task_generate_kwargs", None) or {}
        kwargs = super().generate_kwargs(call_kwargs)
        return {**pair, **kwargs} if pair else kwargs


# -- helpers -------------------------------------------------------------------------------------------
def check_encoder_decoder(model: Any, task: str) -> None:
    """Refuse a model that is not an encoder-decoder with ``generate`` (these tasks run its encoder once and
    decode from ``decoder_start_token_id``)."""
    config = getattr(model, "config", None)
    if getattr(config, "is_encoder_decoder", False) and callable(getattr(model, "generate", None)):
        return
    kind = getattr(config, "model_type", None) or type(model).__name__
    raise ConfigError(
        f"the '{task}' pipeline needs an encoder-decoder model (T5, BART, mBART, Marian ... loaded with "
        f"AutoModelForSeq2SeqLM); got {type(model).__name__} ({kind}), which is not one. For a decoder-only "
        "model use pipeline('text-generation', ...)"
    )


def task_settings(model: Any, task: str) -> tuple[str, dict[str, Any]]:
    """``(prefix, generate settings)`` of ``config.task_specific_params[task]``; the prefix falls back to
    ``config.prefix`` (as the reference 4.x pipelines set them up)."""
    config = getattr(model, "config", None)
    params = dict((getattr(config, "task_specific_params", None) or {}).get(task) or {})
    prefix = params.pop("prefix", None)
    if prefix is None:
        prefix = getattr(config, "prefix", None)
    return prefix or "", params


def model_inputs(encoded: Mapping[str, Any]) -> dict[str, Any]:
    return {key: encoded[key] for key in _INPUT_KEYS if key in encoded}


def _one(value: Any) -> Any:
    """A per-item value collated into a list for a batch: the batch's one value (they are equal by construction)."""
    if isinstance(value, list) and value:
        first = value[0]
        if any(item != first for item in value[1:]):
            raise ConfigError(f"items of one batch need the same generation settings; got {value!r}")
        return first
    return value


def _setting(kwargs: Mapping[str, Any], config: Any, name: str, default: int) -> int:
    value = kwargs.get(name)
    if value is None:
        value = getattr(config, name, None)
    return default if value is None else int(value)


__all__ = [
    "SummarizationPipeline",
    "Text2TextGenerationPipeline",
    "TranslationPipeline",
    "check_encoder_decoder",
    "task_settings",
    "translation_languages",
]
