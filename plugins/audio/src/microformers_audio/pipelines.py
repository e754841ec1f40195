"""The ``automatic-speech-recognition`` (CTC) and ``audio-classification`` pipelines.

Inputs (see :mod:`microformers_audio.audio_io`): a file path or bytes, a 1-D array at the model's
rate, or ``{"array"/"raw": samples, "sampling_rate": rate}`` (resampled with soxr when it differs).

Speech recognition runs CTC models (``AutoModelForCTC``): logits -> argmax ids -> the tokenizer's
CTC decoding; and encoder-decoder speech models (``AutoModelForSpeechSeq2Seq``, Whisper): features ->
``model.generate(**generate_kwargs)`` -> ``tokenizer.decode(skip_special_tokens=True)``; for Whisper
``return_timestamps=True`` gives segment ``chunks``, ``"word"`` word chunks (token times from the model's
alignment heads) and ``return_language=True`` each chunk's language, built by the tokenizer's ``decode_asr``. ``chunk_length_s`` cuts long audio into overlapping windows (``stride_length_s`` of
context on each side, default ``chunk_length_s / 6``) whose predictions for the context frames are
dropped before the pieces are joined, so the text equals one pass wherever the model would have
seen enough context (encoder-decoder windows are joined where their token sequences overlap best, as the
reference does). For CTC models ``return_timestamps="char"`` or ``"word"`` adds ``chunks`` with
``(start, end)`` times in seconds. Results equal the reference pipeline's.
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from typing import Any

import numpy as np
import torch

from microformers import ChunkPipeline, Pipeline
from microformers.devices import available_memory
from microformers.errors import ConfigError

from .audio_io import AudioInputError, load_audio

__all__ = ["AudioClassificationPipeline", "AutomaticSpeechRecognitionPipeline"]

# Refuse a single pass whose activations would need more than this share of the available memory.
_MEMORY_SHARE = 0.5


def _resolve_feature_extractor(feature_extractor: Any, model: Any) -> Any:
    from microformers.auto import AutoFeatureExtractor

    if feature_extractor is None:
        source = getattr(model, "name_or_path", None) or getattr(getattr(model, "config", None), "name_or_path", "")
        if not source:
            raise ConfigError(
                "this audio pipeline needs a feature extractor: pass feature_extractor=... (an object or a folder), "
                "or a model loaded from a folder that has preprocessor_config.json / processor_config.json"
            )
        feature_extractor = source
    if isinstance(feature_extractor, (str, os.PathLike)):
        feature_extractor = AutoFeatureExtractor.from_pretrained(str(feature_extractor))
    if not hasattr(feature_extractor, "sampling_rate"):
        raise ConfigError(
            f"feature_extractor={feature_extractor!r} has no sampling_rate; pass an audio feature extractor"
        )
    return feature_extractor


def _is_single_audio(inputs: Any) -> bool:
    """One waveform (an array/tensor, dict, path, bytes) rather than a list or stream of them.

    An array of 3 or more dimensions counts as one input so that loading it refuses its shape, rather than being
    iterated as a stream of inputs."""
    if isinstance(inputs, (str, bytes, bytearray, dict, os.PathLike, np.ndarray, torch.Tensor)):
        return True
    if isinstance(inputs, (list, tuple)):
        return bool(inputs) and isinstance(inputs[0], (int, float, np.floating))
    return False


def _seconds(value: Any) -> bool:
    """A duration in seconds: a finite number >= 0 (NaN or infinity cannot be turned into a sample count)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def _float_dtype(model: Any) -> torch.dtype | None:
    dtype = getattr(model, "dtype", None)
    return dtype if isinstance(dtype, torch.dtype) and dtype.is_floating_point else None


class AutomaticSpeechRecognitionPipeline(ChunkPipeline):
    """``pipeline("automatic-speech-recognition", model=folder)(audio)`` -> ``{"text": ...}``."""

    needs_tokenizer = True
    padding_side = "right"

    def __init__(self, model: Any, tokenizer: Any = None, feature_extractor: Any = None, **kwargs: Any) -> None:
        self.feature_extractor = _resolve_feature_extractor(feature_extractor, model)
        if kwargs.pop("decoder", None) is not None:
            raise ConfigError("decoder=... (language-model CTC decoding with pyctcdecode) is not supported")
        self.is_seq2seq = bool(getattr(getattr(model, "config", None), "is_encoder_decoder", False))
        super().__init__(model, tokenizer, **kwargs)
        self.is_seq2seq = bool(getattr(self.model.config, "is_encoder_decoder", False))
        if self.is_seq2seq:
            if not hasattr(self.model, "generate") or not hasattr(self.tokenizer, "decode"):
                raise ConfigError(
                    f"{type(self.model).__name__} is an encoder-decoder model; speech recognition with it needs "
                    "model.generate and a tokenizer with decode"
                )
        elif not hasattr(self.tokenizer, "decode") or not hasattr(self.tokenizer, "_get_word_offsets"):
            raise ConfigError(
                f"the automatic-speech-recognition pipeline decodes CTC output and needs a CTC tokenizer "
                f"(Wav2Vec2CTCTokenizer); got {type(self.tokenizer).__name__}"
            )

    def is_single_input(self, inputs: Any, preprocess_params: dict[str, Any]) -> bool:
        return _is_single_audio(inputs)

    @property
    def _align_to(self) -> int:
        """Audio samples per output frame."""
        return int(getattr(self.model.config, "inputs_to_logits_ratio", 1))

    def _sanitize_parameters(
        self,
        chunk_length_s: float | None = None,
        stride_length_s: float | tuple[float, float] | list[float] | None = None,
        return_timestamps: str | bool | None = None,
        generate_kwargs: dict[str, Any] | None = None,
        max_new_tokens: int | None = None,
        return_language: bool | None = None,
        **kwargs: Any,
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        if kwargs:
            raise ConfigError(
                f"the automatic-speech-recognition pipeline does not take {', '.join(sorted(kwargs))} "
                "(it takes chunk_length_s, stride_length_s, return_timestamps, return_language, generate_kwargs, "
                "max_new_tokens, batch_size)"
            )
        pre: dict[str, Any] = {}
        post: dict[str, Any] = {}
        forward: dict[str, Any] = {}
        seq2seq = getattr(self, "is_seq2seq", False)
        if not seq2seq and (generate_kwargs is not None or max_new_tokens is not None):
            given = "max_new_tokens" if max_new_tokens is not None else "generate_kwargs"
            raise ConfigError(
                f"the automatic-speech-recognition pipeline does not take {given} for a CTC model (it applies to "
                "encoder-decoder models such as Whisper)"
            )
        if generate_kwargs is not None:
            if not isinstance(generate_kwargs, dict):
                raise ConfigError(f"generate_kwargs must be a dict of generate() arguments, got {generate_kwargs!r}")
            forward["generate_kwargs"] = dict(generate_kwargs)
        if max_new_tokens is not None:
            forward.setdefault("generate_kwargs", {})["max_new_tokens"] = max_new_tokens
        if chunk_length_s is not None:
            if not _seconds(chunk_length_s):
                raise ConfigError(f"chunk_length_s={chunk_length_s!r}: pass a positive number of seconds")
            pre["chunk_length_s"] = chunk_length_s
        if stride_length_s is not None:
            pair = stride_length_s if isinstance(stride_length_s, (tuple, list)) else (stride_length_s,) * 2
            if len(pair) != 2 or not all(_seconds(side) for side in pair):
                raise ConfigError(
                    f"stride_length_s={stride_length_s!r}: pass a number of seconds >= 0, or a (left, right) pair"
                )
            pre["stride_length_s"] = stride_length_s
        whisper_like = seq2seq and hasattr(getattr(self, "tokenizer", None), "decode_asr")
        if return_language is not None:
            if not whisper_like:
                raise ConfigError(
                    "return_language=True needs a Whisper model (a tokenizer with language tokens and decode_asr); "
                    f"this pipeline runs {type(self.model).__name__}"
                )
            forward["return_language"] = post["return_language"] = bool(return_language)
        if return_timestamps is not None and seq2seq:
            if return_timestamps == "word" and not whisper_like:
                raise ConfigError(
                    "return_timestamps='word' needs a Whisper model (cross-attention alignment heads and a tokenizer "
                    "with decode_asr); pass return_timestamps=True for segment timestamps"
                )
            heads = getattr(getattr(self.model, "generation_config", None), "alignment_heads", None)
            if return_timestamps == "word" and not heads:
                raise ConfigError(
                    "return_timestamps='word' times words from the cross-attention of "
                    "generation_config.alignment_heads, which this model's generation_config.json lacks; add the "
                    "checkpoint's alignment heads or pass return_timestamps=True for segment timestamps"
                )
            if return_timestamps not in (True, False, "word"):
                raise ConfigError(
                    f"return_timestamps={return_timestamps!r}: pass True for segment timestamps or 'word' for word "
                    "timestamps"
                )
            forward["return_timestamps"] = return_timestamps
            post["return_timestamps"] = return_timestamps
        elif return_timestamps is not None:
            if return_timestamps not in ("char", "word"):
                raise ConfigError(
                    f"return_timestamps={return_timestamps!r}: CTC models give 'char' or 'word' timestamps"
                )
            post["return_timestamps"] = return_timestamps
        return pre, forward, post

    def _check_memory(self, num_samples: int, chunked: bool = False) -> None:
        if self.is_seq2seq:  # the feature extractor cuts or pads every window to its fixed length
            return
        config = self.model.config
        frames = num_samples // max(self._align_to, 1)
        heads = int(getattr(config, "num_attention_heads", 1))
        conv_dim = list(getattr(config, "conv_dim", [1]) or [1])
        stride = list(getattr(config, "conv_stride", [1]) or [1])
        element = torch.finfo(_float_dtype(self.model) or torch.float32).bits // 8
        needed = max(2 * heads * frames * frames, 2 * conv_dim[0] * (num_samples // stride[0])) * element
        available = available_memory()
        if available is not None and needed > _MEMORY_SHARE * available:
            seconds = num_samples / self.feature_extractor.sampling_rate
            if chunked:
                raise AudioInputError(
                    f"a {seconds:.1f} s window needs about {needed / 2**20:.0f} MiB of activations, more than the "
                    f"{available / 2**20:.0f} MiB available; pass a smaller chunk_length_s"
                )
            raise AudioInputError(
                f"this audio is {seconds:.0f} s long; transcribing it in one pass needs about {needed / 2**30:.1f} GiB "
                f"of activations, more than the {available / 2**30:.1f} GiB available. Pass chunk_length_s=30 (and "
                "optionally stride_length_s=5) to transcribe it in overlapping windows."
            )

    def preprocess(self, inputs: Any, chunk_length_s: float = 0, stride_length_s: Any = None) -> Any:
        fe = self.feature_extractor
        stride = inputs.get("stride") if isinstance(inputs, dict) else None
        rate_in = inputs.get("sampling_rate") if isinstance(inputs, dict) else None
        # unchunked, the whole audio goes through the model at once: its activations are bounded before decoding
        check = None if chunk_length_s else self._check_memory
        audio, extra = load_audio(inputs, fe.sampling_rate, check_length=check)
        extra.pop("stride", None)
        if stride is not None:
            if not (
                isinstance(stride, (tuple, list))
                and len(stride) == 2
                and all(isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 0 for n in stride)
            ):
                raise AudioInputError(
                    f"the audio dict's 'stride'={stride!r:.60} must be (left, right) sample counts >= 0"
                )
            ratio = fe.sampling_rate / rate_in if rate_in else 1
            if stride[0] + stride[1] > audio.shape[0]:
                raise AudioInputError(f"stride={tuple(stride)} is longer than the audio ({audio.shape[0]} samples)")
            stride = (audio.shape[0], round(stride[0] * ratio), round(stride[1] * ratio))
        if chunk_length_s:
            if stride_length_s is None:
                stride_length_s = chunk_length_s / 6
            if isinstance(stride_length_s, (int, float)):
                stride_length_s = [stride_length_s, stride_length_s]
            align = self._align_to
            chunk_len = int(round(chunk_length_s * fe.sampling_rate / align) * align)
            left = int(round(stride_length_s[0] * fe.sampling_rate / align) * align)
            right = int(round(stride_length_s[1] * fe.sampling_rate / align) * align)
            if chunk_len <= 0:
                raise ConfigError(f"chunk_length_s={chunk_length_s} is shorter than one model frame")
            if chunk_len < left + right:
                raise ConfigError(
                    f"chunk_length_s={chunk_length_s} must be longer than the two strides {tuple(stride_length_s)}"
                )
            if chunk_len == left + right:
                raise ConfigError("chunk_length_s equals the two strides together: the windows would not advance")
            self._check_memory(chunk_len, chunked=True)
            yield from (dict(item, **extra) for item in self._chunks(audio, chunk_len, left, right))
            return
        window = getattr(fe, "n_samples", None)
        if self.is_seq2seq and window is not None and audio.shape[0] > window:
            # the whole recording, for the model's own window-by-window (long-form) decoding
            processed = fe(
                audio, sampling_rate=fe.sampling_rate, truncation=False, padding="longest", return_tensors="pt",
                return_attention_mask=True,
            )  # fmt: skip
        else:
            processed = fe(audio, sampling_rate=fe.sampling_rate, return_tensors="pt", return_attention_mask=True)
        item = {"is_last": True, **processed, **extra}
        if stride is not None:
            item["stride"] = stride
        yield item

    def _chunks(self, audio: np.ndarray, chunk_len: int, left: int, right: int) -> Any:
        fe = self.feature_extractor
        step = chunk_len - left - right
        total = audio.shape[0]
        for start in range(0, total, step):
            chunk = audio[start : start + chunk_len]
            is_last = start + chunk_len >= total
            stride = (chunk.shape[0], 0 if start == 0 else left, 0 if is_last else right)
            if chunk.shape[0] > stride[1]:
                processed = fe(chunk, sampling_rate=fe.sampling_rate, return_tensors="pt", return_attention_mask=True)
                yield {"is_last": is_last, "stride": stride, **processed}
            if is_last:
                break

    def _generation_defaults(self, generate_kwargs: dict[str, Any]) -> dict[str, Any]:
        """The reference pipeline's defaults for what neither the call nor the model's generation config sets:
        ``num_beams=5`` (as openai's whisper) and ``max_new_tokens=256`` (unless a ``max_length`` is set)."""
        config = getattr(self.model, "generation_config", None)
        given = {k for k, v in generate_kwargs.items() if v is not None}
        if "generation_config" in generate_kwargs:
            config = generate_kwargs["generation_config"]
        defaults: dict[str, Any] = {}
        if "num_beams" not in given and getattr(config, "num_beams", None) is None:
            defaults["num_beams"] = 5
        set_lengths = {"max_new_tokens", "max_length"} & given
        set_lengths |= {n for n in ("max_new_tokens", "max_length") if getattr(config, n, None) is not None}
        if not set_lengths:
            defaults["max_new_tokens"] = 256
        return defaults

    def _generate(
        self,
        model_inputs: dict[str, Any],
        return_timestamps: bool | str = False,
        generate_kwargs: dict[str, Any] | None = None,
        return_language: bool = False,
    ) -> dict[str, Any]:
        """Encoder-decoder models: ``generate`` on the window's features; the stride stays in audio samples.

        Word timestamps ask Whisper's generate for token timestamps (per segment, with each window's offset), and
        the language for its segments, whose first window's tokens hold the language token."""
        model_inputs = dict(model_inputs)
        attention_mask = model_inputs.pop("attention_mask", None)
        stride = model_inputs.pop("stride", None)
        is_last = model_inputs.pop("is_last")
        name = getattr(self.model, "main_input_name", "input_features")
        values = model_inputs.pop(name)
        dtype = _float_dtype(self.model)
        if dtype is not None and values.dtype != dtype:
            values = values.to(dtype)
        settings = {**self._generation_defaults(generate_kwargs or {}), **(generate_kwargs or {})}
        if return_timestamps:
            settings["return_timestamps"] = True
        if return_timestamps == "word":
            settings["return_token_timestamps"] = settings["return_segments"] = True
        if return_language:
            settings["return_segments"] = True
        generated = self.model.generate(**{name: values, "attention_mask": attention_mask}, **settings)
        tokens = generated if isinstance(generated, torch.Tensor) else generated["sequences"]
        out: dict[str, Any] = {"is_last": is_last, "tokens": tokens}
        segments = generated.get("segments") if isinstance(generated, dict) else None
        if return_timestamps == "word":
            if segments is not None:
                out["token_timestamps"] = [
                    torch.cat([segment["token_timestamps"] for segment in row]) if row else torch.zeros(0)
                    for row in segments
                ]
            else:
                out["token_timestamps"] = generated["token_timestamps"]
        if return_language and segments and segments[0]:
            first = segments[0][0]["result"]
            row = first["sequences"] if isinstance(first, dict) else first
            config = settings.get("generation_config") or self.model.generation_config
            languages = set((getattr(config, "lang_to_id", None) or {}).values())
            found = [token for token in row.tolist() if token in languages]
            if found:
                out["language_id"] = found[0]
        if stride is not None:
            out["stride"] = stride
        return {**out, **model_inputs}

    def _forward(
        self,
        model_inputs: dict[str, Any],
        return_timestamps: bool | str = False,
        generate_kwargs: dict[str, Any] | None = None,
        return_language: bool = False,
    ) -> dict[str, Any]:
        if self.is_seq2seq:
            return self._generate(model_inputs, return_timestamps, generate_kwargs, return_language)
        model_inputs = dict(model_inputs)
        attention_mask = model_inputs.pop("attention_mask", None)
        stride = model_inputs.pop("stride", None)
        is_last = model_inputs.pop("is_last")
        name = getattr(self.model, "main_input_name", "input_values")
        values = model_inputs.pop(name)
        dtype = _float_dtype(self.model)
        if dtype is not None and values.dtype != dtype:
            values = values.to(dtype)
        try:
            logits = self.model(**{name: values, "attention_mask": attention_mask}).logits
        except RuntimeError as exc:
            if "memory" in str(exc).lower() or "alloc" in str(exc).lower():
                raise AudioInputError(
                    f"the model ran out of memory on {values.shape[-1]} samples; pass chunk_length_s=30 to "
                    "transcribe long audio in windows (and a smaller batch_size)"
                ) from exc
            raise
        out: dict[str, Any] = {"is_last": is_last, "tokens": logits.argmax(dim=-1)}
        if stride is not None:
            ratio = 1 / self._align_to
            out["stride"] = (
                _rescale_stride([stride], ratio)[0] if isinstance(stride, tuple) else _rescale_stride(stride, ratio)
            )
        return {**out, **model_inputs}

    def _time_precision(self) -> float:
        """Seconds per timestamp token: the feature extractor's window over the encoder's positions."""
        window = float(getattr(self.feature_extractor, "chunk_length", 30))
        return window / int(getattr(self.model.config, "max_source_positions", 1500))

    def _postprocess_whisper(
        self, model_outputs: list[dict[str, Any]], return_timestamps: bool | str, return_language: bool
    ) -> dict[str, Any]:
        """Whisper's text and chunks from its tokenizer's ``decode_asr`` over the outputs in order (strides in
        seconds), as the reference pipeline builds them."""
        rate = self.feature_extractor.sampling_rate
        rows = []
        for output in model_outputs:
            row: dict[str, Any] = {"tokens": output["tokens"].reshape(-1).tolist()}
            if return_timestamps == "word":
                times = output["token_timestamps"]
                times = times[0] if isinstance(times, (list, tuple)) else times
                row["token_timestamps"] = [float(t) for t in torch.as_tensor(times).reshape(-1).tolist()]
            if output.get("language_id") is not None:
                # generate drops the prompt the language token was in: put it back in front (with no time)
                row["tokens"] = [int(output["language_id"]), *row["tokens"]]
                if "token_timestamps" in row:
                    row["token_timestamps"] = [0.0, *row["token_timestamps"]]
            if output.get("stride") is not None:
                row["stride"] = tuple(value / rate for value in output["stride"])
            rows.append(row)
        return self.tokenizer.decode_asr(
            rows, return_timestamps=return_timestamps, return_language=return_language,
            time_precision=self._time_precision(),
        )  # fmt: skip

    def _postprocess_seq2seq(
        self, model_outputs: list[dict[str, Any]], return_timestamps: bool | str, return_language: bool = False
    ) -> dict[str, Any]:
        tokenizer = self.tokenizer
        if hasattr(tokenizer, "decode_asr"):
            return self._postprocess_whisper(model_outputs, return_timestamps, return_language)
        rows = [output["tokens"].reshape(-1).tolist() for output in model_outputs]
        if len(rows) > 1 and return_timestamps:
            raise ConfigError(
                f"return_timestamps={return_timestamps!r} with chunk_length_s needs a tokenizer with decode_asr "
                f"(Whisper's); {type(tokenizer).__name__} has none: drop one of them"
            )
        if len(rows) == 1:
            ids = rows[0]
        else:
            special = set(getattr(tokenizer, "all_special_ids", []) or [])
            begin = getattr(tokenizer, "timestamp_begin", None)
            text_only = [[t for t in row if t not in special and (begin is None or t < begin)] for row in rows]
            ids = merge_overlapping_sequences(text_only)
        result: dict[str, Any] = {"text": tokenizer.decode(ids, skip_special_tokens=True)}
        if return_timestamps:
            offsets = tokenizer.decode(ids, skip_special_tokens=True, output_offsets=True)["offsets"]
            result["chunks"] = [
                {"text": item["text"], "timestamp": tuple(round(float(t), 2) for t in item["timestamp"])}
                for item in offsets
            ]
        return result

    def postprocess(
        self,
        model_outputs: list[dict[str, Any]],
        return_timestamps: str | bool | None = None,
        return_language: bool = False,
    ) -> dict[str, Any]:
        if self.is_seq2seq:
            result = self._postprocess_seq2seq(model_outputs, return_timestamps or False, return_language)
            extra_seq2seq: dict[str, list[Any]] = defaultdict(list)
            for output in model_outputs:
                for key, value in output.items():
                    if key not in ("tokens", "is_last", "stride", "token_timestamps", "language_id"):
                        extra_seq2seq[key].append(value)
            return {**result, **extra_seq2seq}
        pieces = []
        for output in model_outputs:
            tokens = output["tokens"].numpy()
            stride = output.get("stride")
            if stride is not None:
                total, left, right = stride
                tokens = tokens[:, left : total - right]
            pieces.append(tokens)
        ids = np.concatenate(pieces, axis=1).squeeze(0)
        result: dict[str, Any] = {"text": self.tokenizer.decode(ids, skip_special_tokens=False)}
        if return_timestamps:
            offsets = self.tokenizer.decode(ids, output_char_offsets=True)["char_offsets"]
            if return_timestamps == "word":
                offsets = self.tokenizer._get_word_offsets(offsets, self.tokenizer.replace_word_delimiter_char)
            align, rate = self._align_to, self.feature_extractor.sampling_rate
            result["chunks"] = [
                {
                    "text": item[return_timestamps],
                    "timestamp": (item["start_offset"] * align / rate, item["end_offset"] * align / rate),
                }
                for item in offsets
            ]
        extra: dict[str, list[Any]] = defaultdict(list)
        for output in model_outputs:
            for key, value in output.items():
                if key not in ("tokens", "is_last", "stride"):
                    extra[key].append(value)
        return {**result, **extra}


def merge_overlapping_sequences(sequences: list[list[int]]) -> list[int]:
    """Join the token sequences of overlapping windows: each next one is aligned to the end of what came before
    at the offset with the largest share of equal tokens (more than one match; ties go to longer overlaps), and the
    two are cut in the middle of that overlap (the reference's rule for chunked encoder-decoder transcription)."""
    merged: list[int] = []
    left = list(sequences[0]) if sequences else []
    for right in sequences[1:]:
        best, cut = 0.0, (len(left), len(left), 0, 0)
        for shift in range(1, len(left) + len(right)):
            left_start, left_stop = max(0, len(left) - shift), min(len(left), len(left) + len(right) - shift)
            right_start, right_stop = max(0, shift - len(left)), min(len(right), shift)
            matches = sum(a == b for a, b in zip(left[left_start:left_stop], right[right_start:right_stop]))
            score = matches / shift + shift / 10000.0
            if matches > 1 and score > best:
                best, cut = score, (left_start, left_stop, right_start, right_stop)
        merged.extend(left[: (cut[0] + cut[1]) // 2])
        left = list(right[(cut[2] + cut[3]) // 2 :])
    return merged + left


def _rescale_stride(strides: list[tuple[int, int, int]], ratio: float) -> list[tuple[int, int, int]]:
    """Audio-sample strides -> output-frame strides."""
    rescaled = []
    for total, left, right in strides:
        frames = round(total * ratio)
        rescaled.append((frames, round(left / total * frames), round(right / total * frames)))
    return rescaled


class AudioClassificationPipeline(Pipeline):
    """``pipeline("audio-classification", model=folder)(audio)`` -> ``[{"label", "score"}, ...]`` (top 5)."""

    needs_tokenizer = False
    padding_side = "right"

    def __init__(self, model: Any, tokenizer: Any = None, feature_extractor: Any = None, **kwargs: Any) -> None:
        self.feature_extractor = _resolve_feature_extractor(feature_extractor, model)
        kwargs.setdefault("top_k", 5)
        super().__init__(model, tokenizer, **kwargs)

    def is_single_input(self, inputs: Any, preprocess_params: dict[str, Any]) -> bool:
        return _is_single_audio(inputs)

    def _sanitize_parameters(
        self, top_k: int | None = None, function_to_apply: str | None = None, **kwargs: Any
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        if kwargs:
            raise ConfigError(
                f"the audio-classification pipeline does not take {', '.join(sorted(kwargs))} "
                "(it takes top_k, function_to_apply, batch_size)"
            )
        num_labels = self.model.config.num_labels
        post: dict[str, Any] = {}
        if top_k is None:
            post["top_k"] = num_labels
        else:
            if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
                raise ConfigError(f"top_k={top_k!r}: pass a positive integer")
            post["top_k"] = min(top_k, num_labels)
        if function_to_apply is not None:
            if function_to_apply not in ("softmax", "sigmoid", "none"):
                raise ConfigError(f"function_to_apply={function_to_apply!r}: use 'softmax', 'sigmoid' or 'none'")
            post["function_to_apply"] = function_to_apply
        return {}, {}, post

    def preprocess(self, inputs: Any) -> dict[str, Any]:
        fe = self.feature_extractor
        audio, _ = load_audio(inputs, fe.sampling_rate)
        return dict(fe(audio, sampling_rate=fe.sampling_rate, return_tensors="pt"))

    def _forward(self, model_inputs: dict[str, Any]) -> dict[str, Any]:
        inputs = dict(model_inputs)
        dtype = _float_dtype(self.model)
        name = getattr(self.model, "main_input_name", "input_values")
        if dtype is not None and name in inputs:
            inputs[name] = inputs[name].to(dtype)
        return {"logits": self.model(**inputs).logits}

    def postprocess(self, model_outputs: dict[str, Any], top_k: int = 5, function_to_apply: str | None = None) -> Any:
        config = self.model.config
        if function_to_apply is None:
            function_to_apply = {"regression": "none", "multi_label_classification": "sigmoid"}.get(
                getattr(config, "problem_type", None) or "", "softmax"
            )
        logits = model_outputs["logits"][0].float()
        if function_to_apply == "softmax":
            scores = logits.softmax(-1)
        elif function_to_apply == "sigmoid":
            scores = logits.sigmoid()
        else:
            scores = logits
        values, ids = scores.topk(top_k)
        return [{"score": s, "label": config.id2label[i]} for s, i in zip(values.tolist(), ids.tolist())]
