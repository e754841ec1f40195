"""Generation with encoder-decoder models (T5, BART, Marian, Whisper).

:func:`prepare_encoder_decoder` runs the encoder once per ``generate`` call (or takes the caller's
``encoder_outputs``), and starts the decoder from ``decoder_start_token_id`` (or the caller's
``decoder_input_ids``, with the start token put in front when they lack it). The decoding loops then
see a :class:`DecoderView`: the model presented as a decoder-only one, whose ``input_ids`` are the
decoder's tokens and whose every call carries the encoder's states and padding mask. So greedy,
sampling, beam search, assisted decoding and third-party strategies run unchanged; beams are rows
like any other, with the encoder states repeated per beam beforehand.
"""

from __future__ import annotations

from typing import Any

import attrs
import torch

from microformers import GenerationConfig, GenerationError
from microformers.outputs import ModelOutput

from .outputs import (
    GenerateBeamDecoderOnlyOutput,
    GenerateBeamEncoderDecoderOutput,
    GenerateEncoderDecoderOutput,
)


def is_encoder_decoder(model: Any) -> bool:
    return bool(getattr(getattr(model, "config", None), "is_encoder_decoder", False))


class DecoderStepOutput(ModelOutput):
    """One decoder call as the loops read it: ``attentions`` / ``hidden_states`` are the decoder's."""

    logits: Any
    past_key_values: Any
    attentions: Any
    hidden_states: Any
    cross_attentions: Any


@attrs.define
class EncoderState:
    """The encoder's side of one ``generate`` call, already repeated for beams / returned sequences."""

    outputs: Any
    attention_mask: torch.Tensor | None
    input_ids: torch.Tensor | None  # the prompt before repetition (for the encoder_* processors)
    encoder_inputs: dict[str, Any] | None = None  # what the encoder was called with (None: outputs were given)

    def repeat(self, times: int) -> None:
        if times == 1:
            return
        self.outputs = _repeat_output(self.outputs, times)
        if self.attention_mask is not None:
            self.attention_mask = self.attention_mask.repeat_interleave(times, dim=0)


class DecoderView:
    """``model`` as the decoding loops expect a causal LM: ``view(input_ids=decoder tokens, ...)``.

    ``attention_mask`` given to a call is the decoder's own (``decoder_attention_mask``); the
    encoder's padding mask and states go with every call. Position ids are not passed on: an
    encoder-decoder's decoder counts positions from its cache. Cross-attention weights of each call are
    kept in :attr:`cross_attentions` when asked for. Anything else is the model's own attribute.
    """

    def __init__(self, model: Any, encoder: EncoderState, keep_cross_attentions: bool = False) -> None:
        self.model = model
        self.encoder = encoder
        self.keep_cross_attentions = keep_cross_attentions
        self.cross_attentions: tuple[Any, ...] = ()

    def __call__(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        past_key_values: Any = None,
        use_cache: bool = True,
        return_dict: bool = True,
        **kwargs: Any,
    ) -> DecoderStepOutput:
        outputs = self.model(
            attention_mask=self.encoder.attention_mask,
            decoder_input_ids=input_ids,
            decoder_attention_mask=attention_mask,
            encoder_outputs=self.encoder.outputs,
            past_key_values=past_key_values,
            use_cache=use_cache,
            return_dict=True,
            **kwargs,
        )
        if self.keep_cross_attentions:
            self.cross_attentions += (outputs.cross_attentions,)
        return DecoderStepOutput(
            logits=outputs.logits,
            past_key_values=outputs.past_key_values,
            attentions=outputs.get("decoder_attentions"),
            hidden_states=outputs.get("decoder_hidden_states"),
            cross_attentions=outputs.get("cross_attentions"),
        )

    forward = __call__

    def cache_needs_recompute(self, past_length: int, total_length: int) -> bool:
        return False

    def reorder_cache(self, cache: Any, row_index: torch.Tensor) -> None:
        """Beam search moved rows: only the decoder's self-attention states follow them. Rows only ever
        move between beams of one input, which share the encoder's states (repeated per beam), so the
        cross-attention states are the same whichever way the rows go."""
        own = getattr(cache, "self_attention_cache", None)
        (own if own is not None else cache).reorder_cache(row_index)

    def for_assistant(self, assistant: Any) -> DecoderView:
        """The same view of an assistant encoder-decoder, its own encoder run on the same inputs."""
        if self.encoder.encoder_inputs is None:
            raise GenerationError(
                "an encoder-decoder assistant_model needs the encoder's inputs (input_ids=...), not encoder_outputs"
            )
        with torch.no_grad():
            outputs = assistant.get_encoder()(**self.encoder.encoder_inputs)
        return DecoderView(assistant, EncoderState(outputs, self.encoder.attention_mask, self.encoder.input_ids))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)


def prepare_encoder_decoder(
    model: Any,
    inputs: torch.Tensor | None,
    config: GenerationConfig,
    model_kwargs: dict[str, Any],
    checked_ids: Any,
    device: torch.device,
) -> tuple[torch.Tensor, dict[str, Any], EncoderState]:
    """Encode the prompt once; return the decoder's start ids, the remaining kwargs and the encoder's state.

    ``checked_ids(ids, what)`` validates token ids against the vocabulary (the decoder-only path's check).
    """
    main_input = getattr(model, "main_input_name", "input_ids")
    encoder_outputs = model_kwargs.pop("encoder_outputs", None)
    if model_kwargs.get("inputs_embeds") is not None:
        raise GenerationError("generate(): inputs_embeds= is not supported; pass input_ids or encoder_outputs instead")
    given = model_kwargs.pop(main_input, None)
    if main_input != "input_ids" and "input_ids" in model_kwargs and "decoder_input_ids" not in model_kwargs:
        # an encoder reading other inputs (audio features): input_ids= are the decoder's, as in the reference
        model_kwargs["decoder_input_ids"] = model_kwargs.pop("input_ids")
    if inputs is not None and given is not None:
        raise GenerationError(f"generate() got both inputs and {main_input}; pass one of them")
    encoder_input = inputs if inputs is not None else given
    mask = model_kwargs.pop("attention_mask", None)

    if encoder_outputs is not None:
        hidden = getattr(encoder_outputs, "last_hidden_state", None)
        if hidden is None and isinstance(encoder_outputs, (tuple, list)) and encoder_outputs:
            hidden = encoder_outputs[0]
        if not isinstance(hidden, torch.Tensor) or hidden.dim() != 3:
            raise GenerationError(
                "encoder_outputs must be the encoder's output (with a (batch, length, hidden) last_hidden_state)"
            )
        batch = hidden.shape[0]
        prompt = encoder_input if main_input == "input_ids" and isinstance(encoder_input, torch.Tensor) else None
    else:
        if encoder_input is None:
            raise GenerationError(
                f"generate() on an encoder-decoder model needs the encoder's input ({main_input}=...) or "
                "encoder_outputs=..."
            )
        if main_input == "input_ids":
            encoder_input = checked_ids(encoder_input, "input_ids")
            if mask is None and config.pad_token_id is not None and config.pad_token_id not in config.eos_token_ids:
                if bool((encoder_input == config.pad_token_id).any()):
                    mask = encoder_input.ne(config.pad_token_id).long()
        elif not isinstance(encoder_input, torch.Tensor):
            raise GenerationError(f"{main_input} must be a torch tensor, got {type(encoder_input).__name__}")
        else:
            encoder_input = encoder_input.to(device)
        batch = encoder_input.shape[0]
        prompt = encoder_input if main_input == "input_ids" else None
    if mask is not None:
        if not isinstance(mask, torch.Tensor) or mask.shape[0] != batch:
            shape = tuple(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__
            raise GenerationError(
                f"attention_mask must be a (batch={batch}, length) tensor for the encoder, got {shape}"
            )
        mask = mask.to(device)
        if prompt is not None and tuple(mask.shape) != tuple(prompt.shape):
            raise GenerationError(
                f"attention_mask must be shaped like input_ids {tuple(prompt.shape)}, got {tuple(mask.shape)}"
            )

    encoder_kwargs: dict[str, Any] | None = None
    if encoder_outputs is None:
        encoder_kwargs = {main_input: encoder_input, "return_dict": True}
        if mask is not None:
            encoder_kwargs["attention_mask"] = mask
        if config.output_attentions:
            encoder_kwargs["output_attentions"] = True
        if config.output_hidden_states:
            encoder_kwargs["output_hidden_states"] = True
        with torch.no_grad():
            encoder_outputs = model.get_encoder()(**encoder_kwargs)

    decoder_ids = _decoder_start(model, config, model_kwargs, batch, device, checked_ids)
    if config.pad_token_id is None:
        eos = config.eos_token_ids
        config.pad_token_id = eos[0] if eos else None
    decoder_mask = model_kwargs.pop("decoder_attention_mask", None)
    if decoder_mask is not None:
        if decoder_mask.shape[-1] == decoder_ids.shape[-1] - 1:  # the start token was put in front
            decoder_mask = torch.cat((decoder_mask.new_ones(batch, 1), decoder_mask), dim=-1)
        if tuple(decoder_mask.shape) != tuple(decoder_ids.shape):
            raise GenerationError(
                f"decoder_attention_mask must be shaped like decoder_input_ids {tuple(decoder_ids.shape)}, got "
                f"{tuple(decoder_mask.shape)}"
            )
        if bool(decoder_mask.all()):
            decoder_mask = None
    model_kwargs["attention_mask"] = decoder_mask
    return decoder_ids, model_kwargs, EncoderState(encoder_outputs, mask, prompt, encoder_kwargs)


def _decoder_start(
    model: Any, config: GenerationConfig, model_kwargs: dict[str, Any], batch: int, device: torch.device, checked: Any
) -> torch.Tensor:
    start = config.decoder_start_token_id
    if start is None:
        start = getattr(model.config, "decoder_start_token_id", None)
    if start is None:
        start = config.bos_token_id
    given = model_kwargs.pop("decoder_input_ids", None)
    if given is None and start is None:
        raise GenerationError(
            "generate() on an encoder-decoder model needs decoder_start_token_id (in generation_config.json, the "
            "model config, or as an argument) or decoder_input_ids to start the decoder from"
        )
    start_ids = torch.full((batch, 1), start if start is not None else 0, dtype=torch.long, device=device)
    if given is None:
        return start_ids
    given = checked(given, "decoder_input_ids")
    if given.shape[0] != batch:
        raise GenerationError(f"decoder_input_ids has a batch of {given.shape[0]}, the encoder input {batch}")
    is_whisper = getattr(model.config, "model_type", None) == "whisper"
    if start is not None and not is_whisper and bool((given[:, 0] != start).all()):
        given = torch.cat((start_ids, given), dim=-1)
    return given


def as_encoder_decoder_output(output: Any, view: DecoderView) -> Any:
    """A loop's decoder-only output as ``GenerateEncoderDecoderOutput`` / ``GenerateBeamEncoderDecoderOutput``."""
    if not isinstance(output, ModelOutput):
        return output
    encoder = view.encoder.outputs
    fields = dict(output)
    fields["decoder_attentions"] = fields.pop("attentions", None)
    fields["decoder_hidden_states"] = fields.pop("hidden_states", None)
    if fields["decoder_attentions"] is not None:
        fields["cross_attentions"] = view.cross_attentions
        fields["encoder_attentions"] = getattr(encoder, "attentions", None)
    if fields["decoder_hidden_states"] is not None:
        fields["encoder_hidden_states"] = getattr(encoder, "hidden_states", None)
    beam = isinstance(output, GenerateBeamDecoderOnlyOutput)
    return (GenerateBeamEncoderDecoderOutput if beam else GenerateEncoderDecoderOutput)(**fields)


def _repeat_output(outputs: Any, times: int) -> Any:
    def repeat(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value.repeat_interleave(times, dim=0)
        if isinstance(value, tuple):
            return tuple(repeat(v) for v in value)
        return value

    if isinstance(outputs, ModelOutput):
        return type(outputs)(**{key: repeat(value) for key, value in outputs.items()})
    if isinstance(outputs, (tuple, list)):
        return tuple(repeat(v) for v in outputs)
    raise GenerationError(f"encoder_outputs of type {type(outputs).__name__} cannot be repeated for beams")
