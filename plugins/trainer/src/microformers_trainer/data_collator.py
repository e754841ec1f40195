"""Data collators: turn a list of examples into a batch of tensors (``return_tensors="pt"``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np
import torch

from microformers import ConfigError, InputError

IGNORE_INDEX = -100


def _check_tensors(return_tensors: str) -> None:
    if return_tensors != "pt":
        raise ConfigError(f"return_tensors={return_tensors!r}: the collators build PyTorch tensors; use 'pt'")


def _as_dict(example: Any) -> Mapping[str, Any]:
    if isinstance(example, Mapping):
        return example
    if hasattr(example, "keys") and hasattr(example, "__getitem__"):
        return {k: example[k] for k in example.keys()}
    if attrs.has(type(example)):
        return attrs.asdict(example, recurse=False)
    if hasattr(example, "__dict__"):
        return vars(example)
    raise InputError(f"a data collator got a {type(example).__name__}; examples must be dicts of features")


# features that hold token ids: a string there is an untokenized dataset, not a column to leave out
_TOKEN_FEATURES = ("input_ids", "attention_mask", "token_type_ids", "labels", "decoder_input_ids")


def default_data_collator(features: Sequence[Any], return_tensors: str = "pt") -> dict[str, Any]:
    """Stack features of equal shape: ``label``/``label_ids`` become ``labels`` (long for ints, float otherwise);
    strings and ``None`` values are left out."""
    _check_tensors(return_tensors)
    rows = [_as_dict(f) for f in features]
    first = rows[0]
    batch: dict[str, Any] = {}
    for name in ("label", "label_ids"):
        value = first.get(name)
        if value is not None:
            if isinstance(value, torch.Tensor):
                value = value.item() if value.dim() == 0 else value.tolist()
            probe = value[0] if isinstance(value, (list, tuple)) and value else value
            dtype = torch.long if isinstance(probe, (int, np.integer)) else torch.float
            stacked = [r[name] for r in rows]
            if isinstance(stacked[0], torch.Tensor):
                batch["labels"] = torch.stack(stacked).to(dtype)
            else:
                batch["labels"] = torch.tensor(np.asarray(stacked), dtype=dtype)
            break
    for key, value in first.items():
        if isinstance(value, str) and key in _TOKEN_FEATURES:  # left out, the model would see no input_ids at all
            raise InputError(
                f"default_data_collator: feature '{key}' is text ({value!r:.40}), not token ids; tokenize the "
                "dataset first (e.g. dataset.map(lambda row: tokenizer(row['text'])))"
            )
        if key in ("label", "label_ids") or value is None or isinstance(value, str):
            continue
        values = [r[key] for r in rows]
        if isinstance(value, torch.Tensor):
            batch[key] = torch.stack(values)
        elif isinstance(value, np.ndarray):
            batch[key] = torch.from_numpy(np.stack(values))
        else:
            try:
                batch[key] = torch.tensor(values)
            except (ValueError, TypeError) as exc:
                raise InputError(
                    f"default_data_collator: feature '{key}' has different lengths across examples ({exc}); "
                    "pad the examples first or use DataCollatorWithPadding"
                ) from exc
    return batch


@attrs.define
class DefaultDataCollator:
    """Callable form of :func:`default_data_collator`."""

    return_tensors: str = "pt"

    def __call__(self, features: Sequence[Any], return_tensors: str | None = None) -> dict[str, Any]:
        return default_data_collator(features, return_tensors or self.return_tensors)


def _pad(tokenizer: Any, rows: list[Mapping[str, Any]], **kwargs: Any) -> dict[str, Any]:
    if tokenizer is None or not hasattr(tokenizer, "pad"):
        raise ConfigError("this data collator needs a tokenizer (with a pad token) to pad examples")
    return dict(tokenizer.pad(rows, return_tensors="pt", **kwargs))


def _pad_as_set(collator: Any, rows: list[Mapping[str, Any]]) -> dict[str, Any]:
    """Pad with the collator's tokenizer and its ``padding``, ``max_length`` and ``pad_to_multiple_of``."""
    return _pad(
        collator.tokenizer,
        rows,
        padding=collator.padding,
        max_length=collator.max_length,
        pad_to_multiple_of=collator.pad_to_multiple_of,
    )


def _round_up(length: int, multiple: int | None) -> int:
    """``length``, raised to the next multiple of ``multiple`` when one is given."""
    return length + (multiple - length % multiple) % multiple if multiple else length


@attrs.define
class DataCollatorWithPadding:
    """Pads the tokenizer outputs of each example to the longest in the batch (or ``max_length``)."""

    tokenizer: Any
    padding: bool | str = True
    max_length: int | None = None
    pad_to_multiple_of: int | None = None
    return_tensors: str = "pt"

    def __call__(self, features: Sequence[Any]) -> dict[str, Any]:
        _check_tensors(self.return_tensors)
        rows = [dict(_as_dict(f)) for f in features]
        labels = None
        for name in ("label", "label_ids", "labels"):
            if name in rows[0]:
                labels = [r.pop(name) for r in rows]
                break
        batch = _pad_as_set(self, rows)
        if labels is not None:
            batch["labels"] = torch.tensor(labels)
        return batch


def _pad_labels(labels: list[Sequence[int]], length: int, side: str, pad_id: int) -> torch.Tensor:
    out = torch.full((len(labels), length), pad_id, dtype=torch.long)
    for i, row in enumerate(labels):
        row = list(row)[:length]
        if side == "left":
            out[i, length - len(row) :] = torch.tensor(row, dtype=torch.long)
        else:
            out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return out


@attrs.define
class DataCollatorForTokenClassification:
    """Pads inputs like :class:`DataCollatorWithPadding` and per-token ``labels`` with ``label_pad_token_id``."""

    tokenizer: Any
    padding: bool | str = True
    max_length: int | None = None
    pad_to_multiple_of: int | None = None
    label_pad_token_id: int = IGNORE_INDEX
    return_tensors: str = "pt"

    def __call__(self, features: Sequence[Any]) -> dict[str, Any]:
        _check_tensors(self.return_tensors)
        rows = [dict(_as_dict(f)) for f in features]
        name = "label" if "label" in rows[0] else "labels"
        labels = [r.pop(name) for r in rows] if name in rows[0] else None
        batch = _pad_as_set(self, rows)
        if labels is not None:
            length = batch["input_ids"].shape[1]
            batch["labels"] = _pad_labels(labels, length, self.tokenizer.padding_side, self.label_pad_token_id)
        return batch


@attrs.define
class DataCollatorForSeq2Seq:
    """Pads inputs and ``labels`` (with ``label_pad_token_id``) separately; with a ``model`` that has
    ``prepare_decoder_input_ids_from_labels``, also builds ``decoder_input_ids``."""

    tokenizer: Any
    model: Any = None
    padding: bool | str = True
    max_length: int | None = None
    pad_to_multiple_of: int | None = None
    label_pad_token_id: int = IGNORE_INDEX
    return_tensors: str = "pt"

    def __call__(self, features: Sequence[Any], return_tensors: str | None = None) -> dict[str, Any]:
        _check_tensors(return_tensors or self.return_tensors)
        rows = [dict(_as_dict(f)) for f in features]
        name = "label" if "label" in rows[0] else "labels"
        labels = [r.pop(name, None) for r in rows] if name in rows[0] else None
        if labels is not None and all(label is None for label in labels):
            labels = None
        elif labels is not None and any(label is None for label in labels):
            raise InputError(f"DataCollatorForSeq2Seq: some examples have '{name}' and others not; give all or none")
        batch = _pad_as_set(self, rows)
        if labels is not None:
            labels = [
                label.tolist() if isinstance(label, (torch.Tensor, np.ndarray)) else list(label) for label in labels
            ]
            if self.padding is False or self.padding == "do_not_pad":
                if len({len(label) for label in labels}) > 1:
                    raise InputError(
                        "DataCollatorForSeq2Seq(padding=False): the labels have different lengths; pad them "
                        "(padding=True) or give labels of one length"
                    )
                batch["labels"] = torch.tensor(labels, dtype=torch.long)
            else:
                length = max(len(x) for x in labels)
                if self.padding == "max_length" and self.max_length is not None:
                    length = self.max_length
                length = _round_up(length, self.pad_to_multiple_of)
                batch["labels"] = _pad_labels(labels, length, self.tokenizer.padding_side, self.label_pad_token_id)
            prepare = getattr(self.model, "prepare_decoder_input_ids_from_labels", None)
            if prepare is not None:
                batch["decoder_input_ids"] = prepare(labels=batch["labels"])
        return batch


def _collate_ids(examples: Sequence[Any], tokenizer: Any, pad_to_multiple_of: int | None) -> torch.Tensor:
    rows = [torch.as_tensor(e, dtype=torch.long) for e in examples]
    length = _round_up(max(r.numel() for r in rows), pad_to_multiple_of)
    if all(r.numel() == length for r in rows):
        return torch.stack(rows)
    if getattr(tokenizer, "pad_token_id", None) is None:
        raise ConfigError("examples of different lengths need padding, but the tokenizer has no pad_token")
    out = torch.full((len(rows), length), tokenizer.pad_token_id, dtype=torch.long)
    for i, r in enumerate(rows):
        if tokenizer.padding_side == "left":
            out[i, length - r.numel() :] = r
        else:
            out[i, : r.numel()] = r
    return out


@attrs.define
class DataCollatorForLanguageModeling:
    """Masked LM (``mlm=True``: ``mlm_probability`` of the tokens are predicted; of those
    ``mask_replace_prob`` become the mask token, ``random_replace_prob`` a random token, the rest stay) or
    causal LM (``mlm=False``: ``labels`` are the inputs, padding set to -100; the model shifts them)."""

    tokenizer: Any
    mlm: bool = True
    mlm_probability: float = 0.15
    mask_replace_prob: float = 0.8
    random_replace_prob: float = 0.1
    pad_to_multiple_of: int | None = None
    return_tensors: str = "pt"
    seed: int | None = None
    generator: torch.Generator | None = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        _check_tensors(self.return_tensors)
        if self.mlm and getattr(self.tokenizer, "mask_token", None) is None:
            raise ConfigError("mlm=True needs a tokenizer with a mask_token; pass mlm=False for causal LM training")
        if not 0 <= self.mlm_probability <= 1:
            raise ConfigError(f"mlm_probability={self.mlm_probability}: must be within [0, 1]")
        if not (0 <= self.mask_replace_prob <= 1 and 0 <= self.random_replace_prob <= 1):
            raise ConfigError("mask_replace_prob and random_replace_prob must be within [0, 1]")
        if self.mask_replace_prob + self.random_replace_prob > 1:
            raise ConfigError("mask_replace_prob + random_replace_prob must not exceed 1")
        if self.seed is not None:
            self.generator = torch.Generator().manual_seed(self.seed)

    def _batch(self, examples: Sequence[Any]) -> dict[str, Any]:
        if isinstance(examples[0], Mapping):
            return _pad(self.tokenizer, [dict(e) for e in examples], pad_to_multiple_of=self.pad_to_multiple_of)
        return {"input_ids": _collate_ids(examples, self.tokenizer, self.pad_to_multiple_of)}

    def __call__(self, examples: Sequence[Any]) -> dict[str, Any]:
        batch = self._batch(examples)
        special = batch.pop("special_tokens_mask", None)
        offsets = batch.pop("offset_mapping", None)
        if self.mlm:
            batch["input_ids"], batch["labels"] = self.torch_mask_tokens(batch["input_ids"], special, offsets)
        else:
            labels = batch["input_ids"].clone()
            if getattr(self.tokenizer, "pad_token_id", None) is not None:
                labels[labels == self.tokenizer.pad_token_id] = IGNORE_INDEX
            batch["labels"] = labels
        return batch

    def _special_mask(self, inputs: torch.Tensor, special: Any) -> torch.Tensor:
        if special is None:
            special = [
                self.tokenizer.get_special_tokens_mask(r, already_has_special_tokens=True) for r in inputs.tolist()
            ]
        return torch.as_tensor(special, dtype=torch.bool)

    def _select(self, inputs: torch.Tensor, special: Any, offsets: Any) -> torch.Tensor:
        probs = torch.full(inputs.shape, self.mlm_probability)
        probs.masked_fill_(self._special_mask(inputs, special), 0.0)
        return torch.bernoulli(probs, generator=self.generator).bool()

    def torch_mask_tokens(
        self, inputs: torch.Tensor, special_tokens_mask: Any = None, offset_mapping: Any = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Pick the tokens to predict and corrupt them; returns ``(inputs, labels)``."""
        inputs = inputs.clone()
        labels = inputs.clone()
        masked = self._select(inputs, special_tokens_mask, offset_mapping)
        labels[~masked] = IGNORE_INDEX
        replace = torch.bernoulli(torch.full(inputs.shape, self.mask_replace_prob), generator=self.generator).bool()
        replace &= masked
        inputs[replace] = self.tokenizer.mask_token_id
        if self.random_replace_prob == 0 or self.mask_replace_prob == 1:
            return inputs, labels
        share = self.random_replace_prob / (1 - self.mask_replace_prob)
        randomise = torch.bernoulli(torch.full(inputs.shape, share), generator=self.generator).bool()
        randomise &= masked & ~replace
        words = torch.randint(len(self.tokenizer), inputs.shape, dtype=torch.long, generator=self.generator)
        inputs[randomise] = words[randomise]
        return inputs, labels


@attrs.define
class DataCollatorForWholeWordMask(DataCollatorForLanguageModeling):
    """Masked LM that masks every token of a chosen word, always with the mask token.

    Words come from ``offset_mapping`` (tokenize with ``return_offsets_mapping=True``; a token starts a word
    when it does not touch the previous one) or, without offsets, from WordPiece ``##`` continuation tokens.
    """

    def __attrs_post_init__(self) -> None:
        if not self.mlm:
            raise ConfigError("DataCollatorForWholeWordMask needs mlm=True")
        self.mask_replace_prob, self.random_replace_prob = 1.0, 0.0
        super().__attrs_post_init__()

    def _word_ids(self, inputs: torch.Tensor, special: torch.Tensor, offsets: Any) -> torch.Tensor:
        if offsets is not None:
            offsets = torch.as_tensor(offsets)
            starts, ends = offsets[..., 0], offsets[..., 1]
            prev_end = torch.cat([torch.full_like(ends[:, :1], -1), ends[:, :-1]], dim=1)
            prev_special = torch.cat([torch.zeros_like(special[:, :1]), special[:, :-1]], dim=1)
            new_word = ~special & ((starts != prev_end) | prev_special)
        else:
            if not hasattr(self.tokenizer, "convert_ids_to_tokens"):
                raise ConfigError("whole-word masking needs offset_mapping in the examples or a WordPiece tokenizer")
            rows = [self.tokenizer.convert_ids_to_tokens(r) for r in inputs.tolist()]
            cont = torch.tensor([[str(t).startswith("##") for t in r] for r in rows], dtype=torch.bool)
            new_word = ~special & ~cont
        word_ids = torch.cumsum(new_word.long(), dim=1)
        word_ids[special] = -1
        return word_ids, new_word

    def _select(self, inputs: torch.Tensor, special: Any, offsets: Any) -> torch.Tensor:
        special = self._special_mask(inputs, special)
        word_ids, new_word = self._word_ids(inputs, special, offsets)
        chosen = torch.bernoulli(torch.where(new_word, self.mlm_probability, 0.0), generator=self.generator).bool()
        same = (word_ids[:, :, None] == word_ids[:, None, :]) & (word_ids[:, :, None] >= 0)
        return (same & chosen[:, None, :]).any(dim=2)


@attrs.define
class DataCollatorForPermutationLanguageModeling:
    """XLNet's permutation LM batches: ``input_ids`` with masked spans, ``perm_mask`` (``[b, i, j] = 1``: token
    ``i`` may not see token ``j``), ``target_mapping`` (the identity: the i-th prediction is token i) and
    ``labels`` (-100 except at masked tokens).

    Per row, spans of 1..``max_span_length`` tokens are masked, one in each stretch of
    ``span / plm_probability`` tokens; special tokens and padding are never masked. A random order of the
    sequence's two halves, taken position by position, is the factorisation order: a masked token sees only
    unmasked tokens and masked ones earlier in that order. Sequence lengths must be even (half the sequence is
    taken as reused memory). Uses torch's global generator, as the reference does, so a seeded run draws the
    reference's masks.
    """

    tokenizer: Any
    plm_probability: float = 1 / 6
    max_span_length: int = 5
    return_tensors: str = "pt"

    def __attrs_post_init__(self) -> None:
        _check_tensors(self.return_tensors)
        if getattr(self.tokenizer, "mask_token", None) is None:
            raise ConfigError(
                "DataCollatorForPermutationLanguageModeling needs a tokenizer with a mask_token; add one "
                "(tokenizer.add_special_tokens({'mask_token': ...}))"
            )
        if not 0 < self.plm_probability <= 1:
            raise ConfigError(f"plm_probability={self.plm_probability}: must be within (0, 1]")
        if (
            isinstance(self.max_span_length, bool)
            or not isinstance(self.max_span_length, int)
            or self.max_span_length < 1
        ):
            raise ConfigError(f"max_span_length={self.max_span_length!r}: must be an integer >= 1")

    def __call__(self, examples: Sequence[Any]) -> dict[str, Any]:
        if isinstance(examples[0], Mapping):
            examples = [e["input_ids"] for e in examples]
        batch = _collate_ids(examples, self.tokenizer, None)
        inputs, perm_mask, target_mapping, labels = self.torch_mask_tokens(batch)
        return {"input_ids": inputs, "perm_mask": perm_mask, "target_mapping": target_mapping, "labels": labels}

    def _masked_spans(self, rows: int, length: int) -> torch.Tensor:
        masked = torch.zeros(rows, length, dtype=torch.bool)
        for row in range(rows):
            done = 0
            while done < length:
                span = int(torch.randint(1, self.max_span_length + 1, (1,)).item())
                stretch = int(span / self.plm_probability)
                start = done + int(torch.randint(stretch - span + 1, (1,)).item())
                masked[row, start : start + span] = True
                done += stretch
        return masked

    def torch_mask_tokens(self, inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(input_ids, perm_mask, target_mapping, labels)`` for a padded batch of ids."""
        rows, length = inputs.shape
        if length % 2:
            raise InputError(
                f"DataCollatorForPermutationLanguageModeling: the batch is {length} tokens long; permutation LM needs "
                "an even length (pad or truncate the examples to an even length)"
            )
        inputs, labels = inputs.clone(), inputs.clone()
        masked = self._masked_spans(rows, length)
        target_mapping = torch.eye(length).expand(rows, length, length).clone()
        special = torch.tensor(
            [self.tokenizer.get_special_tokens_mask(r, already_has_special_tokens=True) for r in labels.tolist()],
            dtype=torch.bool,
        )
        pad_id = getattr(self.tokenizer, "pad_token_id", None)
        padding = labels.eq(pad_id) if pad_id is not None else torch.zeros_like(masked)
        masked &= ~(special | padding)
        functional = special | padding  # never predicted, and hidden from masked tokens like masked ones
        inputs[masked] = self.tokenizer.mask_token_id
        labels[~masked] = IGNORE_INDEX
        perm_mask = torch.zeros(rows, length, length)
        half = length // 2
        for row in range(rows):
            # a random order of the first half's positions, the second half permuted alike (no crossing over)
            order = torch.arange(length).reshape(2, half).T[torch.randperm(half)].T.flatten()
            order = order.masked_fill(~masked[row] & ~functional[row], -1)  # visible to all, sees no masked token
            perm_mask[row] = (order.reshape(length, 1) <= order.reshape(1, length)) & masked[row]
        return inputs.long(), perm_mask, target_mapping, labels.long()
