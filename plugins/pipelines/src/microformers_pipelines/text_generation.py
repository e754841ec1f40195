"""``text-generation``: continue prompts, or answer chats through the tokenizer's chat template."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from microformers import ConfigError

from ._common import check_text
from .base import Pipeline

TASK = "text-generation"
# Applied unless the call or the model's generation_config sets them (as the reference pipeline does);
# the sampling ones only when sampling.
GENERATION_DEFAULTS: dict[str, Any] = {"max_new_tokens": 256, "do_sample": True, "temperature": 0.7}
_SAMPLING_ONLY = frozenset({"temperature", "top_k", "top_p", "min_p", "typical_p"})


def is_chat(value: Any) -> bool:
    """A conversation: a list of ``{"role": ..., "content": ...}`` messages."""
    return (
        isinstance(value, (list, tuple))
        and len(value) > 0
        and all(isinstance(message, Mapping) and "role" in message for message in value)
    )


class TextGenerationPipeline(Pipeline):
    """``pipe("Once upon a time", max_new_tokens=20)`` -> ``[{"generated_text": "Once upon a time..."}]``.

    A chat (list of messages) is formatted with the chat template and answered with an assistant message:
    ``[{"generated_text": [*messages, {"role": "assistant", "content": ...}]}]``. ``return_full_text=False``
    returns only the new text; ``return_tensors=True`` the token ids. Any other keyword is passed to
    ``model.generate`` (``do_sample``, ``num_return_sequences``, ``temperature``, ...). Lists are one result
    list per prompt; ``batch_size`` prompts are left-padded and generated together.
    """

    padding_side = "left"

    def is_single_input(self, inputs: Any, preprocess_params: dict[str, Any]) -> bool:
        return isinstance(inputs, str) or is_chat(inputs) or super().is_single_input(inputs, preprocess_params)

    def _sanitize_parameters(
        self,
        return_full_text: bool | None = None,
        return_tensors: bool | None = None,
        return_text: bool | None = None,
        clean_up_tokenization_spaces: bool | None = None,
        prefix: str | None = None,
        continue_final_message: bool | None = None,
        skip_special_tokens: bool | None = None,
        add_special_tokens: bool | None = None,
        tokenizer_encode_kwargs: dict[str, Any] | None = None,
        stop_sequence: str | list[str] | None = None,
        **generate_kwargs: Any,
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        preprocess: dict[str, Any] = {}
        if prefix is not None:
            preprocess["prefix"] = prefix
        if add_special_tokens is not None:
            preprocess["add_special_tokens"] = add_special_tokens
        if continue_final_message is not None:
            preprocess["continue_final_message"] = continue_final_message
        if tokenizer_encode_kwargs:
            preprocess["tokenizer_encode_kwargs"] = tokenizer_encode_kwargs
        if stop_sequence is not None:
            generate_kwargs["stop_strings"] = [stop_sequence] if isinstance(stop_sequence, str) else stop_sequence
            generate_kwargs["tokenizer"] = self.tokenizer
        postprocess: dict[str, Any] = {}
        if return_tensors and (return_full_text is not None or return_text):
            raise ConfigError(f"{TASK}: return_tensors=True cannot be combined with return_full_text/return_text")
        if return_tensors:
            postprocess["return_type"] = "tensors"
        elif return_full_text is not None:
            postprocess["return_type"] = "full" if return_full_text else "new"
        for name, value in (
            ("clean_up_tokenization_spaces", clean_up_tokenization_spaces),
            ("continue_final_message", continue_final_message),
            ("skip_special_tokens", skip_special_tokens),
        ):
            if value is not None:
                postprocess[name] = value
        return preprocess, generate_kwargs, postprocess

    def preprocess(
        self,
        prompt: Any,
        prefix: str = "",
        add_special_tokens: bool | None = None,
        continue_final_message: bool | None = None,
        tokenizer_encode_kwargs: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        encode_kwargs = dict(tokenizer_encode_kwargs or {})
        if is_chat(prompt):
            messages = [dict(message) for message in prompt]
            for message in messages:
                if not isinstance(message.get("content"), (str, list)):
                    raise ConfigError(f"{TASK}: every chat message needs a 'content'; got {message!r}")
            if continue_final_message is None:
                continue_final_message = messages[-1]["role"] == "assistant"
            if not getattr(self.tokenizer, "chat_template", None):
                raise ConfigError(
                    f"{TASK}: a chat was given but the tokenizer has no chat template; pass a plain string "
                    "prompt, or set tokenizer.chat_template"
                )
            encoded = self.tokenizer.apply_chat_template(
                messages,
                add_generation_prompt=not continue_final_message,
                continue_final_message=continue_final_message,
                return_dict=True,
                return_tensors="pt",
                **encode_kwargs,
            )
            prompt_value: Any = messages
        else:
            check_text(prompt, TASK, "prompt")
            if add_special_tokens is not None:
                encode_kwargs["add_special_tokens"] = add_special_tokens
            encoded = self.tokenizer(prefix + prompt, return_tensors="pt", **encode_kwargs)
            prompt_value = prompt
        inputs = {key: encoded[key] for key in ("input_ids", "attention_mask") if key in encoded}
        inputs["prompt_text"] = prompt_value
        return inputs

    def generate_kwargs(self, call_kwargs: dict[str, Any]) -> dict[str, Any]:
        """The call's generation arguments plus the pipeline defaults nobody set."""
        model_config = getattr(self.model, "generation_config", None)
        already = {**(model_config.to_dict() if model_config is not None else {}), **call_kwargs}
        added = {
            key: value
            for key, value in GENERATION_DEFAULTS.items()
            if key not in already and not (key == "max_new_tokens" and "max_length" in already)
        }
        if not {**already, **added}.get("do_sample"):
            added = {key: value for key, value in added.items() if key not in _SAMPLING_ONLY}
        pad_id = getattr(self.tokenizer, "pad_token_id", None)
        if pad_id is not None and "pad_token_id" not in call_kwargs:
            added["pad_token_id"] = pad_id
        return {**call_kwargs, **added}

    def padding_value(self, key: str) -> Any:
        if key == "input_ids" and getattr(self.tokenizer, "pad_token_id", None) is None:
            eos = getattr(self.tokenizer, "eos_token_id", None)
            if eos is not None:
                return eos
        return super().padding_value(key)

    def _forward(self, inputs: dict[str, Any], **generate_kwargs: Any) -> dict[str, Any]:
        input_ids = inputs["input_ids"]
        batch = input_ids.shape[0]
        output = self.model.generate(
            input_ids=input_ids, attention_mask=inputs.get("attention_mask"), **self.generate_kwargs(generate_kwargs)
        )
        sequences = output.sequences if hasattr(output, "sequences") else output
        sequences = sequences.reshape(batch, sequences.shape[0] // batch, *sequences.shape[1:])
        return {"generated_sequence": sequences, "input_ids": input_ids, "prompt_text": inputs["prompt_text"]}

    def postprocess(
        self,
        outputs: dict[str, Any],
        return_type: str = "full",
        clean_up_tokenization_spaces: bool | None = None,
        continue_final_message: bool | None = None,
        skip_special_tokens: bool = True,
    ) -> list[dict[str, Any]]:
        prompt = outputs["prompt_text"]
        prompt_length = outputs["input_ids"].shape[-1]
        records = []
        for sequence in outputs["generated_sequence"][0].tolist():
            if return_type == "tensors":
                records.append({"generated_token_ids": sequence})
                continue
            decode_kwargs: dict[str, Any] = {"skip_special_tokens": skip_special_tokens}
            if clean_up_tokenization_spaces is not None:
                decode_kwargs["clean_up_tokenization_spaces"] = clean_up_tokenization_spaces
            text: Any = self.tokenizer.decode(sequence[prompt_length:], **decode_kwargs)
            if return_type == "full":
                text = _full_text(prompt, text, continue_final_message)
            records.append({"generated_text": text})
        return records


def _full_text(prompt: Any, new_text: str, continue_final_message: bool | None) -> Any:
    if isinstance(prompt, str):
        return prompt + new_text
    messages = [dict(message) for message in prompt]
    if continue_final_message is None:
        continue_final_message = messages[-1]["role"] == "assistant"
    if continue_final_message:
        messages[-1] = {"role": messages[-1]["role"], "content": messages[-1]["content"] + new_text}
        return messages
    return [*messages, {"role": "assistant", "content": new_text}]


__all__ = ["TextGenerationPipeline", "is_chat"]
