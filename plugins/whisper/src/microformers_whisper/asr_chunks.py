"""The speech-recognition pipeline's ``chunks`` from Whisper's outputs: segments or words, with times and language.

One pass over the generated tokens: a language token names the language of what follows; a timestamp token opens
a segment, the next one (at a different time) closes it; text tokens collect in between. Times keep rising across
30 s windows of long-form output (a timestamp lower than the one before starts a window, which begins where the
last complete segment ended, or 30 s later after a lone closing timestamp). Text after the last closing timestamp
becomes a segment of its own, its end (and its start, when no timestamp opened it) ``None``, as the reference
pipeline reports it. Several overlapping pieces of one recording (the pipeline's ``chunk_length_s``) are read in
order, their times shifted by their strides and their text joined where it overlaps.

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

__all__ = ["decode_asr", "merge_overlaps", "words_of"]

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


def merge_overlaps(
    sequences: list[list[int]], spans: list[list[tuple[float, float]]] | None = None
) -> tuple[list[int], list[tuple[float, float]]]:
    """Join the token sequences of overlapping windows (and their token time spans alike): each next one is
    aligned to the end of what came before at the offset with the largest share of equal tokens (more than one;
    with spans, equal tokens whose span does not go back in time), ties to longer overlaps, and the two are cut in
    the middle of that overlap."""
    left = list(sequences[0])
    left_spans = list(spans[0]) if spans else []
    merged: list[int] = []
    merged_spans: list[tuple[float, float]] = []
    for index, right in enumerate(sequences[1:], start=1):
        best, cut = 0.0, (len(left), len(left), 0, 0)
        for shift in range(1, len(left) + len(right)):
            left_start, left_stop = max(0, len(left) - shift), min(len(left), len(left) + len(right) - shift)
            right_start, right_stop = max(0, shift - len(left)), min(len(right), shift)
            pairs = range(left_stop - left_start)
            if spans:
                matches = sum(
                    1
                    for k in pairs
                    if left[left_start + k] == right[right_start + k]
                    and left_spans[left_start + k] <= spans[index][right_start + k]
                )
            else:
                matches = sum(1 for k in pairs if left[left_start + k] == right[right_start + k])
            score = matches / shift + shift / 10000.0
            if matches > 1 and score > best:
                best, cut = score, (left_start, left_stop, right_start, right_stop)
        left_middle, right_middle = (cut[0] + cut[1]) // 2, (cut[2] + cut[3]) // 2
        merged += left[:left_middle]
        left = list(right[right_middle:])
        if spans:
            merged_spans += left_spans[:left_middle]
            left_spans = list(spans[index][right_middle:])
    return merged + left, merged_spans + left_spans


def decode_asr(
    tokenizer: Any,
    outputs: Sequence[dict[str, Any]],
    *,
    return_timestamps: bool | str = False,
    return_language: bool = False,
    time_precision: float = 0.02,
    segment_size: int = 1500,
) -> dict[str, Any]:
    """``{"text"}`` and, with timestamps or language asked for, ``"chunks"``: segments ``{"text", "timestamp"}``
    (``"language"`` with ``return_language``), or words when ``return_timestamps="word"``.

    ``outputs``: the generated rows in order, each ``{"tokens": [...]}`` with ``"token_timestamps"`` (one time per
    token, for words) and, for overlapping pieces of one recording, ``"stride": (length, left, right)`` in seconds.
    Timestamps inside a piece's strides are not cut at (the neighbour sees that audio with more context); the
    pieces' text between cuts is joined where it overlaps.
    """
    word_level = return_timestamps == "word"
    timestamp_begin = tokenizer.timestamp_begin
    special = set(tokenizer.all_special_ids)
    language: str | None = None
    chunks: list[dict[str, Any]] = []

    def new_chunk() -> dict[str, Any]:
        return {"language": language, "timestamp": [None, None], "text": ""}

    def close(chunk: dict[str, Any], pieces: list[list[int]], piece_spans: list[list[tuple[float, float]]]) -> None:
        tokens, spans = merge_overlaps(pieces, piece_spans if word_level else None)
        chunk["text"] = tokenizer.decode(tokens)
        if word_level:
            chunk["words"] = [
                {
                    "text": word,
                    "timestamp": (spans[indices[0]][0], spans[indices[-1]][1]),
                    **({"language": language} if return_language else {}),
                }
                for word, indices in words_of(tokenizer, tokens, language)
            ]
        chunks.append(chunk)

    chunk = new_chunk()
    pieces: list[list[int]] = []  # text of the open chunk, one list per output
    piece_spans: list[list[tuple[float, float]]] = []
    time_offset, skip = 0.0, False
    for output in outputs:
        tokens = tokenizer._strip_prompt([int(t) for t in output["tokens"]])
        times = output.get("token_timestamps")
        last_timestamp, first_timestamp = None, float(timestamp_begin)
        window_max, before_max, windows_before = 0.0, 0.0, 0.0
        stride = output.get("stride")
        if stride is not None:
            length, left, right = stride
            time_offset -= left
            if left:
                first_timestamp = left / time_precision + timestamp_begin
            if right:
                # the last timestamp of the right stride and those after it are not cut at
                for token in reversed(tokens):
                    if token >= timestamp_begin:
                        if last_timestamp is not None and (token - timestamp_begin) * time_precision < length - right:
                            break
                        last_timestamp = token
        text_tokens: list[int] = []
        spans: list[tuple[float, float]] = []
        for index, token in enumerate(tokens):
            if token in special:
                name = LANGUAGES.get(tokenizer.decode([token])[2:-2])
                if name is not None:
                    if language and name != language and not return_timestamps:
                        close(chunk, [*pieces, text_tokens], [])
                        pieces, text_tokens = [], []
                        chunk = new_chunk()
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
                time = round((token - timestamp_begin) * time_precision + time_offset + windows_before, 2)
                if last_timestamp and token >= last_timestamp:
                    skip = True  # in the right stride: this one and the next (a pair) are not cut at
                elif skip or (pieces and token < first_timestamp):
                    skip = False
                elif chunk["timestamp"][0] is None:
                    chunk["timestamp"][0] = time
                elif time != chunk["timestamp"][0]:  # equal: a repeated opening timestamp, still the start
                    chunk["timestamp"][1] = time
                    close(chunk, [*pieces, text_tokens], [*piece_spans, spans])
                    pieces, piece_spans, text_tokens, spans = [], [], [], []
                    chunk = new_chunk()
            else:
                text_tokens.append(token)
                if word_level:
                    start = 0.0 if index == 0 else times[index - 1]
                    spans.append((round(start + time_offset, 2), round(times[index] + time_offset, 2)))
        if stride is not None:
            time_offset += stride[0] - stride[2]
        if text_tokens:
            pieces.append(text_tokens)
            piece_spans.append(spans)
        elif not any(pieces):
            chunk, pieces, piece_spans = new_chunk(), [], []
    if pieces:
        close(chunk, pieces, piece_spans)
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
