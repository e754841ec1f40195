"""The pieces of Whisper's generate that ORTModelForSpeechSeq2Seq (microformers-onnx) shares: the argument checks,
the decoder prompt (with a language-detecting callable), the language lookup and the generated-only trimming."""

from __future__ import annotations

import pytest
import torch

from microformers import GenerationConfig, GenerationError
from microformers_whisper import (
    check_whisper_arguments,
    generated_tokens_only,
    whisper_decoder_prompt,
    whisper_language_id,
)

START, EN, DE, XX, TRANSLATE, TRANSCRIBE, NO_TIMESTAMPS = 3, 40, 41, 42, 44, 45, 47


def whisper_config(**changes: object) -> GenerationConfig:
    settings = {
        "decoder_start_token_id": START, "eos_token_id": 0, "pad_token_id": 0,
        "lang_to_id": {"<|en|>": EN, "<|de|>": DE, "<|xx|>": XX},
        "task_to_id": {"translate": TRANSLATE, "transcribe": TRANSCRIBE}, "no_timestamps_token_id": NO_TIMESTAMPS,
    }  # fmt: skip
    return GenerationConfig(**{**settings, **changes})


class Detector:
    """A language detector that records its calls."""

    def __init__(self, found: list[int]) -> None:
        self.found, self.calls = found, 0

    def __call__(self) -> torch.Tensor:
        self.calls += 1
        return torch.tensor(self.found)


def test_prompt_with_a_given_language_does_not_detect() -> None:
    detect = Detector([EN, EN])
    prompt = whisper_decoder_prompt(whisper_config(), 2, "German", "translate", False, detect)
    assert prompt.tolist() == [[START, DE, TRANSLATE, NO_TIMESTAMPS]] * 2
    assert detect.calls == 0
    # a language alone is transcribed; with timestamps there is no <|notimestamps|>
    assert whisper_decoder_prompt(whisper_config(), 1, "<|en|>", None, True, detect).tolist() == [
        [START, EN, TRANSCRIBE]
    ]
    # a code the model lists though Whisper's table has no such language
    assert whisper_decoder_prompt(whisper_config(), 1, "xx", None, False, detect).tolist() == [
        [START, XX, TRANSCRIBE, NO_TIMESTAMPS]
    ]


def test_prompt_detects_each_rows_language_once_when_none_is_given() -> None:
    detect = Detector([DE, EN])
    prompt = whisper_decoder_prompt(whisper_config(), 2, None, None, False, detect)
    assert prompt.tolist() == [[START, DE, NO_TIMESTAMPS], [START, EN, NO_TIMESTAMPS]]
    assert detect.calls == 1
    # per-row languages given as a list
    assert whisper_decoder_prompt(whisper_config(), 2, ["en", "de"], None, False, detect)[:, 1].tolist() == [EN, DE]
    assert detect.calls == 1


def test_prompt_follows_forced_decoder_ids_and_detects_only_without_a_language_there() -> None:
    detect = Detector([DE])
    forced = whisper_config(forced_decoder_ids=[[1, EN], [2, TRANSCRIBE], [3, NO_TIMESTAMPS]])
    assert whisper_decoder_prompt(forced, 1, None, None, False, detect).tolist() == [
        [START, EN, TRANSCRIBE, NO_TIMESTAMPS]
    ]
    assert detect.calls == 0
    open_language = whisper_config(forced_decoder_ids=[[1, None], [2, TRANSLATE]])
    assert whisper_decoder_prompt(open_language, 1, None, None, False, detect).tolist() == [
        [START, DE, TRANSLATE, NO_TIMESTAMPS]
    ]
    assert detect.calls == 1
    with pytest.raises(GenerationError, match="forced_decoder_ids.*pass language= and task="):
        whisper_decoder_prompt(whisper_config(forced_decoder_ids=[[2, EN]]), 1, None, None, False, detect)


@pytest.mark.parametrize(
    ("config", "language", "task", "message"),
    [
        (whisper_config(is_multilingual=False), "en", None, "English-only.*drop language= and task="),
        (whisper_config(lang_to_id=None), "en", None, "language= needs generation_config.lang_to_id"),
        (whisper_config(), None, "summarize", "task='summarize' is not a Whisper task"),
        (whisper_config(task_to_id=None), None, "translate", "task= needs generation_config.task_to_id"),
        (whisper_config(task_to_id={"transcribe": TRANSCRIBE}), None, "translate", r"not one of .*\['transcribe'\]"),
        (whisper_config(), "fr", None, r"language='fr' is not one .*\(en, de, xx\)"),
        (whisper_config(), ["en"], None, r"one language per row \(2\)"),
        (whisper_config(), ["en", None], None, "none of them None"),
        (whisper_config(), 7, None, "language=7 must be a language code"),
    ],
)
def test_prompt_refuses_what_the_model_cannot_put_in_it(
    config: GenerationConfig, language: object, task: str | None, message: str
) -> None:
    with pytest.raises(GenerationError, match=message):
        whisper_decoder_prompt(config, 2, language, task, False, Detector([EN, EN]))


def test_arguments_check_refuses_timestamps_without_their_token() -> None:
    check_whisper_arguments(whisper_config(), "en", "translate", True)  # all there: no error
    with pytest.raises(GenerationError, match="return_timestamps=True needs timestamp tokens"):
        check_whisper_arguments(whisper_config(no_timestamps_token_id=None), None, None, True)


def test_language_id_takes_tokens_codes_and_english_names() -> None:
    lang_to_id = {"<|en|>": EN, "<|de|>": DE}
    assert [whisper_language_id(name, lang_to_id) for name in ("<|de|>", "de", " DE ", "German", "english")] == [
        DE, DE, DE, DE, EN,
    ]  # fmt: skip


def test_generated_tokens_only_drops_prompt_final_eos_and_padding() -> None:
    config = whisper_config(eos_token_id=1, pad_token_id=2)
    sequences = torch.tensor([[9, 9, 5, 6, 1, 2, 2], [9, 9, 5, 1, 2, 2, 2], [9, 9, 5, 6, 7, 8, 4]], dtype=torch.int32)
    got = generated_tokens_only(sequences, 2, config)
    assert got.tolist() == [[5, 6, 2, 2, 2], [5, 2, 2, 2, 2], [5, 6, 7, 8, 4]]
    assert got.dtype == torch.int32
    # pad == eos (Whisper's checkpoints): the first one is the eos that ended the row, dropped with the rest
    same = whisper_config(eos_token_id=0, pad_token_id=0)
    assert generated_tokens_only(torch.tensor([[9, 5, 0, 0], [9, 5, 6, 0]]), 1, same).tolist() == [[5, 0], [5, 6]]
