from __future__ import annotations

import threading
from typing import Any

import pytest
import torch

from microformers import GenerationError, TextIteratorStreamer, TextStreamer


def feed(streamer, tokenizer, prompt: str, pieces: list[bytes]) -> None:
    streamer.put(torch.tensor([tokenizer.encode(prompt)]))
    for piece in pieces:
        for byte in piece:
            streamer.put(torch.tensor([byte]))
    streamer.end()


def test_text_streamer_prints_complete_words_and_characters(byte_tokenizer, capsys):
    class Recording(TextStreamer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.emitted: list[str] = []

        def on_finalized_text(self, text, stream_end=False):
            self.emitted.append(text)
            super().on_finalized_text(text, stream_end)

    streamer = Recording(byte_tokenizer, skip_prompt=True)
    feed(streamer, byte_tokenizer, "Q: ", ["héllo ".encode(), "wörld\n".encode(), "日本".encode(), b" end"])
    assert "".join(streamer.emitted) == "héllo wörld\n日本 end"
    assert all("\ufffd" not in piece for piece in streamer.emitted)  # never half a character
    assert "héllo " in streamer.emitted  # words come out once a space ends them
    assert capsys.readouterr().out == "héllo wörld\n日本 end\n"


def test_ideographs_are_emitted_as_soon_as_they_are_complete(byte_tokenizer):
    pieces: list[str] = []

    class Recording(TextStreamer):
        def on_finalized_text(self, text, stream_end=False):
            pieces.append(text)

    streamer = Recording(byte_tokenizer, skip_prompt=True)
    streamer.put(torch.tensor([[65]]))
    for byte in "中文".encode():
        streamer.put(torch.tensor([byte]))
    assert "".join(pieces) == "中文"  # before end()
    assert pieces[:3] == ["", "", "中"]


def test_prompt_is_printed_unless_skipped(byte_tokenizer, capsys):
    feed(TextStreamer(byte_tokenizer), byte_tokenizer, "say ", [b"hi"])
    assert capsys.readouterr().out == "say hi\n"


def test_text_streamer_refuses_a_batch(byte_tokenizer):
    with pytest.raises(GenerationError, match="batch of 2"):
        TextStreamer(byte_tokenizer).put(torch.tensor([[1, 2], [3, 4]]))


def test_iterator_streamer_is_read_from_another_thread(byte_tokenizer):
    streamer = TextIteratorStreamer(byte_tokenizer, skip_prompt=True, timeout=10)
    producer = threading.Thread(target=feed, args=(streamer, byte_tokenizer, "prompt", [b"one two ", "três".encode()]))
    producer.start()
    received = list(streamer)
    producer.join()
    assert "".join(received) == "one two três"
    assert len(received) >= 2


def test_generate_streams_prompt_then_each_new_token(tiny_model):
    calls: list[list[int]] = []

    class Collect:
        def put(self, value):
            calls.append(value.flatten().tolist())

        def end(self):
            calls.append(["end"])

    def loop(model, input_ids, logits_processor, stopping_criteria, generation_config, streamer=None, **kwargs):
        for token in (7, 8):
            streamer.put(torch.tensor([token]))
        streamer.end()
        return input_ids

    tiny_model.generate(torch.tensor([[3, 4]]), streamer=Collect(), custom_generate=loop)
    assert calls == [[3, 4], [7], [8], ["end"]]


class _CharTokenizer:
    def __init__(self, alphabet: str) -> None:
        self.alphabet = alphabet

    def decode(self, ids: list[int], **kwargs: Any) -> str:
        return "".join(self.alphabet[i] for i in ids)


class _Collecting(TextStreamer):
    def __init__(self, tokenizer: Any) -> None:
        super().__init__(tokenizer)
        self.pieces: list[str] = []

    def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
        self.pieces.append(text)


def test_text_after_an_ideograph_is_emitted_at_once() -> None:
    streamer = _Collecting(_CharTokenizer("ab\u6f22 "))
    streamer.put(torch.tensor([0, 1, 2]))  # "ab漢": no space needed before emitting ideographic text
    assert "".join(streamer.pieces) == "ab\u6f22"


@pytest.mark.parametrize("streamer_class", [TextStreamer, TextIteratorStreamer])
def test_streamers_refuse_a_batch_naming_themselves(streamer_class: type) -> None:
    streamer = streamer_class(_CharTokenizer("ab"))
    with pytest.raises(GenerationError, match=f"^{streamer_class.__name__} streams one sequence.*a batch of 2"):
        streamer.put(torch.zeros(2, 3, dtype=torch.long))
