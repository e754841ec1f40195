"""The ``automatic-speech-recognition`` (CTC) and ``audio-classification`` pipelines.

Inputs (see :mod:`microformers_audio.audio_io`): a file path or bytes, a 1-D array at the model's
rate, or ``{"array"/"raw": samples, "sampling_rate": rate}`` (resampled with soxr when it differs).

Speech recognition runs CTC models (``AutoModelForCTC``): logits -> argmax ids -> the tokenizer's
CTC decoding. ``chunk_length_s`` cuts long audio into overlapping windows (``stride_length_s`` of
context on each side, default ``chunk_length_s / 6``) whose predictions for the context frames are
dropped before the pieces are joined, so the text equals one pass wherever the model would have
seen enough context. ``return_timestamps="char"`` or ``"word"`` adds ``chunks`` with
``(start, end)`` times in seconds. Results equal the reference pipeline's.
"""

from __future__ import annotations

import os
from collections import defaultdict
from typing import Any

import numpy as np
import torch

from microformers import ChunkPipeline, Pipeline
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


def _available_memory() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _is_single_audio(inputs: Any) -> bool:
    """One waveform (array/tensor of at most 2 dims, dict, path, bytes) rather than a list or stream of them."""
    if isinstance(inputs, (str, bytes, bytearray, dict, os.PathLike)):
        return True
    if isinstance(inputs, (np.ndarray, torch.Tensor)):
        return inputs.ndim <= 2 if isinstance(inputs, np.ndarray) else inputs.dim() <= 2
    if isinstance(inputs, (list, tuple)):
        return bool(inputs) and isinstance(inputs[0], (int, float, np.floating))
    return False


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
        super().__init__(model, tokenizer, **kwargs)
        if not hasattr(self.tokenizer, "decode") or not hasattr(self.tokenizer, "_get_word_offsets"):
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
        return_timestamps: str | None = None,
        **kwargs: Any,
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        if kwargs:
            raise ConfigError(
                f"the automatic-speech-recognition pipeline does not take {', '.join(sorted(kwargs))} "
                "(it takes chunk_length_s, stride_length_s, return_timestamps, batch_size)"
            )
        pre: dict[str, Any] = {}
        post: dict[str, Any] = {}
        if chunk_length_s is not None:
            if isinstance(chunk_length_s, bool) or not isinstance(chunk_length_s, (int, float)) or chunk_length_s < 0:
                raise ConfigError(f"chunk_length_s={chunk_length_s!r}: pass a positive number of seconds")
            pre["chunk_length_s"] = chunk_length_s
        if stride_length_s is not None:
            pre["stride_length_s"] = stride_length_s
        if return_timestamps is not None:
            if return_timestamps not in ("char", "word"):
                raise ConfigError(
                    f"return_timestamps={return_timestamps!r}: CTC models give 'char' or 'word' timestamps"
                )
            post["return_timestamps"] = return_timestamps
        return pre, {}, post

    def _check_memory(self, num_samples: int, chunked: bool = False) -> None:
        config = self.model.config
        frames = num_samples // max(self._align_to, 1)
        heads = int(getattr(config, "num_attention_heads", 1))
        conv_dim = list(getattr(config, "conv_dim", [1]) or [1])
        stride = list(getattr(config, "conv_stride", [1]) or [1])
        element = torch.finfo(_float_dtype(self.model) or torch.float32).bits // 8
        needed = max(2 * heads * frames * frames, 2 * conv_dim[0] * (num_samples // stride[0])) * element
        available = _available_memory()
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
        audio, extra = load_audio(inputs, fe.sampling_rate)
        extra.pop("stride", None)
        if stride is not None:
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
        self._check_memory(audio.shape[0])
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

    def _forward(self, model_inputs: dict[str, Any]) -> dict[str, Any]:
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

    def postprocess(self, model_outputs: list[dict[str, Any]], return_timestamps: str | None = None) -> dict[str, Any]:
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
