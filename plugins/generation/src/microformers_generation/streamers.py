"""Streamers: receive token ids as ``generate`` produces them and turn them into text.

``generate`` calls ``streamer.put(prompt_ids)`` once, then ``put(new_ids)`` after every step and
``end()`` when done. Text streamers decode with ``tokenizer.decode(ids, **decode_kwargs)`` only and
emit text once it is final: complete characters only (a token that ends inside a multi-byte UTF-8
character decodes to U+FFFD and is held back), and up to the last space, so that detokenizers which
merge or clean up around word boundaries never change text that was already emitted. Newlines
flush; ideographic scripts (no spaces between words) emit at once.
"""

from __future__ import annotations

from queue import Queue
from typing import Any

from microformers import GenerationError

_INCOMPLETE = "\ufffd"
# Scripts written without spaces: a character there is a safe boundary.
_NO_SPACE_RANGES = (
    (0x3000, 0x30FF),  # CJK punctuation, hiragana, katakana
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xF900, 0xFAFF),
    (0xFF00, 0xFFEF),  # full-width forms
    (0x20000, 0x2FA1F),
)


def _is_no_space_char(char: str) -> bool:
    code = ord(char)
    return any(low <= code <= high for low, high in _NO_SPACE_RANGES)


class BaseStreamer:
    """Interface ``generate`` calls: ``put(token_ids)`` then ``end()``."""

    def put(self, value: Any) -> None:
        raise NotImplementedError

    def end(self) -> None:
        raise NotImplementedError


class TextStreamer(BaseStreamer):
    """Prints decoded text to stdout as it becomes final (batch size 1).

    ``skip_prompt=True`` leaves the prompt out; other keyword arguments go to ``tokenizer.decode``
    (e.g. ``skip_special_tokens=True``).
    """

    def __init__(self, tokenizer: Any, skip_prompt: bool = False, **decode_kwargs: Any) -> None:
        self.tokenizer = tokenizer
        self.skip_prompt = skip_prompt
        self.decode_kwargs = decode_kwargs
        self.token_cache: list[int] = []
        self.print_len = 0
        self.next_tokens_are_prompt = True

    def put(self, value: Any) -> None:
        if getattr(value, "dim", None) is not None and value.dim() > 1:
            if value.shape[0] > 1:
                raise GenerationError(
                    f"{type(self).__name__} streams one sequence, but generate produced a batch of {value.shape[0]}; "
                    "stream a batch of 1 (and num_return_sequences=1)"
                )
            value = value[0]
        if self.skip_prompt and self.next_tokens_are_prompt:
            self.next_tokens_are_prompt = False
            return
        self.next_tokens_are_prompt = False
        self.token_cache.extend(int(t) for t in value.tolist())
        text = self.tokenizer.decode(self.token_cache, **self.decode_kwargs)
        if text.endswith("\n"):
            printable = text[self.print_len :]
            self.token_cache = []
            self.print_len = 0
        else:
            final = len(text.rstrip(_INCOMPLETE))
            if final and _is_no_space_char(text[final - 1]):
                end = final
            else:
                end = text.rfind(" ", 0, final) + 1
            printable = text[self.print_len : end] if end > self.print_len else ""
            self.print_len = max(self.print_len, end)
        self.on_finalized_text(printable)

    def end(self) -> None:
        printable = ""
        if self.token_cache:
            text = self.tokenizer.decode(self.token_cache, **self.decode_kwargs)
            printable = text[self.print_len :]
        self.token_cache = []
        self.print_len = 0
        self.next_tokens_are_prompt = True
        self.on_finalized_text(printable, stream_end=True)

    def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
        """Where final text goes; prints it (override to send it elsewhere)."""
        print(text, flush=True, end="" if not stream_end else None)


class TextIteratorStreamer(TextStreamer):
    """Makes the text available as an iterator, for consumption from another thread::

        streamer = TextIteratorStreamer(tokenizer, skip_prompt=True)
        Thread(target=model.generate, kwargs={**inputs, "streamer": streamer}).start()
        for piece in streamer: ...

    ``timeout`` (seconds) bounds each wait; ``queue.Empty`` is raised when it passes.
    """

    def __init__(self, tokenizer: Any, skip_prompt: bool = False, timeout: float | None = None, **decode_kwargs: Any):
        super().__init__(tokenizer, skip_prompt, **decode_kwargs)
        self.text_queue: Queue[str | None] = Queue()
        self.stop_signal = None
        self.timeout = timeout

    def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
        if text:
            self.text_queue.put(text, timeout=self.timeout)
        if stream_end:
            self.text_queue.put(self.stop_signal, timeout=self.timeout)

    def __iter__(self) -> TextIteratorStreamer:
        return self

    def __next__(self) -> str:
        value = self.text_queue.get(timeout=self.timeout)
        if value is self.stop_signal:
            raise StopIteration
        return value
