"""``token-classification`` (alias ``ner``): a label per token, optionally grouped into words and entities."""

from __future__ import annotations

from typing import Any

import numpy as np

from microformers import ConfigError

from ._common import check_choice, check_text, labels_of, logits_of, model_inputs, softmax
from .base import ChunkPipeline

STRATEGIES = ("none", "simple", "first", "average", "max")


class TokenClassificationPipeline(ChunkPipeline):
    """``pipe(text, aggregation_strategy="none"|"simple"|"first"|"average"|"max", ignore_labels=["O"])``.

    ``"none"``: one ``{"entity", "score", "index", "word", "start", "end"}`` per token; the others group
    tokens into ``{"entity_group", "score", "word", "start", "end"}``: ``simple`` by B-/I- tags, the word
    strategies first merge sub-words into words (label of the first sub-token, the average scores, or the
    most confident sub-token). ``start``/``end`` are character offsets into the text. ``stride=n`` splits
    texts longer than the model into overlapping windows.
    """

    def is_single_input(self, inputs: Any, preprocess_params: dict[str, Any]) -> bool:
        if isinstance(inputs, list) and inputs and all(isinstance(x, str) for x in inputs):
            return bool(preprocess_params.get("is_split_into_words"))
        return super().is_single_input(inputs, preprocess_params)

    def _sanitize_parameters(
        self,
        ignore_labels: list[str] | None = None,
        aggregation_strategy: Any = None,
        offset_mapping: list[tuple[int, int]] | None = None,
        is_split_into_words: bool = False,
        stride: int | None = None,
        delimiter: str | None = None,
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        preprocess: dict[str, Any] = {"is_split_into_words": is_split_into_words}
        if is_split_into_words:
            preprocess["delimiter"] = " " if delimiter is None else delimiter
        if offset_mapping is not None:
            preprocess["offset_mapping"] = offset_mapping
        postprocess: dict[str, Any] = {}
        strategy = None
        if aggregation_strategy is not None:
            strategy = check_choice(aggregation_strategy, "token-classification", "aggregation_strategy", STRATEGIES)
            postprocess["aggregation_strategy"] = strategy
        if ignore_labels is not None:
            postprocess["ignore_labels"] = list(ignore_labels)
        if stride is not None:
            if stride >= self.tokenizer.model_max_length:
                raise ConfigError("token-classification: stride must be smaller than the tokenizer's model_max_length")
            if strategy in (None, "none"):
                raise ConfigError(
                    "token-classification: stride=... merges overlapping windows, which needs an "
                    "aggregation_strategy other than 'none' (e.g. 'simple')"
                )
            preprocess["tokenizer_params"] = {"return_overflowing_tokens": True, "padding": True, "stride": stride}
        return preprocess, {}, postprocess

    def preprocess(
        self,
        sentence: Any,
        offset_mapping: Any = None,
        is_split_into_words: bool = False,
        delimiter: str = " ",
        tokenizer_params: dict[str, Any] | None = None,
    ) -> Any:
        task = "token-classification"
        params = dict(tokenizer_params or {})
        word_spans = None
        if is_split_into_words:
            if not isinstance(sentence, list) or not sentence:
                raise ConfigError(f"{task}: with is_split_into_words=True each input is a non-empty list of words")
            words = [check_text(w, task, "word") for w in sentence]
            sentence = delimiter.join(words)
            word_spans, position = [], 0
            for word in words:
                word_spans.append((position, position + len(word)))
                position += len(word) + len(delimiter)
            text: Any = words
            params["is_split_into_words"] = True
        else:
            text = check_text(sentence, task)
        max_length = self.tokenizer.model_max_length
        encoded = self.tokenizer(
            text,
            return_tensors="pt",
            truncation=bool(max_length and max_length > 0),
            return_special_tokens_mask=True,
            return_offsets_mapping=True,
            **params,
        )
        encoded.pop("overflow_to_sample_mapping", None)
        windows = len(encoded["input_ids"])
        for i in range(windows):
            piece = {key: value[i].unsqueeze(0) for key, value in encoded.items()}
            if offset_mapping is not None:
                piece["offset_mapping"] = offset_mapping
            piece["sentence"] = sentence
            piece["word_ids"] = encoded.word_ids(i) if word_spans is not None else None
            piece["word_spans"] = word_spans
            yield piece

    def _forward(self, inputs: dict[str, Any]) -> dict[str, Any]:
        logits = logits_of(self.model(**model_inputs(self.tokenizer, inputs)))
        return {**inputs, "logits": logits}

    def postprocess(
        self, windows: list[dict[str, Any]], aggregation_strategy: str = "none", ignore_labels: list[str] | None = None
    ) -> list[dict[str, Any]]:
        ignore = ["O"] if ignore_labels is None else ignore_labels
        entities: list[dict[str, Any]] = []
        for window in windows:
            scores = softmax(window["logits"][0].float().numpy())
            tokens = self._token_entries(window, scores, aggregation_strategy)
            grouped = self._aggregate(tokens, aggregation_strategy)
            entities.extend(e for e in grouped if e.get("entity") not in ignore and e.get("entity_group") not in ignore)
        return _merge_overlaps(entities) if len(windows) > 1 else entities

    # -- steps -------------------------------------------------------------------------------------
    def _token_entries(self, window: dict[str, Any], scores: np.ndarray, strategy: str) -> list[dict[str, Any]]:
        sentence = window["sentence"]
        input_ids = window["input_ids"][0].tolist()
        special = window["special_tokens_mask"][0].tolist()
        offsets = window.get("offset_mapping")
        if offsets is not None and hasattr(offsets, "tolist"):
            offsets = offsets[0].tolist() if getattr(offsets, "dim", lambda: 2)() == 3 else offsets.tolist()
        word_ids, word_spans = window.get("word_ids"), window.get("word_spans")
        subword_prefix = getattr(getattr(self.tokenizer, "backend_tokenizer", None), "model", None)
        has_subword_prefix = bool(getattr(subword_prefix, "continuing_subword_prefix", None))
        entries = []
        for index, token_scores in enumerate(scores):
            if special[index]:
                continue
            word = self.tokenizer.convert_ids_to_tokens(int(input_ids[index]))
            start = end = None
            is_subword = False
            if offsets is not None:
                start, end = (int(x) for x in offsets[index])
                if word_ids is not None and word_spans is not None and word_ids[index] is not None:
                    shift = word_spans[word_ids[index]][0]
                    start, end = start + shift, end + shift
                source = sentence[start:end]
                if has_subword_prefix:
                    is_subword = len(word) != len(source)
                else:
                    is_subword = start > 0 and " " not in sentence[start - 1 : start + 1]
                if int(input_ids[index]) == self.tokenizer.unk_token_id:
                    word, is_subword = source, False
            entries.append(
                {
                    "word": word,
                    "scores": token_scores,
                    "start": start,
                    "end": end,
                    "index": index,
                    "is_subword": is_subword,
                }
            )
        return entries

    def _aggregate(self, entries: list[dict[str, Any]], strategy: str) -> list[dict[str, Any]]:
        id2label = labels_of(self.model, "token-classification")
        if strategy in ("none", "simple"):
            tokens = []
            for entry in entries:
                best = int(entry["scores"].argmax())
                tokens.append(
                    {
                        "entity": id2label[best],
                        "score": float(entry["scores"][best]),
                        "index": entry["index"],
                        "word": entry["word"],
                        "start": entry["start"],
                        "end": entry["end"],
                    }
                )
            if strategy == "none":
                return tokens
        else:
            tokens = [self._merge_word(group, strategy, id2label) for group in _word_groups(entries)]
        return self._group_entities(tokens)

    def _merge_word(self, group: list[dict[str, Any]], strategy: str, id2label: dict[int, str]) -> dict[str, Any]:
        if strategy == "first":
            scores = group[0]["scores"]
        elif strategy == "max":
            scores = max(group, key=lambda entry: entry["scores"].max())["scores"]
        else:
            scores = np.nanmean(np.stack([entry["scores"] for entry in group]), axis=0)
        best = int(scores.argmax())
        return {
            "entity": id2label[best],
            "score": float(scores[best]),
            "word": self.tokenizer.convert_tokens_to_string([entry["word"] for entry in group]),
            "start": group[0]["start"],
            "end": group[-1]["end"],
        }

    def _group_entities(self, tokens: list[dict[str, Any]]) -> list[dict[str, Any]]:
        groups: list[list[dict[str, Any]]] = []
        for token in tokens:
            prefix, tag = _split_tag(token["entity"])
            if groups and prefix != "B" and tag == _split_tag(groups[-1][-1]["entity"])[1]:
                groups[-1].append(token)
            else:
                groups.append([token])
        return [
            {
                "entity_group": group[0]["entity"].split("-", 1)[-1],
                "score": float(np.nanmean([t["score"] for t in group])),
                "word": self.tokenizer.convert_tokens_to_string([t["word"] for t in group]),
                "start": group[0]["start"],
                "end": group[-1]["end"],
            }
            for group in groups
        ]


def _split_tag(label: str) -> tuple[str, str]:
    """``"B-PER" -> ("B", "PER")``; a label without a B-/I- prefix continues like ``I-``."""
    if label.startswith(("B-", "I-")):
        return label[0], label[2:]
    return "I", label


def _word_groups(entries: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    groups: list[list[dict[str, Any]]] = []
    for entry in entries:
        if groups and entry["is_subword"]:
            groups[-1].append(entry)
        else:
            groups.append([entry])
    return groups


def _merge_overlaps(entities: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Entities from overlapping windows: of those that overlap, keep the longest (then the most confident)."""
    if not entities:
        return entities
    ordered = sorted(entities, key=lambda e: e["start"])
    kept: list[dict[str, Any]] = []
    current = ordered[0]
    for entity in ordered:
        if current["start"] <= entity["start"] < current["end"]:
            longer = entity["end"] - entity["start"] > current["end"] - current["start"]
            same = entity["end"] - entity["start"] == current["end"] - current["start"]
            if longer or (same and entity["score"] > current["score"]):
                current = entity
        else:
            kept.append(current)
            current = entity
    kept.append(current)
    return kept
