"""``sentence-similarity``: cosine similarities of a source sentence to candidate sentences.

The input and output of the task of that name on the Hugging Face inference API:
``pipe({"source_sentence": "...", "sentences": ["...", ...]})`` -> ``[float] * len(sentences)``. The sentence
embeddings are the ones sentence-transformers computes for the model: the model folder's ``modules.json`` names
the pooling (its ``Pooling`` module's ``config.json``: mean, CLS, max or mean-sqrt-len tokens) and a ``Normalize``
step, and ``sentence_bert_config.json`` the ``max_seq_length`` inputs are truncated to. A model without
``modules.json`` is mean-pooled, as sentence-transformers does for a plain Transformers checkpoint.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import torch

from microformers import ConfigError, InputError

from ._common import check_text
from .base import ChunkPipeline
from .feature_extraction import token_states

TASK = "sentence-similarity"
INPUT_KEYS = frozenset({"source_sentence", "sentences"})

# sentence-transformers' Pooling config keys, in the order it concatenates the poolings it is asked for.
POOLING_KEYS = (
    ("pooling_mode_cls_token", "cls"),
    ("pooling_mode_max_tokens", "max"),
    ("pooling_mode_mean_tokens", "mean"),
    ("pooling_mode_mean_sqrt_len_tokens", "mean_sqrt_len"),
)
UNSUPPORTED_POOLING_KEYS = ("pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken")
# modules.json entries the embedding needs besides the Transformer itself (which the pipeline's model is).
KNOWN_MODULES = ("Transformer", "Pooling", "Normalize")


@attrs.frozen
class SentenceEmbedding:
    """How a model's token states become one sentence vector (read from its sentence-transformers files)."""

    poolings: tuple[str, ...] = ("mean",)
    normalize: bool = False
    max_seq_length: int | None = None
    source: str = "default (no modules.json): mean pooling"


class SentenceSimilarityPipeline(ChunkPipeline):
    """``pipe({"source_sentence": s, "sentences": [a, b, ...]})`` -> ``[cos(s, a), cos(s, b), ...]``.

    A list (or iterable) of such dicts gives one list of scores per dict. The sentence embeddings follow the
    model folder's sentence-transformers files (see the module docstring); ``pipeline("sentence-similarity")``
    without a model uses the packaged all-MiniLM-L6-v2 (mean pooling, normalised, 256 tokens).
    """

    def __init__(self, model: Any, tokenizer: Any = None, **kwargs: Any) -> None:
        super().__init__(model, tokenizer, **kwargs)
        self.embedding = sentence_embedding_of(model)

    def preprocess(self, inputs: Any, **tokenizer_kwargs: Any) -> Iterator[dict[str, Any]]:
        source, sentences = check_input(inputs)
        options: dict[str, Any] = {"truncation": True}
        if self.embedding.max_seq_length is not None:
            options["max_length"] = self.embedding.max_seq_length
        for text in (source, *sentences):
            yield dict(self.tokenizer(text, return_tensors="pt", **options))

    def _forward(self, model_inputs: dict[str, Any]) -> dict[str, Any]:
        return token_states(self.model, model_inputs)

    def postprocess(self, model_outputs: list[Any]) -> list[float]:
        vectors = torch.stack([self.embed(outputs) for outputs in model_outputs])
        source, candidates = vectors[0], vectors[1:]
        return torch.nn.functional.cosine_similarity(candidates, source.unsqueeze(0), dim=-1).tolist()

    def embed(self, outputs: Mapping[str, Any]) -> torch.Tensor:
        """One input's sentence embedding (its batch dimension of 1 dropped), pooled and normalised as configured."""
        hidden = outputs["hidden_states"][0].float()
        mask = outputs["attention_mask"][0].to(hidden.dtype).unsqueeze(-1)
        tokens = mask.sum().clamp(min=1e-9)
        parts = []
        for pooling in self.embedding.poolings:
            if pooling == "cls":
                parts.append(hidden[0])
            elif pooling == "max":
                parts.append(hidden.masked_fill(mask == 0, -1e9).amax(0))
            elif pooling == "mean":
                parts.append((hidden * mask).sum(0) / tokens)
            else:  # mean_sqrt_len
                parts.append((hidden * mask).sum(0) / tokens.sqrt())
        vector = torch.cat(parts)
        return torch.nn.functional.normalize(vector, p=2, dim=0) if self.embedding.normalize else vector


def check_input(inputs: Any) -> tuple[str, list[str]]:
    """``{"source_sentence": str, "sentences": [str, ...]}``, or an InputError saying what it should be."""
    shape = '{"source_sentence": "...", "sentences": ["...", ...]}'
    if not isinstance(inputs, Mapping) or set(inputs) != INPUT_KEYS:
        got = f"a dict with keys {sorted(map(str, inputs))}" if isinstance(inputs, Mapping) else type(inputs).__name__
        raise InputError(f"{TASK}: each input is {shape}, got {got}")
    sentences = inputs["sentences"]
    if isinstance(sentences, str) or not isinstance(sentences, (list, tuple)) or not sentences:
        raise InputError(f"{TASK}: 'sentences' must be a non-empty list of strings, got {sentences!r:.80}")
    try:
        source = check_text(inputs["source_sentence"], TASK, "source_sentence")
        texts = [check_text(text, TASK, f"sentences[{i}]") for i, text in enumerate(sentences)]
    except ConfigError as exc:
        raise InputError(str(exc)) from None
    return source, texts


def sentence_embedding_of(model: Any) -> SentenceEmbedding:
    """The pooling, normalisation and length limit in the model folder's sentence-transformers files."""
    source = getattr(model, "name_or_path", None) or getattr(getattr(model, "config", None), "_name_or_path", None)
    modules_file = _file(source, "modules.json")
    if modules_file is None:
        return SentenceEmbedding()
    modules = _json(modules_file)
    if not isinstance(modules, list) or not all(isinstance(m, Mapping) for m in modules):
        raise ConfigError(
            f"{modules_file}: expected a list of {{'type': ..., 'path': ...}} modules, got {modules!r:.80}"
        )
    kinds = [str(m.get("type", "")).rpartition(".")[2] for m in modules]
    unknown = [kind for kind in kinds if kind not in KNOWN_MODULES]
    if unknown:
        raise ConfigError(
            f"{modules_file} lists {', '.join(unknown)} module(s), which the {TASK} pipeline does not run (it runs "
            f"{', '.join(KNOWN_MODULES)}); its scores would not be the model's. Use sentence-transformers for it"
        )
    poolings: tuple[str, ...] = ("mean",)
    if "Pooling" in kinds:
        pooling = modules[kinds.index("Pooling")]
        pooling_file = _file(source, f"{str(pooling.get('path') or '').strip('/')}/config.json".lstrip("/"))
        if pooling_file is None:
            raise ConfigError(f"{modules_file} names a Pooling module at '{pooling.get('path')}' without a config.json")
        poolings = _poolings(pooling_file, _json(pooling_file))
    length_file = _file(source, "sentence_bert_config.json")
    max_seq_length = _json(length_file).get("max_seq_length") if length_file is not None else None
    if max_seq_length is not None and (
        isinstance(max_seq_length, bool) or not isinstance(max_seq_length, int) or max_seq_length < 1
    ):
        raise ConfigError(f"{length_file}: max_seq_length={max_seq_length!r} must be a positive integer")
    return SentenceEmbedding(poolings, "Normalize" in kinds, max_seq_length, str(modules_file))


def _poolings(path: Path, settings: Any) -> tuple[str, ...]:
    if not isinstance(settings, Mapping):
        raise ConfigError(f"{path}: expected a JSON object of pooling_mode_* settings")
    unsupported = [key for key in UNSUPPORTED_POOLING_KEYS if settings.get(key)]
    if unsupported:
        raise ConfigError(f"{path}: {', '.join(unsupported)} is not supported by the {TASK} pipeline")
    chosen = tuple(name for key, name in POOLING_KEYS if settings.get(key))
    if not chosen:
        raise ConfigError(f"{path}: no pooling_mode_* is true; set one of {', '.join(k for k, _ in POOLING_KEYS)}")
    return chosen


def _file(source: Any, name: str) -> Path | None:
    """``name`` in the model's folder or Hub repo (fetched as the model's other files were), else None."""
    if not source:
        return None
    from microformers.errors import MicroformersError
    from microformers.hub import resolve_file

    try:
        return resolve_file(str(source), name, required=False)
    except MicroformersError:  # offline and not cached: as without the file
        return None


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"{path}: not readable JSON ({exc}); restore the file from the model") from None


__all__ = ["SentenceSimilarityPipeline", "check_input", "sentence_embedding_of"]
