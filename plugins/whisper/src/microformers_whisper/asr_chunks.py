"""The speech-recognition pipeline's ``chunks`` from one Whisper output: segments or words, with times and language.

One pass over the generated tokens: a language token names the language of what follows; a timestamp token opens
a segment, the next one (at a different time) closes it; text tokens collect in between. Times keep rising across
30 s windows of long-form output (a timestamp lower than the one before starts a window, which begins where the
last complete segment ended, or 30 s later after a lone closing timestamp). Text after the last closing timestamp
becomes a segment of its own, its end unknown (``None``), as the reference pipeline reports it.

Words (``return_timestamps="word"``) group the text tokens of each segment: a word starts at a token that decodes
with a leading space or is punctuation, and runs until the next such token (tokens that decode to part of a UTF-8
character stay with their neighbours); opening punctuation joins the word after it and closing punctuation the word
before. A token's time span runs from the previous token's time to its own (the generate's token timestamps); a
word's from its first token's start to its last token's end.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .languages import LANGUAGES

__all__ = ["decode_asr", "words_of"]

_OPENING = "\"'“¡¿([{-"
_CLOSING = "\"'.。,，!！?？:：”)]}、"
_PUNCTUATION = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
_NO_SPACES = {"chinese", "japanese", "thai", "lao", "myanmar", "cantonese"}
_REPLACEMENT = "\ufffd"


def _pieces_on_characters(tokenizer: Any, tokens: list[int]) -> list[tuple[str, list[int]]]:
    """Runs of tokens that decode to whole characters: ``(text, token indices)``."""
    whole = tokenizer.decode(tokens, decode_with_timestamps=True)
    pieces, current, offset = [], [], 0
    for index in range(len(tokens)):
        current.append(index)
        text = tokenizer.decode([tokens[i] for i in current], decode_with_timestamps=True)
        broken = text.find(_REPLACEMENT)
        # a replacement character that is in the full text too is a real one, not half a character
        if broken < 0 or offset + broken >= len(whole) or whole[offset + broken] == _REPLACEMENT:
            pieces.append((text, current))
            current, offset = [], offset + len(text)
    return pieces


def words_of(tokenizer: Any, tokens: list[int], language: str | None = None) -> list[tuple[str, list[int]]]:
    """``(word, token indices)`` for text tokens: split at spaces and punctuation (at every character for languages
    written without spaces), punctuation merged into its word."""
    language = language or getattr(tokenizer, "language", None) or "english"
    pieces = _pieces_on_characters(tokenizer, tokens)
    if language in _NO_SPACES:
        words = [(text, list(indices)) for text, indices in pieces]
    else:
        words = []
        eos = tokenizer.eos_token_id
        for text, indices in pieces:
            starts_word = tokens[indices[0]] >= eos or text.startswith(" ") or text.strip() in _PUNCTUATION
            if starts_word or not words:
                words.append((text, list(indices)))
            else:
                words[-1] = (words[-1][0] + text, words[-1][1] + indices)
    texts, spans = [w[0] for w in words], [w[1] for w in words]
    # opening punctuation (with its leading space) goes to the word after it, scanning from the end
    after = len(texts) - 1
    for at in range(len(texts) - 2, -1, -1):
        if texts[at].startswith(" ") and texts[at].strip() in _OPENING:
            texts[after], spans[after] = texts[at] + texts[after], spans[at] + spans[after]
            texts[at], spans[at] = "", []
        else:
            after = at
    # closing punctuation goes to the word before it
    before = 0
    for at in range(1, len(texts)):
        if not texts[before].endswith(" ") and texts[at] in _CLOSING:
            texts[before], spans[before] = texts[before] + texts[at], spans[before] + spans[at]
            texts[at], spans[at] = "", []
        else:
            before = at
    return [(text, span) for text, span in zip(texts, spans) if text and span]


def decode_asr(
    tokenizer: Any,
    tokens: Sequence[int],
    token_timestamps: Sequence[float] | None = None,
    *,
    return_timestamps: bool | str = False,
    return_language: bool = False,
    time_precision: float = 0.02,
    segment_size: int = 1500,
) -> dict[str, Any]:
    """``{"text"}`` and, with timestamps or language asked for, ``"chunks"``: segments ``{"text", "timestamp"}``
    (``"language"`` with ``return_language``), or words when ``return_timestamps="word"`` (which needs the
    generate's ``token_timestamps``, one per token)."""
    tokens = tokenizer._strip_prompt(list(tokens))
    word_level = return_timestamps == "word"
    timestamp_begin = tokenizer.timestamp_begin
    special = set(tokenizer.all_special_ids)
    language: str | None = None
    chunks: list[dict[str, Any]] = []

    def new_chunk() -> dict[str, Any]:
        return {"language": language, "timestamp": [None, None], "text": ""}

    chunk = new_chunk()
    text_tokens: list[int] = []
    spans: list[tuple[float, float]] = []

    def close(chunk: dict[str, Any]) -> None:
        chunk["text"] = tokenizer.decode(text_tokens)
        if word_level:
            chunk["words"] = [
                {
                    "text": word,
                    "timestamp": (spans[indices[0]][0], spans[indices[-1]][1]),
                    **({"language": language} if return_language else {}),
                }
                for word, indices in words_of(tokenizer, text_tokens, language)
            ]
        chunks.append(chunk)

    window_max, before_max, windows_before = 0.0, 0.0, 0.0
    for index, token in enumerate(tokens):
        if token in special:
            name = LANGUAGES.get(tokenizer.decode([token])[2:-2])
            if name is not None:
                chunk["language"] = language = name
        elif token >= timestamp_begin:
            time = float((token - timestamp_begin) * time_precision)
            if time < window_max:  # the next window's first timestamp
                lone_ending = index >= 2 and not (
                    tokens[index - 1] >= timestamp_begin and tokens[index - 2] >= timestamp_begin
                )
                if lone_ending:
                    windows_before += time_precision * segment_size
                else:
                    window_max = before_max
                    windows_before += before_max
            before_max, window_max = window_max, time
            time = round((token - timestamp_begin) * time_precision + windows_before, 2)
            if chunk["timestamp"][0] is None:
                chunk["timestamp"][0] = time
            elif time != chunk["timestamp"][0]:  # equal: a repeated opening timestamp, still the start
                chunk["timestamp"][1] = time
                close(chunk)
                text_tokens, spans = [], []
                chunk = new_chunk()
        else:
            text_tokens.append(token)
            if word_level:
                start = 0.0 if index == 0 else token_timestamps[index - 1]
                spans.append((round(start, 2), round(token_timestamps[index], 2)))
    if text_tokens:
        close(chunk)
    result: dict[str, Any] = {"text": "".join(item["text"] for item in chunks)}
    if not (return_timestamps or return_language):
        return result
    for item in chunks:
        if return_timestamps:
            item["timestamp"] = tuple(item["timestamp"])
        else:
            item.pop("timestamp")
        if not return_language:
            item.pop("language")
    if word_level:
        result["chunks"] = [word for item in chunks for word in item["words"]]
    else:
        result["chunks"] = chunks
    return result
