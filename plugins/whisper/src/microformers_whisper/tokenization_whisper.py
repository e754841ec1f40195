"""``WhisperTokenizerFast`` (also served as ``WhisperTokenizer``): byte-level BPE plus Whisper's control tokens.

Encoding with special tokens gives ``<|startoftranscript|>[<|lang|>][<|task|>][<|notimestamps|>] text
<|endoftext|>`` (``set_prefix_tokens``). Decoding drops timestamp tokens from the text unless
``decode_with_timestamps``, and ``output_offsets=True`` returns the timestamped segments, as the reference does.
Timestamp tokens (``<|0.00|>`` ...) follow ``<|notimestamps|>`` in the vocabulary.
"""

from __future__ import annotations

import re
from typing import Any

from tokenizers import processors

from microformers.errors import ConfigError, InputError
from microformers_tokenizers import PreTrainedTokenizerFast

from .languages import LANGUAGES, TASKS, TO_LANGUAGE_CODE

__all__ = ["WhisperTokenizer", "WhisperTokenizerFast"]

_TIMESTAMP = re.compile(r"<\|(\d+\.\d+)\|>")


def _as_list(token_ids: Any) -> Any:
    if hasattr(token_ids, "detach"):
        token_ids = token_ids.detach().cpu()
    if hasattr(token_ids, "tolist"):
        token_ids = token_ids.tolist()
    if isinstance(token_ids, int):
        return [token_ids]
    return [_as_list(t) if isinstance(t, (list, tuple)) or hasattr(t, "tolist") else t for t in token_ids]


class WhisperTokenizerFast(PreTrainedTokenizerFast):
    """Whisper's tokenizer: ``language`` / ``task`` / ``predict_timestamps`` choose the prefix of encoded text."""

    def __init__(
        self,
        tokenizer_object: Any = None,
        *,
        language: str | None = None,
        task: str | None = None,
        predict_timestamps: bool = False,
        **kwargs: Any,
    ) -> None:
        for name, default in (("unk_token", "<|endoftext|>"), ("bos_token", "<|endoftext|>"),
                              ("eos_token", "<|endoftext|>")):  # fmt: skip
            kwargs.setdefault(name, default)
        super().__init__(tokenizer_object, **kwargs)
        self.language = language
        self.task = task
        self.predict_timestamps = bool(predict_timestamps)
        self.set_prefix_tokens()

    # -- the prompt the decoder starts from ------------------------------------------------------------
    def _required_id(self, token: str) -> int:
        token_id = self._tokenizer.token_to_id(token)
        if token_id is None:
            raise ConfigError(
                f"this tokenizer has no {token} token; a Whisper tokenizer.json needs Whisper's special tokens "
                "(<|startoftranscript|>, the language tokens, <|transcribe|>, <|translate|>, <|notimestamps|>)"
            )
        return token_id

    @property
    def prefix_tokens(self) -> list[int]:
        """``<|startoftranscript|>``, then the language, the task and ``<|notimestamps|>`` as configured."""
        start = self._required_id("<|startoftranscript|>")
        prefix = [start]
        if self.language is not None:
            language = self.language.lower()
            code = TO_LANGUAGE_CODE.get(language, language if language in LANGUAGES else None)
            if code is None:
                raise InputError(
                    f"language={self.language!r} is not a Whisper language; use a code such as 'en' or a name such "
                    f"as 'english' (codes: {', '.join(LANGUAGES)})"
                )
            self.language = language
            prefix.append(start + 1 + list(LANGUAGES).index(code))
        if self.task is not None:
            if self.task not in TASKS:
                raise InputError(f"task={self.task!r} is not a Whisper task; use one of {list(TASKS)}")
            prefix.append(self._required_id(f"<|{self.task}|>"))
        if not self.predict_timestamps:
            prefix.append(self._required_id("<|notimestamps|>"))
        return prefix

    def set_prefix_tokens(
        self, language: str | None = None, task: str | None = None, predict_timestamps: bool | None = None
    ) -> None:
        """Change (the given parts of) the prefix that encoding with special tokens puts before the text."""
        self.language = language if language is not None else self.language
        self.task = task if task is not None else self.task
        self.predict_timestamps = self.predict_timestamps if predict_timestamps is None else bool(predict_timestamps)
        if self._tokenizer.token_to_id("<|startoftranscript|>") is None:
            return  # not a full Whisper vocabulary: plain text encoding only
        ids = self.prefix_tokens
        tokens = [self._tokenizer.id_to_token(i) for i in ids]
        eos = str(self.eos_token)
        template = " ".join(f"{token}:0" for token in tokens)
        self._tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{template} $A:0 {eos}:0",
            pair=f"{template} $A:0 $B:1 {eos}:1",
            special_tokens=[(eos, self.eos_token_id), *zip(tokens, ids)],
        )

    def get_decoder_prompt_ids(
        self, task: str | None = None, language: str | None = None, no_timestamps: bool = True
    ) -> list[tuple[int, int]]:
        """``[(1, <|lang|>), (2, <|task|>), (3, <|notimestamps|>)]``: the forced tokens after the start token."""
        self.set_prefix_tokens(task=task, language=language, predict_timestamps=not no_timestamps)
        return list(enumerate(self.prefix_tokens[1:], start=1))

    def get_prompt_ids(self, text: str, return_tensors: str | None = "np") -> Any:
        """``<|startofprev|>`` and the text: the ``prompt_ids`` that ``generate`` conditions on."""
        ids = [self._required_id("<|startofprev|>")]
        ids += self._tokenizer.encode(" " + text.strip(), add_special_tokens=False).ids
        first_special = min(self.all_special_ids) if self.all_special_ids else None
        bad = next((i for i in ids[1:] if first_special is not None and i >= first_special), None)
        if bad is not None:
            raise InputError(
                f"the prompt text holds the special token {self._tokenizer.id_to_token(bad)!r}; pass plain text"
            )
        if return_tensors == "np":
            import numpy as np

            return np.asarray(ids)
        if return_tensors == "pt":
            import torch

            return torch.tensor(ids)
        return ids

    # -- decoding -------------------------------------------------------------------------------------
    @property
    def timestamp_begin(self) -> int:
        """The id of ``<|0.00|>``: the token after ``<|notimestamps|>``."""
        return self._required_id("<|notimestamps|>") + 1

    def _strip_prompt(self, token_ids: list[int]) -> list[int]:
        """Drop a ``<|startofprev|>`` prompt: everything before ``<|startoftranscript|>``."""
        prev = self._tokenizer.token_to_id("<|startofprev|>")
        start = self._tokenizer.token_to_id("<|startoftranscript|>")
        if not token_ids or prev is None or token_ids[0] != prev:
            return token_ids
        return token_ids[token_ids.index(start) :] if start in token_ids else []

    def _decode_with_timestamps(
        self, token_ids: list[int], skip_special_tokens: bool = False, time_precision: float = 0.02,
        segment_size: int = 1500,
    ) -> str:  # fmt: skip
        """Text with ``<|t|>`` marks where the timestamp tokens were; times keep rising across 30 s windows."""
        begin = self.timestamp_begin
        parts: list[Any] = [[]]
        current = previous = offset = 0.0
        for index, token in enumerate(token_ids):
            if token < begin:
                parts[-1].append(token)
                continue
            time = float((token - begin) * time_precision)
            if time < current:  # a new 30 s window began
                single_ending = index >= 2 and not (token_ids[index - 1] >= begin and token_ids[index - 2] >= begin)
                if single_ending:
                    offset += time_precision * segment_size
                else:
                    current = previous
                    offset += previous
                    parts = parts[:-2]
            previous, current = current, time
            parts += [f"<|{(time + offset):.2f}|>", []]
        return "".join(
            part if isinstance(part, str)
            else (super(WhisperTokenizerFast, self).decode(part, skip_special_tokens=skip_special_tokens) if part else "")
            for part in parts
        )  # fmt: skip

    def _compute_offsets(
        self, token_ids: list[int], time_precision: float = 0.02, segment_size: int = 1500
    ) -> list[dict[str, Any]]:
        """``[{"text", "timestamp": (start, end)}]`` for each pair of timestamp tokens around text."""
        begin = self.timestamp_begin
        is_time = [t >= begin for t in token_ids]
        times_at = [i for i, flag in enumerate(is_time) if flag]
        cuts = [i + 1 for i in range(len(token_ids) - 1) if is_time[i] and is_time[i + 1]]
        if not cuts and len(times_at) <= 1:
            return []
        if times_at[-1] + 1 not in cuts:
            cuts.append(times_at[-1] + 1)
        offsets: list[dict[str, Any]] = []
        start_at, current, offset = times_at[0], 0, 0
        for cut in cuts:
            piece = token_ids[start_at:cut]
            if len(piece) > 1:
                start, end = piece[0] - begin, piece[-1] - begin
                if start < current:
                    single_ending = start_at >= 2 and not (
                        token_ids[start_at - 2] >= begin and token_ids[start_at - 1] >= begin
                    )
                    offset += segment_size if single_ending else current
                current = end
                text = _TIMESTAMP.sub("", super().decode(piece))
                offsets.append({
                    "text": text,
                    "timestamp": (start * time_precision + offset * time_precision,
                                  end * time_precision + offset * time_precision),
                })  # fmt: skip
            start_at = cut
        return offsets

    def decode(  # type: ignore[override]
        self,
        token_ids: Any,
        skip_special_tokens: bool = False,
        clean_up_tokenization_spaces: bool | None = None,
        output_offsets: bool = False,
        time_precision: float = 0.02,
        decode_with_timestamps: bool = False,
        normalize: bool = False,
        basic_normalize: bool = False,
        remove_diacritics: bool = False,
        **kwargs: Any,
    ) -> Any:
        """Ids to text without timestamp tokens; ``decode_with_timestamps`` marks them, ``output_offsets`` returns
        ``{"text", "offsets"}``. ``skip_special_tokens`` also drops a ``<|startofprev|>`` prompt."""
        if normalize or basic_normalize:
            raise InputError(
                "normalize / basic_normalize (Whisper's English and basic text normalisers) are not available in "
                "microformers; decode without them and normalise the text yourself"
            )
        ids = _as_list(token_ids)
        if isinstance(ids, dict):
            ids = _as_list(ids["input_ids"])
        if ids and isinstance(ids[0], list):
            return [
                self.decode(row, skip_special_tokens, clean_up_tokenization_spaces, output_offsets, time_precision,
                            decode_with_timestamps)
                for row in ids
            ]  # fmt: skip
        kept = self._strip_prompt(ids) if skip_special_tokens else ids
        if decode_with_timestamps:
            text = self._decode_with_timestamps(kept, skip_special_tokens, time_precision)
        else:
            text = _TIMESTAMP.sub("", super().decode(kept, skip_special_tokens, clean_up_tokenization_spaces))
        if output_offsets:
            return {"text": text, "offsets": self._compute_offsets(ids, time_precision)}
        return text

    def batch_decode(  # type: ignore[override]
        self, sequences: Any, skip_special_tokens: bool = False, clean_up_tokenization_spaces: bool | None = None,
        **kwargs: Any,
    ) -> list[Any]:  # fmt: skip
        """``decode`` for each row."""
        return [self.decode(row, skip_special_tokens, clean_up_tokenization_spaces, **kwargs)
                for row in _as_list(sequences)]  # fmt: skip

    def decode_asr(
        self,
        outputs: list[dict[str, Any]],
        *,
        return_timestamps: bool | str = False,
        return_language: bool = False,
        time_precision: float = 0.02,
    ) -> dict[str, Any]:
        """The speech-recognition pipeline's result from its generated rows in order (``{"tokens",
        "token_timestamps", "stride"}`` each): ``{"text"}``, plus ``"chunks"`` (segments, or words with
        ``return_timestamps="word"``) when timestamps or the language are asked for. See
        :mod:`microformers_whisper.asr_chunks`."""
        from .asr_chunks import decode_asr

        rows = []
        for output in outputs:
            row = {"tokens": [int(t) for t in _as_list(output["tokens"])]}
            if output.get("token_timestamps") is not None:
                row["token_timestamps"] = [float(t) for t in _as_list(output["token_timestamps"])]
            elif return_timestamps == "word":
                raise InputError("decode_asr(return_timestamps='word') needs each output's token_timestamps")
            if output.get("stride") is not None:
                row["stride"] = tuple(output["stride"])
            rows.append(row)
        return decode_asr(
            self, rows, return_timestamps=return_timestamps, return_language=return_language,
            time_precision=time_precision,
        )  # fmt: skip

    # -- saving ---------------------------------------------------------------------------------------
    def _config_to_save(self) -> dict[str, Any]:
        config = super()._config_to_save()
        config.update(
            tokenizer_class="WhisperTokenizer",
            language=self.language,
            task=self.task,
            predict_timestamps=self.predict_timestamps,
        )
        return config


WhisperTokenizer = WhisperTokenizerFast
