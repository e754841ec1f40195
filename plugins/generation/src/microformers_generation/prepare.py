"""What every strategy does before its loop: settings, inputs, lengths, caches, processors and criteria.

The kernel's ``generate`` only merges the ``GenerationConfig`` with the call's keyword arguments and
selects a strategy; :func:`prepare` turns that into what a decoding loop needs. Third-party
strategies call it (or subclass :class:`microformers_generation.Strategy`, which does) to get the
same checks and defaults as the standard ones.

Fast decoding by default (:func:`default_decode_step`): a model whose decoder has a native static
step (a Llama-family model on the CPU, float32 or quantized by microformers-quant) decodes one token per row
through it into a preallocated ``StaticCache`` without being asked, where the call allows it:
one sequence per row (no beams), no assistant or prompt lookup, no attentions or hidden states,
no cache of the caller's, ``use_cache`` on. The caller's choice wins: ``cache_implementation="dynamic"``
or ``compile_config=False`` decode eagerly, ``compile_config=True``/a dict compiles as asked.
:func:`~microformers_generation.strategies.run_loop` installs the step for the call only.
"""

from __future__ import annotations

import inspect
import itertools
import logging
import os
from collections.abc import Iterable
from typing import Any

import attrs
import torch

from microformers import GenerationConfig, GenerationError

from . import defaults
from .base import LogitsProcessorList, StoppingCriteriaList
from .encoder_decoder import DecoderView, EncoderState, is_encoder_decoder, prepare_encoder_decoder

logger = logging.getLogger("microformers")

# Keyword arguments of generate() that are neither settings nor model inputs.
CALL_ARGUMENTS = (
    "tokenizer",
    "trust_remote_code",
    "custom_generate",
    "assistant_model",
    "assistant_tokenizer",
    "synced_gpus",
    "prefix_allowed_tokens_fn",
    "negative_prompt_ids",
    "negative_prompt_attention_mask",
)
# Methods not implemented here (most moved out of the reference's core): (setting, "off" value, method).
MOVED_OUT = (
    ("penalty_alpha", None, "contrastive search"),
    ("num_beam_groups", 1, "group (diverse) beam search"),
    ("diversity_penalty", 0.0, "group (diverse) beam search"),
    ("dola_layers", None, "DoLa decoding"),
    ("constraints", None, "constrained beam search"),
    ("force_words_ids", None, "constrained beam search"),
    ("top_h", None, "top-H sampling"),
)
# Model-input dtypes accepted as token ids (bool and 8-bit tensors are masks or bytes, not ids).
ID_DTYPES = (torch.int16, torch.int32, torch.int64, torch.uint16, torch.uint32, torch.uint64)


@attrs.define
class Prepared:
    """Everything a decoding loop needs; ``input_ids`` already expanded for beams / return sequences.

    For an encoder-decoder model, ``input_ids`` are the decoder's and ``model`` is the
    :class:`~microformers_generation.encoder_decoder.DecoderView` the loop calls (the model itself otherwise).
    """

    input_ids: torch.Tensor
    generation_config: GenerationConfig
    logits_processor: LogitsProcessorList
    stopping_criteria: StoppingCriteriaList
    streamer: Any
    model_kwargs: dict[str, Any]
    call_arguments: dict[str, Any]
    model: Any = None
    # the native decode step this call runs by default (installed around the loop), or None
    decode_step: Any = None


def prepare(
    model: Any,
    inputs: torch.Tensor | None,
    *,
    generation_config: GenerationConfig,
    logits_processor: Iterable[Any] | None = None,
    stopping_criteria: Iterable[Any] | None = None,
    streamer: Any = None,
    model_kwargs: dict[str, Any],
    builders: Any = None,
    fast_decoding: bool = False,
) -> Prepared:
    """Check and complete the settings and inputs of one ``generate`` call (see the module docstring).

    ``builders`` provides ``build_logits_processor`` / ``build_stopping_criteria`` (a strategy);
    without it, this plugin's defaults are used. ``fast_decoding``: the caller's loop runs through
    :func:`~microformers_generation.strategies.run_loop`, which installs :attr:`Prepared.decode_step`;
    only then does a call decode through the model's native step by default.
    """
    check_weights_loaded(model)
    model_kwargs = dict(model_kwargs)
    call_arguments = {k: model_kwargs.pop(k) for k in CALL_ARGUMENTS if k in model_kwargs}
    has_default_max_length = generation_config.max_length is None and generation_config.max_new_tokens is None
    config = generation_config.with_defaults()
    check_settings(config, model_kwargs)
    for name in ("assistant_tokenizer", "synced_gpus"):
        if call_arguments.get(name):
            raise GenerationError(
                f"generate(): {name}= is not supported here (one process; an assistant must share the model's vocabulary)"
            )
    check_streamer(streamer, config)
    check_model_kwargs(model, model_kwargs)

    encoder: EncoderState | None = None
    if is_encoder_decoder(model):
        device = _model_device(model)
        input_ids, model_kwargs, encoder = prepare_encoder_decoder(
            model, inputs, config, model_kwargs, lambda ids, name: checked_token_ids(model, ids, name), device
        )
        prompt_ids = encoder.input_ids
    else:
        input_ids, model_kwargs = prepare_inputs(model, inputs, config, model_kwargs)
        prompt_ids = input_ids
    expand = max(config.num_beams, config.num_return_sequences)
    check_rows_fit(model, config, input_ids.shape[0] * expand, input_ids.shape[1])
    if expand > 1:
        input_ids = input_ids.repeat_interleave(expand, dim=0)
        if model_kwargs.get("attention_mask") is not None:
            model_kwargs["attention_mask"] = model_kwargs["attention_mask"].repeat_interleave(expand, dim=0)
        if encoder is not None:
            encoder.repeat(expand)
    prepare_lengths(model, config, input_ids.shape[1], has_default_max_length)
    model_kwargs["use_cache"] = config.use_cache
    decode_step = None
    if fast_decoding and encoder is None and fast_decoding_applies(config, model_kwargs, call_arguments):
        decode_step = default_decode_step(model)
        if decode_step is not None and config.cache_implementation is None:
            model_kwargs["past_key_values"] = model.make_static_cache(config.max_length)
    prepare_static_decoding(model, config, model_kwargs)

    builders = builders if hasattr(builders, "build_logits_processor") else defaults
    processors = builders.build_logits_processor(
        model,
        config,
        input_ids_length=input_ids.shape[1],
        attention_mask=model_kwargs.get("attention_mask"),
        logits_processor=logits_processor,
        **_processor_arguments(prompt_ids, call_arguments),
    )
    criteria = builders.build_stopping_criteria(
        model, config, tokenizer=call_arguments.get("tokenizer"), stopping_criteria=stopping_criteria
    )
    if streamer is not None:
        streamer.put(input_ids.cpu())
    view = (
        model
        if encoder is None
        else DecoderView(model, encoder, config.output_attentions and config.return_dict_in_generate)
    )
    return Prepared(input_ids, config, processors, criteria, streamer, model_kwargs, call_arguments, view, decode_step)


def _processor_arguments(prompt_ids: torch.Tensor | None, call_arguments: dict[str, Any]) -> dict[str, Any]:
    """What the default processor builder takes beyond the config: only the values actually given."""
    names = ("prefix_allowed_tokens_fn", "negative_prompt_ids", "negative_prompt_attention_mask")
    given = {name: call_arguments[name] for name in names if call_arguments.get(name) is not None}
    return {"prompt_ids": prompt_ids, **given}


def check_settings(config: GenerationConfig, model_kwargs: dict[str, Any] | None = None) -> None:
    """Refuse settings no installed strategy honours, and combinations a strategy cannot satisfy."""
    for name, off, method in MOVED_OUT:
        value = (model_kwargs or {}).get(name, getattr(config, name, off))
        if value is not None and value != off:
            raise GenerationError(
                f"generate(): {name}={value!r} asks for {method}, which microformers-generation does not implement. "
                "Drop it, implement it as a strategy plugin, or pass custom_generate=<your decoding function or folder>"
            )
    num_beams, num_return = config.num_beams, config.num_return_sequences
    if num_return > 1 and num_beams == 1 and not config.do_sample:
        raise GenerationError(
            f"num_return_sequences={num_return} needs several candidates, but greedy decoding (do_sample=False, "
            f"num_beams=1) produces one; set do_sample=True or num_beams>={num_return}"
        )
    if num_beams > 1 and num_return > num_beams:
        raise GenerationError(
            f"num_return_sequences={num_return} is larger than num_beams={num_beams}: beam search can return at "
            f"most num_beams sequences; raise num_beams to at least {num_return}"
        )


def _memory_bytes(device: torch.device) -> int | None:
    """The memory of ``device`` (the machine's RAM for the CPU), or None where it cannot be read."""
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return None


# The most rows (batch x num_beams, or x num_return_sequences) one generate() call expands its inputs to: far above
# what beam search or best-of-n sampling use, and small enough that a typo (10**7 beams on a tiny model, whose
# memory would allow them) is refused at once instead of running for minutes.
MAX_EXPANDED_ROWS = 2**16


def check_rows_fit(model: Any, config: GenerationConfig, rows: int, prompt_length: int) -> None:
    """Refuse a batch x num_beams / num_return_sequences whose first step alone (the prompt's key/value cache and one
    step's scores for every row) could not fit the device's memory, before anything is expanded: a clear error
    instead of the allocator's. Later growth is not counted (``max_time`` or an end token may stop it).

    Then, whatever the memory: more beams than the vocabulary has tokens (the first step cannot fill them; the rest
    would only repeat impossible candidates), and more than ``MAX_EXPANDED_ROWS`` expanded rows, are refused."""
    model_config = getattr(model, "config", None)
    vocab = getattr(model_config, "vocab_size", None) or 0
    layers = getattr(model_config, "num_hidden_layers", None) or 0
    heads = getattr(model_config, "num_attention_heads", None) or 0
    kv_heads = getattr(model_config, "num_key_value_heads", None) or heads
    head_dim = getattr(model_config, "head_dim", None) or (
        (getattr(model_config, "hidden_size", 0) or 0) // heads if heads else 0
    )
    per_row = 4 * vocab * 2 + 2 * layers * kv_heads * head_dim * 4 * prompt_length  # float32 at most
    device = _model_device(model)
    available = _memory_bytes(device)
    if available is not None and rows * per_row > available:
        gib = 1024**3
        raise GenerationError(
            f"num_beams={config.num_beams} / num_return_sequences={config.num_return_sequences} over a batch makes "
            f"{rows} rows, whose first step alone (the prompt's key/value cache and the scores) needs about "
            f"{rows * per_row / gib:.1f} GiB, more than the {available / gib:.1f} GiB of {device}; lower num_beams, "
            "num_return_sequences or the batch"
        )
    if vocab and config.num_beams > vocab:
        raise GenerationError(
            f"num_beams={config.num_beams} is more than the model's vocabulary ({vocab} tokens): beam search keeps "
            f"the num_beams best continuations, and the first step has only {vocab}; use num_beams <= {vocab}"
        )
    expand = max(config.num_beams, config.num_return_sequences)
    if expand > 1 and rows > MAX_EXPANDED_ROWS:
        raise GenerationError(
            f"num_beams={config.num_beams} / num_return_sequences={config.num_return_sequences} over a batch of "
            f"{rows // expand} makes {rows:,} rows, more than the {MAX_EXPANDED_ROWS:,} one generate() call decodes "
            "together; lower them, or split the batch over several calls"
        )


def check_streamer(streamer: Any, config: GenerationConfig) -> None:
    if streamer is None:
        return
    if not (callable(getattr(streamer, "put", None)) and callable(getattr(streamer, "end", None))):
        raise GenerationError(
            f"streamer={type(streamer).__name__} object is not a streamer: it needs put(token_ids) and end() "
            "methods (use microformers.TextStreamer or TextIteratorStreamer)"
        )
    if config.num_beams > 1:
        raise GenerationError("streamer= works with one sequence per step; it cannot be used with num_beams > 1")


def check_model_kwargs(model: Any, model_kwargs: dict[str, Any]) -> None:
    """Every remaining keyword must be an input of the model's forward (a typo must not pass silently)."""
    try:
        parameters = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return
    accepted = {name for name, p in parameters.items() if p.kind is not inspect.Parameter.VAR_KEYWORD}
    accepted |= {"input_ids", "attention_mask", "past_key_values", "use_cache"}
    unused = [key for key, value in model_kwargs.items() if value is not None and key not in accepted]
    if unused:
        raise GenerationError(
            f"generate(): the following arguments are neither generation settings nor inputs of "
            f"{type(model).__name__}.forward: {unused} (check for typos, e.g. max_new_tokens)"
        )


def prepare_inputs(
    model: Any, inputs: torch.Tensor | None, config: GenerationConfig, model_kwargs: dict[str, Any]
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Checked ``(batch, length)`` token ids on the model's device, a pad token, and the padding mask."""
    input_ids = model_kwargs.pop("input_ids", None)
    if inputs is not None and input_ids is not None:
        raise GenerationError("generate() got both inputs and input_ids; pass one of them")
    input_ids = inputs if inputs is not None else input_ids
    if model_kwargs.get("inputs_embeds") is not None:
        raise GenerationError("generate(): inputs_embeds= is not supported; pass input_ids instead")
    device = _model_device(model)
    if input_ids is None:
        if config.bos_token_id is None:
            raise GenerationError(
                "generate() needs input_ids, or a bos_token_id (in generation_config.json or as an argument) "
                "to start from"
            )
        input_ids = torch.tensor([[config.bos_token_id]], dtype=torch.long, device=device)
    input_ids = checked_token_ids(model, input_ids, "input_ids")
    batch = input_ids.shape[0]
    eos = config.eos_token_ids

    pad = config.pad_token_id
    if pad is None and eos:
        pad = eos[0]
    if pad is None and batch > 1:
        raise GenerationError(
            f"generating for a batch of {batch} needs a pad token (to pad the inputs and fill rows that "
            "finish early), but neither pad_token_id nor eos_token_id is set; pass pad_token_id=... or set "
            "model.generation_config.pad_token_id"
        )
    config.pad_token_id = pad

    mask = model_kwargs.pop("attention_mask", None)
    if mask is not None:
        if not isinstance(mask, torch.Tensor) or tuple(mask.shape) != tuple(input_ids.shape):
            shape = tuple(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__
            raise GenerationError(
                f"attention_mask must be a tensor shaped like input_ids {tuple(input_ids.shape)}, got {shape}"
            )
        mask = mask.to(device)
        if batch > 1 and bool((mask[:, -1] == 0).any()):
            raise GenerationError(
                "the attention_mask shows right padding (a row ends in padding); decoder-only models generate "
                "after the last column, so pad on the left: tokenizer.padding_side = 'left'"
            )
    elif pad is not None and pad not in eos and bool((input_ids == pad).any()):
        mask = input_ids.ne(pad).long()
    if mask is not None and bool(mask.all()):
        mask = None
    model_kwargs["attention_mask"] = mask
    return input_ids, model_kwargs


def checked_token_ids(model: Any, ids: Any, name: str) -> torch.Tensor:
    """``ids`` as a ``(batch, length)`` long tensor on the model's device, within its vocabulary."""
    device = _model_device(model)
    if not isinstance(ids, torch.Tensor):
        raise GenerationError(f"{name} must be a torch tensor of token ids, got {type(ids).__name__}")
    if ids.dim() == 1:
        ids = ids.unsqueeze(0)
    if ids.dim() != 2 or ids.dtype not in ID_DTYPES:
        raise GenerationError(
            f"{name} must be integer token ids (int32/int64) of shape (batch, length), got "
            f"{tuple(ids.shape)} {ids.dtype}"
        )
    if ids.shape[0] == 0:
        raise GenerationError(f"{name} has a batch size of 0; pass at least one sequence")
    if ids.shape[1] == 0:
        raise GenerationError(f"{name} is empty; pass at least one token (e.g. the bos token)")
    vocab = _vocab_size(model)
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or (vocab is not None and high >= vocab):
        raise GenerationError(
            f"{name} holds token ids from {low} to {high}, outside the model's vocabulary of {vocab} ids; "
            "the tokenizer and the model do not match"
        )
    ids = ids.to(device=device, dtype=torch.long)
    return ids


def prepare_lengths(model: Any, config: GenerationConfig, input_length: int, has_default_max_length: bool) -> None:
    """Turn ``max_new_tokens`` (or the default 20 new tokens) into an absolute ``max_length``.

    A length beyond the model's context (``max_position_embeddings``) is clamped to it, with a warning:
    the model cannot attend further, and the buffers a loop sizes by ``max_length`` stay bounded.
    """
    limit = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    limit = limit if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 else None
    if config.max_new_tokens is not None:
        config.max_length = input_length + config.max_new_tokens
    elif has_default_max_length:
        config.max_length = input_length + config.max_length
        if limit is not None:
            config.max_length = min(config.max_length, limit)
    if config.max_length <= input_length:
        raise GenerationError(
            f"the input has {input_length} tokens but max_length={config.max_length} leaves no room to generate; "
            "set max_new_tokens=... (tokens to add) instead"
        )
    if limit is not None and config.max_length > limit:
        if input_length >= limit:
            raise GenerationError(
                f"the input has {input_length} tokens, as many as the model's context (max_position_embeddings="
                f"{limit}); shorten the input"
            )
        logger.warning(
            "generate(): max_length=%d is beyond the model's context (max_position_embeddings=%d); generating at "
            "most %d new tokens",
            config.max_length,
            limit,
            limit - input_length,
        )
        config.max_length = limit


def check_weights_loaded(model: Any) -> None:
    """Refuse a model whose weights are on the meta device (no values: never loaded, or moved there)."""
    if not callable(getattr(model, "parameters", None)):
        return  # not a torch module (an ONNX Runtime model holds its weights in its graph)
    buffers = model.buffers() if callable(getattr(model, "buffers", None)) else ()
    tensors = [*itertools.islice(model.parameters(), 1), *itertools.islice(buffers, 1)]
    offloaded = "disk" in (getattr(model, "hf_device_map", None) or {}).values()  # read in per forward
    if not offloaded and any(tensor.is_meta for tensor in tensors):
        raise GenerationError(
            f"generate(): the weights of {type(model).__name__} are on the meta device, which holds no values "
            "(a model built empty, or moved there with .to('meta')); load it with from_pretrained(...), on the "
            "CPU (quantized models decode fastest there) or a GPU"
        )


def fast_decoding_applies(
    config: GenerationConfig, model_kwargs: dict[str, Any], call_arguments: dict[str, Any]
) -> bool:
    """Whether this call may decode through the model's native static step without being asked (module docstring)."""
    return (
        bool(config.use_cache)
        and config.compile_config is None
        and config.cache_implementation in (None, "static")
        and model_kwargs.get("past_key_values") is None
        and (config.num_beams or 1) == 1
        and call_arguments.get("assistant_model") is None
        and config.prompt_lookup_num_tokens is None  # (0 still selects prompt lookup, which refuses it)
        and not config.output_attentions
        and not config.output_hidden_states
    )


def default_decode_step(model: Any) -> Any:
    """The model's native static step (:func:`microformers_sdk.decode_steps.default_decode_step`), or None."""
    if getattr(model, "decode_step_layout", None) is None:
        return None  # not a decoder built on the SDK's static steps
    from microformers_sdk.decode_steps import default_decode_step as native_step

    return native_step(model, float_layers=True)


def prepare_static_decoding(model: Any, config: GenerationConfig, model_kwargs: dict[str, Any]) -> None:
    """``cache_implementation="static"``: a preallocated cache; ``compile_config``: the compiled decode step."""
    if config.use_cache and config.cache_implementation == "static" and model_kwargs.get("past_key_values") is None:
        model_kwargs["past_key_values"] = model.make_static_cache(config.max_length)
    if config.compile_config:
        model.compile_decode_step(**(config.compile_config if isinstance(config.compile_config, dict) else {}))


def _model_device(model: Any) -> torch.device:
    device = getattr(model, "device", None)
    if isinstance(device, torch.device):
        return device
    for parameter in model.parameters():
        return parameter.device
    return torch.device("cpu")


def _vocab_size(model: Any) -> int | None:
    try:
        embeddings = model.get_input_embeddings()
    except (AttributeError, NotImplementedError):
        embeddings = None
    size = getattr(embeddings, "num_embeddings", None)
    if size is None:
        size = getattr(getattr(model, "config", None), "vocab_size", None)
    return size if isinstance(size, int) else None
