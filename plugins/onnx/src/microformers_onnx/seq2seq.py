"""The graphs of an encoder-decoder model: ``text2text-generation`` (T5, BART, mBART, Marian) and
``automatic-speech-recognition`` of a speech encoder-decoder (Whisper).

Three files, named as ONNX Runtime users know them from the reference ecosystem:

- ``encoder_model.onnx``: ``input_ids``, ``attention_mask`` -> ``last_hidden_state`` (Whisper:
  ``input_features`` -> ``last_hidden_state``);
- ``decoder_model.onnx`` (the first decoding step): ``input_ids`` (the decoder's tokens),
  ``encoder_attention_mask``, ``encoder_hidden_states`` -> ``logits``, ``present.N.decoder.key/value`` (the
  decoder's self-attention states) and ``present.N.encoder.key/value`` (the cross-attention states, computed
  once from the encoder output);
- ``decoder_with_past_model.onnx`` (every later step): ``input_ids``, ``encoder_attention_mask``,
  ``past_key_values.N.decoder.key/value`` and ``past_key_values.N.encoder.key/value`` -> ``logits`` and
  ``present.N.decoder.key/value`` (the cross-attention states do not change, so they are not returned).

Whisper attends to every encoder frame (its model takes no encoder mask), so its decoder graphs have no
``encoder_attention_mask`` input; its encoder reads a fixed number of frames (``2 * max_source_positions``).

Each wraps the model's own forward (``encoder_outputs=`` given, an ``EncoderDecoderCache`` whose two sides
are :class:`~microformers_onnx.export.GraphCache`), so the heads' details (T5's output scaling, BART's
``final_logits_bias``) are the model's. The decoder attends causally over its own tokens and is given no
padding mask of its own: every row of a generated batch holds a token at every step.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from microformers_sdk.seq2seq import EncoderDecoderCache

from .encoders import EncoderGraph
from .export import Case, ExportGraph, GraphCache, OnnxExportError

ENCODER_FILE = "encoder_model.onnx"
DECODER_FILE = "decoder_model.onnx"
DECODER_WITH_PAST_FILE = "decoder_with_past_model.onnx"
SIDES = ("decoder", "encoder")


def _device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def _dtype(model: nn.Module) -> torch.dtype:
    return next(model.parameters()).dtype


def _padded_mask(batch: int, length: int) -> torch.Tensor:
    """All ones, except the last two positions of row 0 (padding on the right, as a tokenizer pads)."""
    mask = torch.ones(batch, length, dtype=torch.long)
    if length > 2:
        mask[0, -2:] = 0
    return mask


class Seq2SeqEncoderGraph(ExportGraph):
    """``encoder_model.onnx``: the encoder stack over token ids and their padding mask."""

    file_name = ENCODER_FILE

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.encoder = model.get_encoder()
        self.input_names = ("input_ids", "attention_mask")
        self.output_names = ("last_hidden_state",)
        self.export_case = Case(2, 5)
        self.validation_cases = (Case(3, 7), Case(1, 2))

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        input_ids, attention_mask = inputs
        return (self.encoder(input_ids=input_ids, attention_mask=attention_mask, return_dict=True).last_hidden_state,)

    def sample(self, case: Case, seed: int = 0) -> tuple[torch.Tensor, ...]:
        generator = torch.Generator().manual_seed(seed)
        config = self.model.config
        ids = torch.randint(0, config.vocab_size, (case.batch, case.length), generator=generator)
        mask = _padded_mask(case.batch, case.length)
        pad = getattr(config, "pad_token_id", None)
        if isinstance(pad, int) and 0 <= pad < config.vocab_size:
            ids = ids.masked_fill(mask == 0, pad)
        device = _device(self.model)
        return ids.to(device), mask.to(device)

    def reference(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        input_ids, attention_mask = inputs
        return [self.encoder(input_ids=input_ids, attention_mask=attention_mask, return_dict=True).last_hidden_state]

    def axes(self) -> dict[str, dict[int, str]]:
        return {name: {0: "batch_size", 1: "encoder_sequence_length"} for name in self.input_names}


class Seq2SeqDecoderGraph(ExportGraph):
    """``decoder_model.onnx`` (``with_past=False``) or ``decoder_with_past_model.onnx``: one decoding call."""

    def __init__(
        self,
        model: nn.Module,
        with_past: bool,
        dims: Sequence[tuple[int, int, int, int]],
        encoder_mask: bool = True,
    ) -> None:
        super().__init__()
        self.model = model
        self.with_past = with_past
        self.encoder_mask = encoder_mask  # False for Whisper: every encoder frame is attended to
        self.dims = tuple(dims)  # per layer: self-attention (heads, head_dim), cross-attention (heads, head_dim)
        self.num_layers = len(self.dims)
        self.file_name = DECODER_WITH_PAST_FILE if with_past else DECODER_FILE
        self.hidden_size = int(model.config.d_model)
        self.decoder_vocab_size = int(model.get_decoder().get_input_embeddings().num_embeddings)
        names = ["input_ids", "encoder_attention_mask"] if encoder_mask else ["input_ids"]
        if with_past:
            names += [f"past_key_values.{i}.{side}.{kind}" for i in range(self.num_layers) for side in SIDES
                      for kind in ("key", "value")]  # fmt: skip
        else:
            names.append("encoder_hidden_states")
        self.input_names = tuple(names)
        present_sides = ("decoder",) if with_past else SIDES
        presents = [f"present.{i}.{side}.{kind}" for i in range(self.num_layers) for side in present_sides
                    for kind in ("key", "value")]  # fmt: skip
        self.output_names = ("logits", *presents)
        if with_past:
            self.export_case = Case(2, 3, past=4, source=5)
            self.validation_cases = (Case(3, 1, past=5, source=6), Case(1, 2, past=3, source=4), Case(1, 1, 1, 3))
        else:
            self.export_case = Case(2, 3, source=5)
            self.validation_cases = (Case(3, 1, source=6), Case(1, 4, source=3))

    # -- the graph ------------------------------------------------------------------------------------
    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        named = dict(zip(self.input_names, inputs))
        input_ids = named["input_ids"]
        encoder_mask = named.get("encoder_attention_mask")
        own = GraphCache()
        cross = GraphCache()
        cache = EncoderDecoderCache(own, cross)
        if self.with_past:
            for i in range(self.num_layers):
                own.update(named[f"past_key_values.{i}.decoder.key"], named[f"past_key_values.{i}.decoder.value"], i)
                cross.update(named[f"past_key_values.{i}.encoder.key"], named[f"past_key_values.{i}.encoder.value"], i)
                cache.is_updated[i] = True  # the cross-attention states are given: the encoder output is not read
            hidden = self._unread_encoder_output(named)
        else:
            hidden = named["encoder_hidden_states"]
        past = own.get_seq_length() if self.with_past else 0
        total = past + input_ids.shape[1]
        keys = torch.arange(total, device=input_ids.device)
        queries = torch.arange(past, total, device=input_ids.device)[:, None]
        causal = (keys <= queries)[None, None]  # (1, 1, new, past + new): ready-made, no branch on sizes
        outputs = self.model(
            **self._encoder_mask(encoder_mask), decoder_input_ids=input_ids, decoder_attention_mask=causal,
            encoder_outputs=(hidden,), past_key_values=cache, use_cache=True, return_dict=True,
        )  # fmt: skip
        result = [outputs.logits]
        for i in range(self.num_layers):
            result += [own._keys[i], own._values[i]]
            if not self.with_past:
                result += [cross._keys[i], cross._values[i]]
        return tuple(result)

    def _encoder_mask(self, mask: torch.Tensor | None) -> dict[str, torch.Tensor]:
        return {"attention_mask": mask} if self.encoder_mask else {}

    def _unread_encoder_output(self, named: dict[str, torch.Tensor]) -> torch.Tensor:
        """Zeros shaped like the encoder output, for a with-past step: the cross-attention states are given, so
        the model reads only the shape (batch and encoder length: those of the past cross-attention keys)."""
        keys = named["past_key_values.0.encoder.key"]
        return torch.zeros(keys.shape[0], keys.shape[2], self.hidden_size, dtype=_dtype(self.model), device=keys.device)

    # -- samples and the model's own answer ---------------------------------------------------------------
    def sample(self, case: Case, seed: int = 0) -> tuple[torch.Tensor, ...]:
        generator = torch.Generator().manual_seed(seed)
        device, dtype = _device(self.model), _dtype(self.model)
        values: dict[str, torch.Tensor] = {
            "input_ids": torch.randint(0, self.decoder_vocab_size, (case.batch, case.length), generator=generator),
            "encoder_attention_mask": _padded_mask(case.batch, case.source),
            "encoder_hidden_states": torch.randn(case.batch, case.source, self.hidden_size, generator=generator),
        }
        for i, (heads, head_dim, cross_heads, cross_dim) in enumerate(self.dims):
            for kind in ("key", "value"):
                values[f"past_key_values.{i}.decoder.{kind}"] = torch.randn(
                    case.batch, heads, case.past, head_dim, generator=generator
                )
                values[f"past_key_values.{i}.encoder.{kind}"] = torch.randn(
                    case.batch, cross_heads, case.source, cross_dim, generator=generator
                )
        return tuple(
            values[name].to(device=device, dtype=dtype if values[name].is_floating_point() else None)
            for name in self.input_names
        )

    def reference(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """The model's eager forward: its own masks (no decoder mask given) and its own cache."""
        named = dict(zip(self.input_names, inputs))
        cache = None
        if self.with_past:
            cache = EncoderDecoderCache.from_legacy_cache([
                tuple(named[f"past_key_values.{i}.{side}.{kind}"] for side in SIDES for kind in ("key", "value"))
                for i in range(self.num_layers)
            ])  # fmt: skip
            hidden = self._unread_encoder_output(named)
        else:
            hidden = named["encoder_hidden_states"]
        outputs = self.model(
            **self._encoder_mask(named.get("encoder_attention_mask")), decoder_input_ids=named["input_ids"],
            encoder_outputs=(hidden,), past_key_values=cache, use_cache=True, return_dict=True,
        )  # fmt: skip
        result = [outputs.logits]
        for self_keys, self_values, cross_keys, cross_values in outputs.past_key_values:
            result += [self_keys, self_values]
            if not self.with_past:
                result += [cross_keys, cross_values]
        return result

    def axes(self) -> dict[str, dict[int, str]]:
        axes: dict[str, dict[int, str]] = {
            "input_ids": {0: "batch_size", 1: "decoder_sequence_length"},
            "encoder_attention_mask": {0: "batch_size", 1: "encoder_sequence_length"},
            "encoder_hidden_states": {0: "batch_size", 1: "encoder_sequence_length"},
        }
        for i in range(self.num_layers):
            for kind in ("key", "value"):
                axes[f"past_key_values.{i}.decoder.{kind}"] = {0: "batch_size", 2: "past_decoder_sequence_length"}
                axes[f"past_key_values.{i}.encoder.{kind}"] = {0: "batch_size", 2: "encoder_sequence_length"}
        return {name: axes[name] for name in self.input_names}


def cache_dims(model: nn.Module) -> list[tuple[int, int, int, int]]:
    """Each decoder layer's self-attention and cross-attention ``(heads, head_dim)``, read from one cached step."""
    device = _device(model)
    hidden = torch.zeros(1, 2, int(model.config.d_model), dtype=_dtype(model), device=device)  # any encoder output
    start = torch.zeros(1, 1, dtype=torch.long, device=device)
    outputs = model(encoder_outputs=(hidden,), decoder_input_ids=start, use_cache=True, return_dict=True)
    cache = getattr(outputs, "past_key_values", None)
    if not isinstance(cache, EncoderDecoderCache) or len(cache) == 0:
        raise OnnxExportError(
            f"{type(model).__name__} returns no encoder-decoder key/value cache (EncoderDecoderCache); its decoder "
            "cannot be exported with past key/values"
        )
    return [(sk.shape[1], sk.shape[3], ck.shape[1], ck.shape[3]) for sk, _, ck, _ in cache]


def seq2seq_graphs(model: nn.Module) -> list[ExportGraph]:
    """The encoder graph and both decoder graphs of ``model``: an ``AutoModelForSeq2SeqLM`` on token ids, or an
    ``AutoModelForSpeechSeq2Seq`` on log-mel features (Whisper: ``input_features``, no encoder mask)."""
    main_input = getattr(model, "main_input_name", "input_ids")
    if main_input not in ("input_ids", "input_features"):
        raise OnnxExportError(
            f"{type(model).__name__}'s encoder reads {main_input!r}; encoder-decoder graphs are exported for encoders "
            "of token ids (T5, BART, mBART, Marian) or of log-mel input_features (Whisper)"
        )
    for needed in ("get_encoder", "get_decoder"):
        if not hasattr(model, needed):
            raise OnnxExportError(
                f"{type(model).__name__} has no {needed}(); load it with AutoModelForSeq2SeqLM (token ids) or "
                "AutoModelForSpeechSeq2Seq (audio features)"
            )
    if not hasattr(model.config, "d_model"):
        raise OnnxExportError(f"{type(model).__name__}'s config has no d_model (the encoder output's width)")
    dims = cache_dims(model)
    if main_input == "input_features":
        encoder = EncoderGraph(model.get_encoder(), "input_features", ("last_hidden_state",))
        encoder.file_name = ENCODER_FILE
        decoders = [Seq2SeqDecoderGraph(model, past, dims, encoder_mask=False) for past in (False, True)]
        return [encoder, *decoders]
    return [Seq2SeqEncoderGraph(model), Seq2SeqDecoderGraph(model, False, dims), Seq2SeqDecoderGraph(model, True, dims)]
