"""``BatchEncoding``: what calling a tokenizer returns."""

from __future__ import annotations

from typing import Any, NamedTuple

from microformers.errors import ConfigError

TENSOR_TYPES = ("pt", "np")


class CharSpan(NamedTuple):
    """A character span ``[start, end)`` in the original string."""

    start: int
    end: int


class TokenSpan(NamedTuple):
    """A token span ``[start, end)`` in the encoded sequence."""

    start: int
    end: int


def _to_numpy(value: Any, key: str) -> Any:
    import numpy as np

    if isinstance(value, np.ndarray):
        return value
    if _is_torch_tensor(value):
        return value.numpy()
    if isinstance(value, list | tuple) and value and isinstance(value[0], list | tuple):
        lengths = {len(row) for row in value}
        if len(lengths) > 1:
            raise _ragged_error(key)
    array = np.asarray(value)
    if array.size == 0:
        array = array.astype(np.int64)
    return array


def _to_torch(value: Any, key: str) -> Any:
    import numpy as np
    import torch

    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value)
    if isinstance(value, list | tuple) and value and isinstance(value[0], list | tuple):
        lengths = {len(row) for row in value}
        if len(lengths) > 1:
            raise _ragged_error(key)
    if isinstance(value, list | tuple) and value and isinstance(value[0], np.ndarray):
        return torch.from_numpy(np.stack(value))
    try:
        return torch.tensor(value, dtype=torch.int64 if _is_empty(value) else None)
    except (TypeError, ValueError) as exc:
        raise _ragged_error(key) from exc


def _is_empty(value: Any) -> bool:
    if isinstance(value, list | tuple):
        return all(_is_empty(v) for v in value)
    return False


def _is_torch_tensor(value: Any) -> bool:
    import sys

    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def _ragged_error(key: str) -> ConfigError:
    return ConfigError(
        f"cannot build a tensor from '{key}': the sequences have different lengths. "
        "Pass padding=True (and truncation=True for inputs longer than the model accepts) "
        "so every row has the same length, or leave return_tensors=None to get lists."
    )


def check_tensor_type(tensor_type: Any) -> str | None:
    """Validate ``return_tensors``; returns ``"pt"``, ``"np"`` or ``None``."""
    if tensor_type is None:
        return None
    name = getattr(tensor_type, "value", tensor_type)
    if name not in TENSOR_TYPES:
        raise ConfigError(
            f"return_tensors={tensor_type!r} is not supported: use 'pt' (PyTorch), 'np' (NumPy) or None (lists)."
        )
    return name


class BatchEncoding(dict):
    """The output of a tokenizer: a dict of ``input_ids``, ``attention_mask`` ... with attribute access.

    ``encodings`` keeps the ``tokenizers.Encoding`` of every row, which is what ``word_ids()``,
    ``tokens()``, ``char_to_token()`` and friends read. Indexing with an integer returns that row's
    ``Encoding``; with a slice, the dict restricted to those rows.
    """

    def __init__(
        self,
        data: dict[str, Any] | None = None,
        encoding: Any = None,
        tensor_type: str | None = None,
        prepend_batch_axis: bool = False,
        n_sequences: int | None = None,
    ) -> None:
        super().__init__(data or {})
        if encoding is not None and not isinstance(encoding, list | tuple):
            encoding = [encoding]
        self._encodings: list[Any] | None = list(encoding) if encoding is not None else None
        if n_sequences is None and self._encodings:
            n_sequences = self._encodings[0].n_sequences
        self._n_sequences = n_sequences
        self.convert_to_tensors(tensor_type, prepend_batch_axis=prepend_batch_axis)

    # -- dict with attributes --------------------------------------------------------------
    def __getattr__(self, item: str) -> Any:
        if item.startswith("__"):
            raise AttributeError(item)
        try:
            return self[item]
        except KeyError:
            raise AttributeError(f"'BatchEncoding' has no attribute or key {item!r}") from None

    def __getitem__(self, item: Any) -> Any:
        if isinstance(item, str):
            return dict.__getitem__(self, item)
        if isinstance(item, int) and self._encodings is not None:
            return self._encodings[item]
        if isinstance(item, slice):
            return {key: value[item] for key, value in self.items()}
        raise KeyError(
            f"BatchEncoding keys are strings ('input_ids', ...), integer row indices (giving the row's Encoding) "
            f"or slices; got {item!r}"
        )

    def __getstate__(self) -> dict[str, Any]:
        return {"data": dict(self), "encodings": self._encodings, "n_sequences": self._n_sequences}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.update(state.get("data", {}))
        self._encodings = state.get("encodings")
        self._n_sequences = state.get("n_sequences")

    def __reduce__(self) -> tuple[Any, ...]:
        return (BatchEncoding, (), self.__getstate__())

    @property
    def data(self) -> dict[str, Any]:
        return dict(self)

    @property
    def encodings(self) -> list[Any] | None:
        """The ``tokenizers.Encoding`` of every row, or ``None`` when built from plain lists."""
        return self._encodings

    @property
    def n_sequences(self) -> int | None:
        """1 for single sequences, 2 for pairs, ``None`` when unknown."""
        return self._n_sequences

    @property
    def is_fast(self) -> bool:
        return self._encodings is not None

    # -- tensors ---------------------------------------------------------------------------
    def convert_to_tensors(self, tensor_type: str | None = None, prepend_batch_axis: bool = False) -> BatchEncoding:
        """Turn every value into a ``torch.Tensor`` (``"pt"``) or ``numpy.ndarray`` (``"np"``) in place."""
        kind = check_tensor_type(tensor_type)
        if kind is None:
            return self
        convert = _to_torch if kind == "pt" else _to_numpy
        for key, value in list(self.items()):
            if prepend_batch_axis:
                value = [value]
            self[key] = convert(value, key)
        return self

    def to(self, device: Any, *, non_blocking: bool = False) -> BatchEncoding:
        """Move every tensor value to ``device`` (PyTorch only); other values are left as they are."""
        for key, value in list(self.items()):
            if _is_torch_tensor(value):
                self[key] = value.to(device=device, non_blocking=non_blocking)
        return self

    # -- alignment helpers (need encodings) -----------------------------------------------
    def _encoding(self, batch_index: int) -> Any:
        if self._encodings is None:
            raise ConfigError(
                "this BatchEncoding carries no tokenizers.Encoding (it was built from plain lists, e.g. by pad()); "
                "call the tokenizer on text to get word/char alignment."
            )
        return self._encodings[batch_index]

    def tokens(self, batch_index: int = 0) -> list[str]:
        return self._encoding(batch_index).tokens

    def sequence_ids(self, batch_index: int = 0) -> list[int | None]:
        return self._encoding(batch_index).sequence_ids

    def word_ids(self, batch_index: int = 0) -> list[int | None]:
        return self._encoding(batch_index).word_ids

    def words(self, batch_index: int = 0) -> list[int | None]:
        return self.word_ids(batch_index)

    def _split_index(self, batch_or_index: int, index: int | None) -> tuple[int, int]:
        if index is None:
            return 0, batch_or_index
        return batch_or_index, index

    def token_to_sequence(self, batch_or_token_index: int, token_index: int | None = None) -> int:
        batch, token = self._split_index(batch_or_token_index, token_index)
        encoding = self._encoding(batch)
        token = token if token >= 0 else len(encoding.ids) + token
        return encoding.token_to_sequence(token)

    def token_to_word(self, batch_or_token_index: int, token_index: int | None = None) -> int | None:
        batch, token = self._split_index(batch_or_token_index, token_index)
        encoding = self._encoding(batch)
        token = token if token >= 0 else len(encoding.ids) + token
        return encoding.token_to_word(token)

    def token_to_chars(self, batch_or_token_index: int, token_index: int | None = None) -> CharSpan | None:
        batch, token = self._split_index(batch_or_token_index, token_index)
        span = self._encoding(batch).token_to_chars(token)
        return CharSpan(*span) if span is not None else None

    def char_to_token(
        self, batch_or_char_index: int, char_index: int | None = None, sequence_index: int = 0
    ) -> int | None:
        batch, char = self._split_index(batch_or_char_index, char_index)
        return self._encoding(batch).char_to_token(char, sequence_index)

    def word_to_tokens(
        self, batch_or_word_index: int, word_index: int | None = None, sequence_index: int = 0
    ) -> TokenSpan | None:
        batch, word = self._split_index(batch_or_word_index, word_index)
        span = self._encoding(batch).word_to_tokens(word, sequence_index)
        return TokenSpan(*span) if span is not None else None

    def word_to_chars(
        self, batch_or_word_index: int, word_index: int | None = None, sequence_index: int = 0
    ) -> CharSpan | None:
        batch, word = self._split_index(batch_or_word_index, word_index)
        span = self._encoding(batch).word_to_chars(word, sequence_index)
        return CharSpan(*span) if span is not None else None

    def char_to_word(
        self, batch_or_char_index: int, char_index: int | None = None, sequence_index: int = 0
    ) -> int | None:
        batch, char = self._split_index(batch_or_char_index, char_index)
        return self._encoding(batch).char_to_word(char, sequence_index)


def to_python(value: Any) -> Any:
    """Tensors and arrays to (nested) Python lists / ints; anything else unchanged."""
    if hasattr(value, "tolist") and not isinstance(value, list | tuple | str):
        return value.tolist()
    if isinstance(value, list | tuple) and value and hasattr(value[0], "tolist"):
        return [to_python(v) for v in value]
    return value
