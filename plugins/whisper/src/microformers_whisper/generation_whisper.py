"""Whisper's ``generate``: the decoder prompt and logits processors, then the standard encoder-decoder generate.

The prompt a Whisper decoder starts from is ``[<|startofprev|> prompt text] <|startoftranscript|> <|lang|> <|task|>
[<|notimestamps|>]``, built from ``language=`` / ``task=`` / ``return_timestamps=`` and ``generation_config.json``'s
``lang_to_id``, ``task_to_id`` and ``no_timestamps_token_id``. Without ``language`` a multilingual model detects it
from the first token's logits over the language tokens. ``suppress_tokens`` / ``begin_suppress_tokens`` become
processors counted from the end of that prompt, and ``return_timestamps`` adds :class:`WhisperTimeStampLogitsProcessor`.
Decoding itself (greedy, sampling, beam search) is ``microformers-generation``'s encoder-decoder path.

As the reference, audio is decoded window by window (``2 * max_source_positions`` frames, 30 s): each window's
tokens are cut into segments at paired timestamps and the next window starts at the last complete segment, so
audio longer than 30 s (long-form, always with timestamps) and short audio whose model emits timestamps give the
reference's tokens. The result holds the generated tokens only (prompts, final eos and padding dropped, rows padded
with ``pad_token_id``); ``force_unique_generate_call=True`` or ``return_dict_in_generate=True`` run one window and
return what the standard generate returned. ``temperature=[0.0, 0.2, ...]`` with ``compression_ratio_threshold`` /
``logprob_threshold`` decodes a window again at the next temperature when its result is too repetitive or too
unlikely; ``condition_on_prev_tokens`` puts the previous windows' text (``<|startofprev|>``, left-padded) before each
window's prompt; with ``no_speech_threshold`` (and ``logprob_threshold``) a window too unlikely whose ``<|nospeech|>``
probability after ``<|startoftranscript|>`` is above the threshold is skipped as silence.

``return_token_timestamps=True`` times every token from the cross-attention of ``generation_config.alignment_heads``
(see ``alignment.py``; the feature extractor's ``attention_mask`` limits it to the audio that is there) and returns
``{"sequences", "token_timestamps"}``; ``return_segments=True`` adds each row's segments (``start``, ``end`` in
seconds, ``tokens``, ``idxs`` into the window's output, ``result``: that output, and ``token_timestamps`` with the
window's offset), as the reference returns them.
"""

from __future__ import annotations

import copy
import math
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from microformers import GenerationConfig, GenerationError, LogitsProcessor

from .alignment import token_timestamps
from .languages import TASKS, language_code

if TYPE_CHECKING:
    from .modeling_whisper import WhisperForConditionalGeneration

# seconds per timestamp token, and per log-mel frame
_TIME_PRECISION = 0.02
_TIME_PRECISION_FEATURES = 0.01

__all__ = [
    "SuppressTokensAtBeginLogitsProcessor",
    "SuppressTokensLogitsProcessor",
    "WhisperTimeStampLogitsProcessor",
    "check_whisper_arguments",
    "detect_language",
    "generated_tokens_only",
    "whisper_decoder_prompt",
    "whisper_generate",
    "whisper_language_id",
]


class SuppressTokensLogitsProcessor(LogitsProcessor):
    """``generation_config.suppress_tokens``: never generated."""

    def __init__(self, suppress_tokens: Sequence[int]) -> None:
        self.tokens = [int(t) for t in suppress_tokens]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        tokens = [t for t in self.tokens if 0 <= t < scores.shape[-1]]
        scores = scores.clone()
        scores[:, tokens] = -float("inf")
        return scores


class SuppressTokensAtBeginLogitsProcessor(SuppressTokensLogitsProcessor):
    """``generation_config.begin_suppress_tokens``: not generated as the first token after the decoder prompt."""

    def __init__(self, begin_suppress_tokens: Sequence[int], begin_index: int) -> None:
        super().__init__(begin_suppress_tokens)
        self.begin_index = begin_index

    def set_begin_index(self, begin_index: int) -> None:
        self.begin_index = begin_index

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if input_ids.shape[-1] != self.begin_index:
            return scores
        return super().__call__(input_ids, scores)


class WhisperTimeStampLogitsProcessor(LogitsProcessor):
    """Timestamp rules: ``<|notimestamps|>`` never; timestamps come in pairs (except right before eos) and never
    decrease; the first generated token is a timestamp no later than ``max_initial_timestamp_index``; and when the
    timestamps together are likelier than any text token, a timestamp is forced."""

    def __init__(self, generation_config: GenerationConfig, begin_index: int) -> None:
        self.no_timestamps_token_id = int(generation_config.no_timestamps_token_id)
        self.timestamp_begin = self.no_timestamps_token_id + 1
        eos = generation_config.eos_token_id if generation_config.eos_token_id is not None else None
        eos = eos if eos is not None else generation_config.bos_token_id
        self.eos_token_id = eos[0] if isinstance(eos, (list, tuple)) else eos
        self.begin_index = begin_index
        self.max_initial_timestamp_index = getattr(generation_config, "max_initial_timestamp_index", None)
        self.detect_from_logprob = bool(getattr(generation_config, "_detect_timestamp_from_logprob", True))

    def set_begin_index(self, begin_index: int) -> None:
        self.begin_index = begin_index

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        scores = scores.clone()
        scores[:, self.no_timestamps_token_id] = -float("inf")
        begin = self.timestamp_begin
        lowest_allowed = []
        for row, sequence in enumerate(input_ids.tolist()):
            generated = sequence[self.begin_index :]
            last_is_time = len(generated) >= 1 and generated[-1] >= begin
            before_last_is_time = len(generated) < 2 or generated[-2] >= begin
            if last_is_time:
                if before_last_is_time:  # a closed pair: text (or eos) next
                    scores[row, begin:] = -float("inf")
                else:  # an open pair: its closing timestamp (or eos) next
                    scores[row, : self.eos_token_id] = -float("inf")
            times = [token for token in generated if token >= begin]
            if not times:
                lowest_allowed.append(begin)
            elif last_is_time and not before_last_is_time:
                lowest_allowed.append(times[-1])
            else:
                lowest_allowed.append(times[-1] + 1)
        vocab = torch.arange(scores.shape[-1], device=scores.device)
        lowest = torch.tensor(lowest_allowed, device=scores.device).unsqueeze(-1)
        scores.masked_fill_((vocab >= begin) & (vocab < lowest), -float("inf"))
        if input_ids.shape[1] == self.begin_index:
            scores[:, :begin] = -float("inf")
            if self.max_initial_timestamp_index is not None:
                scores[:, begin + self.max_initial_timestamp_index + 1 :] = -float("inf")
        if self.detect_from_logprob:
            logprobs = torch.log_softmax(scores.float(), dim=-1)
            time_logprob = logprobs[:, begin:].logsumexp(dim=-1)
            best_text = logprobs[:, :begin].max(dim=-1).values
            scores[:, :begin].masked_fill_((time_logprob > best_text).unsqueeze(-1), -float("inf"))
        return scores


def detect_language(
    model: WhisperForConditionalGeneration,
    input_features: torch.Tensor | None = None,
    encoder_outputs: Any = None,
    generation_config: GenerationConfig | None = None,
) -> torch.Tensor:
    """The most likely language token per row: the first decoder step's logits over ``lang_to_id``'s tokens.

    ``model`` is the PyTorch Whisper model or one called the same way (``encoder_outputs=``, ``decoder_input_ids=``,
    ``use_cache=False`` -> ``.logits``), e.g. microformers-onnx's ``ORTModelForSpeechSeq2Seq``.
    """
    config = generation_config or model.generation_config
    lang_to_id = getattr(config, "lang_to_id", None)
    if not lang_to_id:
        raise GenerationError(
            "language detection needs generation_config.lang_to_id (the language tokens); pass language=... or "
            "use a generation_config.json that lists them"
        )
    if (input_features is None) == (encoder_outputs is None):
        raise GenerationError("detect_language needs exactly one of input_features or encoder_outputs")
    inputs = {"input_features": input_features} if input_features is not None else {"encoder_outputs": encoder_outputs}
    batch = input_features.shape[0] if input_features is not None else _encoder_batch(encoder_outputs)
    start = torch.full((batch, 1), int(config.decoder_start_token_id), dtype=torch.long, device=model.device)
    with torch.no_grad():
        logits = model(**inputs, decoder_input_ids=start, use_cache=False).logits[:, -1]
    keep = torch.zeros(logits.shape[-1], dtype=torch.bool, device=logits.device)
    keep[list(lang_to_id.values())] = True
    return logits.masked_fill(~keep, -float("inf")).argmax(-1)


def _encoder_batch(encoder_outputs: Any) -> int:
    hidden = getattr(encoder_outputs, "last_hidden_state", None)
    return int((hidden if hidden is not None else encoder_outputs[0]).shape[0])


def whisper_language_id(language: str, lang_to_id: Mapping[str, int]) -> int:
    """The token id of ``language``: a token ``lang_to_id`` lists (``"<|en|>"``), a code (``"en"``) or an English
    name (``"English"``)."""
    if not isinstance(language, str):
        raise GenerationError(f"language={language!r} must be a language code, name or token such as 'en'")
    token = language if language in lang_to_id else None
    if token is None:
        code = language_code(language) or language.lower().strip().removeprefix("<|").removesuffix("|>")
        token = f"<|{code}|>"
    if token not in lang_to_id:
        listed = ", ".join(t.strip("<|>") for t in lang_to_id)
        raise GenerationError(
            f"language={language!r} is not one this model's generation_config.lang_to_id lists ({listed}); pass "
            "one of those codes (or its English name)"
        )
    return int(lang_to_id[token])


def check_whisper_arguments(
    config: GenerationConfig, language: str | Sequence[str] | None, task: str | None, return_timestamps: bool
) -> None:
    """Refuse ``language=`` / ``task=`` / ``return_timestamps=`` that ``config`` (a Whisper generation config) can't
    put in the decoder prompt, with the fix in the message."""
    if getattr(config, "is_multilingual", None) is False and (language is not None or task is not None):
        raise GenerationError(
            "this is an English-only Whisper model (generation_config.is_multilingual=False): drop language= and "
            "task=, or set generation_config.is_multilingual=True if the model is in fact multilingual"
        )
    if language is not None and not getattr(config, "lang_to_id", None):
        raise GenerationError(
            "language= needs generation_config.lang_to_id (the model's language tokens), which this model's "
            "generation_config.json lacks; add it or drop language="
        )
    if task is not None:
        task_to_id = getattr(config, "task_to_id", None)
        if task not in TASKS:
            raise GenerationError(f"task={task!r} is not a Whisper task; use one of {list(TASKS)}")
        if not task_to_id:
            raise GenerationError(
                "task= needs generation_config.task_to_id (the <|transcribe|> / <|translate|> tokens), which this "
                "model's generation_config.json lacks; add it or drop task="
            )
        if task not in task_to_id:
            raise GenerationError(
                f"task={task!r} is not one of this model's generation_config.task_to_id ({sorted(task_to_id)}); "
                "pass one of those or add it to generation_config.json"
            )
    if return_timestamps and getattr(config, "no_timestamps_token_id", None) is None:
        raise GenerationError(
            "return_timestamps=True needs timestamp tokens, but this model's generation_config has no "
            "no_timestamps_token_id (timestamps follow it in the vocabulary); drop return_timestamps or fix "
            "generation_config.json"
        )


def whisper_decoder_prompt(
    config: GenerationConfig,
    batch: int,
    language: str | Sequence[str] | None,
    task: str | None,
    return_timestamps: bool,
    detect_languages: Callable[[], torch.Tensor | Sequence[int]],
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """``(batch, n)`` decoder start tokens: ``<|startoftranscript|>``, the language, the task, ``<|notimestamps|>``
    (unless ``return_timestamps``).

    Without ``language=`` / ``task=`` the prompt is ``generation_config.forced_decoder_ids``'s where it has one; a
    multilingual model whose prompt still lacks the language calls ``detect_languages()`` (the most likely language
    token per row, e.g. :func:`detect_language`: the first decoder step's logits over ``lang_to_id``). ``language``
    is one language for every row or a list of one per row. The arguments are checked first
    (:func:`check_whisper_arguments`).
    """
    check_whisper_arguments(config, language, task, return_timestamps)
    start = [int(config.decoder_start_token_id)]
    forced = getattr(config, "forced_decoder_ids", None)
    if task is None and language is None and forced:
        for position, (index, token) in enumerate(forced, start=1):
            if index != position:
                raise GenerationError(
                    f"generation_config.forced_decoder_ids {forced} do not follow Whisper's prompt (positions 1, 2, "
                    "...); pass language= and task= instead"
                )
            start.append(token)
    has_language = len(start) > 1 and start[1] is not None
    lang_to_id = getattr(config, "lang_to_id", None) or {}
    if isinstance(language, (list, tuple)):
        if len(language) != batch or any(item is None for item in language):
            raise GenerationError(
                f"language= as a list needs one language per row ({batch}), none of them None; got {language}"
            )
        language_ids: list[int] | None = [whisper_language_id(item, lang_to_id) for item in language]
    elif language is not None:
        language_ids = [whisper_language_id(language, lang_to_id)] * batch
    elif lang_to_id and not has_language:
        detected = detect_languages()
        language_ids = [int(t) for t in (detected.tolist() if isinstance(detected, torch.Tensor) else detected)]
    else:
        language_ids = None
    task_to_id = getattr(config, "task_to_id", None) or {}
    task_values = set(task_to_id.values())
    no_timestamps = getattr(config, "no_timestamps_token_id", None)
    rows = []
    for row in range(batch):
        tokens = list(start)
        if language_ids is not None:
            if len(tokens) > 1:
                tokens[1] = language_ids[row]
            else:
                tokens.append(language_ids[row])
        if task is not None:
            tokens = [t for t in tokens if t not in task_values] + [task_to_id[task]]
        elif language is not None and "transcribe" in task_to_id and not task_values & set(tokens):
            tokens.append(task_to_id["transcribe"])
        if not return_timestamps and no_timestamps is not None and tokens[-1] != no_timestamps:
            tokens.append(int(no_timestamps))
        elif return_timestamps and tokens[-1] == no_timestamps:
            tokens = tokens[:-1]
        rows.append([t for t in tokens if t is not None])
    return torch.tensor(rows, dtype=torch.long, device=device)


def _scores_of_kept_beams(outputs: Any) -> Any:
    """Beam search's per-step scores, one row per returned sequence (the beam it came from at each step), as the
    reference returns them from Whisper's generate; other outputs are returned as they are."""
    beam_indices = getattr(outputs, "beam_indices", None)
    if beam_indices is None or getattr(outputs, "scores", None) is None:
        return outputs
    # -1 marks steps after a sequence ended; as a Python index it takes the last row, as the reference does
    rows = [beam_indices[row, : len(outputs.scores)].tolist() for row in range(beam_indices.shape[0])]
    outputs.scores = tuple(
        torch.stack([step_scores[rows[row][step]] for row in range(len(rows))])
        for step, step_scores in enumerate(outputs.scores)
    )
    return outputs


def generated_tokens_only(sequences: torch.Tensor, prompt_length: int, config: GenerationConfig) -> torch.Tensor:
    """Each row's tokens after the ``prompt_length`` prompt, without trailing padding and the final eos, right-padded
    with ``pad_token_id``: what Whisper's ``generate`` returns."""
    rows = [_strip_row(row, config) for row in sequences[:, prompt_length:].tolist()]
    width = max(len(row) for row in rows)
    filler = config.pad_token_id if config.pad_token_id is not None else 0
    padded = [row + [filler] * (width - len(row)) for row in rows]
    return torch.tensor(padded, dtype=sequences.dtype, device=sequences.device)


def _windows_of(
    sequence: list[int], timestamp_begin: int, window_frames: int, input_stride: int
) -> tuple[list[tuple[int, int]], int]:
    """Split one window's tokens into segments at paired timestamps: their ``(start, stop)`` slices and how many
    frames to advance.

    A window that ends with a lone timestamp (or holds no timestamp pair) is consumed whole; otherwise decoding
    resumes at the last closing timestamp, as the reference does.
    """
    is_time = [token >= timestamp_begin for token in sequence]
    single_ending = is_time[-2:] == [False, True]
    cuts = [i + 1 for i in range(len(sequence) - 1) if is_time[i] and is_time[i + 1]]
    if not cuts:
        return [(0, len(sequence))], window_frames
    if single_ending:
        cuts.append(len(sequence))
    else:
        cuts[-1] += 1
    slices, last = [], 0
    for cut in cuts:
        slices.append((last, cut))
        last = cut
    if single_ending:
        return slices, window_frames
    return slices, (sequence[last - 2] - timestamp_begin) * input_stride


def _segment_times(
    sequence: list[int],
    slices: list[tuple[int, int]],
    timestamp_begin: int,
    window_frames: int,
    time_offset: float,
    time_precision: float,
) -> list[tuple[float, float]]:
    """Each segment's ``(start, end)`` in seconds: its opening and closing timestamps after the window's offset; a
    window without timestamp pairs runs from its start to its last timestamp (or its end)."""
    if (
        len(slices) == 1
        and slices[0] == (0, len(sequence))
        and not any(
            sequence[i] >= timestamp_begin and sequence[i + 1] >= timestamp_begin for i in range(len(sequence) - 1)
        )
    ):
        times = [token for token in sequence if token >= timestamp_begin]
        end = window_frames * _TIME_PRECISION_FEATURES / time_precision
        end = int(end)
        if times and times[-1] != timestamp_begin:
            end = times[-1] - timestamp_begin
        return [(time_offset, time_offset + end * time_precision)]
    single_ending = [t >= timestamp_begin for t in sequence[-2:]] == [False, True]
    found = []
    for index, (start, stop) in enumerate(slices):
        tokens = sequence[start:stop]
        closing = tokens[-1] if index < len(slices) - 1 or single_ending else tokens[-2]
        found.append(
            (
                time_offset + (tokens[0] - timestamp_begin) * time_precision,
                time_offset + (closing - timestamp_begin) * time_precision,
            )
        )
    return found


def _strip_row(row: list[int], config: GenerationConfig, keep_eos: bool = False) -> list[int]:
    """One generated row without trailing padding and (unless ``keep_eos``) its final eos, as the reference counts."""
    pad, eos = config.pad_token_id, config.eos_token_id
    eos = eos[0] if isinstance(eos, (list, tuple)) else eos
    if row and pad is not None and row[-1] == pad:
        pads = row.count(pad) - (1 if pad == eos else 0)
        row = row[: len(row) - pads] if pads else row
    if not keep_eos and row and eos is not None and row[-1] == eos:
        row = row[:-1]
    return row


def _compression_ratio(tokens: list[int], vocab_size: int) -> float:
    """Raw bytes of the tokens over their zlib-compressed size: high for repetitive output."""
    width = int(math.log2(vocab_size) / 8) + 1
    raw = b"".join(token.to_bytes(width, "little") for token in tokens)
    return len(raw) / len(zlib.compress(raw))


def _average_logprob(outputs: Any, row: int, tokens: list[int], temperature: float | None) -> float:
    """Mean log-probability of a row's tokens (eos included), from the scores before temperature scaling."""
    if outputs.get("sequences_scores") is not None:
        return float(outputs["sequences_scores"][row])
    scores = torch.stack([step[row] for step in outputs["scores"]])
    ids = torch.tensor(tokens, dtype=torch.long)
    if scores.shape[0] > ids.shape[0]:
        scores = scores[: ids.shape[0]]
    else:
        ids = ids[-scores.shape[0] :]
    scale = temperature if temperature is not None and temperature > 0.0 else 1
    logprobs = torch.log_softmax((scores * scale).float(), dim=-1).cpu()
    picked = logprobs.gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    return float(picked.sum() / len(ids)) if len(ids) else 0.0


def whisper_generate(
    model: WhisperForConditionalGeneration,
    input_features: torch.Tensor | None = None,
    generation_config: GenerationConfig | None = None,
    logits_processor: Sequence[Any] | None = None,
    stopping_criteria: Sequence[Any] | None = None,
    language: str | Sequence[str] | None = None,
    task: str | None = None,
    return_timestamps: bool | None = None,
    prompt_ids: torch.Tensor | None = None,
    is_multilingual: bool | None = None,
    temperature: float | None = None,
    force_unique_generate_call: bool | None = None,
    attention_mask: torch.Tensor | None = None,
    **kwargs: Any,
) -> Any:
    """Transcribe or translate ``input_features`` window by window (see the module docstring).

    Audio longer than one window (``> 2 * max_source_positions`` frames) is decoded sequentially with timestamps:
    each window resumes where the last complete segment ended; a padded batch of long audio needs the feature
    extractor's ``attention_mask`` (its per-row length).
    """
    if input_features is None:
        input_features = kwargs.pop("inputs", None)
    encoder_outputs = kwargs.get("encoder_outputs")
    if input_features is None and encoder_outputs is None:
        raise GenerationError("generate() needs input_features (from WhisperFeatureExtractor) or encoder_outputs")
    temperatures = list(temperature) if isinstance(temperature, (list, tuple)) else [temperature]
    if not temperatures:
        raise GenerationError("temperature=[] : pass a temperature or a list of fallback temperatures")
    temperature = temperatures[0]
    compression_ratio_threshold = kwargs.pop("compression_ratio_threshold", None)
    logprob_threshold = kwargs.pop("logprob_threshold", None)
    condition_on_prev_tokens = bool(kwargs.pop("condition_on_prev_tokens", False))
    no_speech_threshold = kwargs.pop("no_speech_threshold", None)
    return_token_timestamps = bool(kwargs.pop("return_token_timestamps", False))
    return_segments = bool(kwargs.pop("return_segments", False))
    if kwargs.pop("prompt_condition_type", None) not in (None, "first-segment"):
        raise GenerationError(
            "prompt_condition_type='all-segments' is not implemented; the prompt conditions the first window only"
        )
    if kwargs.get("decoder_input_ids") is not None:
        raise GenerationError("Whisper's generate builds decoder_input_ids itself; pass prompt_ids= instead")
    window = 2 * model.config.max_source_positions
    input_stride = 2  # conv2's stride: encoder positions per log-mel frame pair
    long_form = input_features is not None and input_features.shape[-1] > window
    batch = input_features.shape[0] if input_features is not None else _encoder_batch(encoder_outputs)
    if long_form and batch > 1 and attention_mask is None:
        raise GenerationError(
            "a batch of audio over 30 s needs attention_mask (feature_extractor(..., return_attention_mask=True, "
            "padding='longest', truncation=False)) to know where each row ends"
        )
    config = copy.deepcopy(generation_config if generation_config is not None else model.generation_config)
    if is_multilingual is not None:
        config.is_multilingual = is_multilingual
    if compression_ratio_threshold is None:
        compression_ratio_threshold = getattr(config, "compression_ratio_threshold", None)
    if logprob_threshold is None:
        logprob_threshold = getattr(config, "logprob_threshold", None)
    if no_speech_threshold is None:
        no_speech_threshold = getattr(config, "no_speech_threshold", None)
    if no_speech_threshold is not None and logprob_threshold is None:
        raise GenerationError(
            f"no_speech_threshold={no_speech_threshold} needs logprob_threshold (a window is skipped as silence when "
            "its <|nospeech|> probability is above no_speech_threshold and its average log-probability is below "
            "logprob_threshold); pass both"
        )
    if no_speech_threshold is not None and getattr(config, "no_timestamps_token_id", None) is None:
        raise GenerationError(
            "no_speech_threshold needs generation_config.no_timestamps_token_id (<|nospeech|> is the token before "
            "it); add it to generation_config.json or drop no_speech_threshold"
        )
    alignment_heads = getattr(config, "alignment_heads", None)
    if return_token_timestamps and not alignment_heads:
        raise GenerationError(
            "return_token_timestamps=True needs generation_config.alignment_heads (the [layer, head] pairs of "
            "cross-attention that follow the audio), which this model's generation_config.json lacks; add them or "
            "drop return_token_timestamps"
        )
    if long_form and return_timestamps is False:
        raise GenerationError(
            f"input_features has {input_features.shape[-1]} frames (over 30 s), which is decoded window by window "
            "with timestamps; drop return_timestamps=False (or cut the audio to 30 s)"
        )
    if return_timestamps is None:
        return_timestamps = long_form or bool(getattr(config, "return_timestamps", False))
    check_whisper_arguments(config, language, task, return_timestamps)
    no_timestamps = getattr(config, "no_timestamps_token_id", None)
    if return_timestamps and no_timestamps is not None and int(no_timestamps) + 1 >= model.config.vocab_size:
        raise GenerationError(
            f"return_timestamps=True needs timestamp tokens after <|notimestamps|> (id {no_timestamps}), but the "
            f"vocabulary ends at {model.config.vocab_size - 1}; this model has none: drop return_timestamps"
            + (" (audio over 30 s is only decoded with timestamps: cut it into 30 s pieces)" if long_form else "")
        )
    config.return_timestamps = return_timestamps
    features_for_detection = None if encoder_outputs is not None else input_features[:, :, :window]
    init = whisper_decoder_prompt(
        config,
        batch,
        language,
        task,
        return_timestamps,
        lambda: detect_language(model, features_for_detection, encoder_outputs, config),
        device=model.device,
    )
    decoder_input_ids = init
    if prompt_ids is not None:
        prompt = torch.as_tensor(prompt_ids, dtype=torch.long, device=init.device).view(1, -1)
        decoder_input_ids = torch.cat([prompt.expand(batch, -1), init], dim=-1)
    begin = decoder_input_ids.shape[-1]

    for name in ("max_new_tokens", "max_length", "num_beams", "do_sample", "return_dict_in_generate"):
        if name in kwargs:
            setattr(config, name, kwargs.pop(name))
    wants_dict = bool(config.return_dict_in_generate)
    num_frames = None
    if return_token_timestamps:
        # the cross-attention weights of every step, kept by generate
        config.return_dict_in_generate = config.output_attentions = config.output_scores = True
        kwargs.pop("output_attentions", None)
        if attention_mask is not None:
            num_frames = [int(n) for n in attention_mask.sum(-1).tolist()]
    max_positions = model.config.max_target_positions
    if (config.max_new_tokens or 0) + begin > max_positions:
        raise GenerationError(
            f"the decoder prompt ({begin} tokens with prompt_ids) plus max_new_tokens={config.max_new_tokens} "
            f"exceeds max_target_positions={max_positions}; shorten the prompt or lower max_new_tokens"
        )
    if config.max_length is None:
        config.max_length = 20
    config.do_sample = temperature is not None and temperature > 0.0
    config.temperature = temperature if config.do_sample else 1.0
    if config.do_sample:
        config.num_beams = 1

    suppress_tokens_given = config.suppress_tokens
    processors: list[Any] = []
    if config.begin_suppress_tokens:
        processors.append(SuppressTokensAtBeginLogitsProcessor(config.begin_suppress_tokens, begin))
    if config.suppress_tokens:
        processors.append(SuppressTokensLogitsProcessor(config.suppress_tokens))
    if return_timestamps:
        processors.append(WhisperTimeStampLogitsProcessor(config, begin))
    config.suppress_tokens = []  # empty, not None: None would be filled back from the model's generation config
    config.begin_suppress_tokens = []
    processors += list(logits_processor or [])

    from .modeling_whisper import WhisperForConditionalGeneration

    standard_generate = super(WhisperForConditionalGeneration, model).generate

    def next_window_lengths(prompt_length: int) -> None:
        if config.max_new_tokens is None:  # the reference lets max_length grow by the prompt for every window
            config.max_length = min(config.max_length + min(max_positions // 2 - 1, prompt_length), max_positions)
        elif config.max_new_tokens + prompt_length > max_positions:
            config.max_new_tokens = max_positions - prompt_length

    def decode_window(features: torch.Tensor | None, prompt: torch.Tensor, mask: torch.Tensor | None = None) -> Any:
        extra = {"decoder_attention_mask": mask} if mask is not None else {}
        model.__dict__["_positions_from_decoder_mask"] = mask is not None
        try:
            return standard_generate(
                features,
                generation_config=config,
                logits_processor=processors,
                stopping_criteria=stopping_criteria,
                decoder_input_ids=prompt,
                **extra,
                **kwargs,
            )
        finally:
            model.__dict__.pop("_positions_from_decoder_mask", None)

    def timestamps_of(outputs: Any, prompt_length: int, frames: list[int] | None) -> torch.Tensor:
        return token_timestamps(outputs, alignment_heads, int(model.config.median_filter_width), prompt_length, frames)

    if force_unique_generate_call or wants_dict or input_features is None:
        if long_form:
            raise GenerationError(
                "audio over 30 s is decoded window by window; force_unique_generate_call / return_dict_in_generate "
                "/ encoder_outputs take one 30 s window"
            )
        next_window_lengths(begin)
        outputs = decode_window(input_features, decoder_input_ids)
        if return_token_timestamps:
            times = timestamps_of(outputs, begin, num_frames)
            if wants_dict:
                return {**dict(_scores_of_kept_beams(outputs)), "token_timestamps": times}
            if force_unique_generate_call:
                return {"sequences": outputs.sequences, "token_timestamps": times}
            return {"sequences": generated_tokens_only(outputs.sequences, begin, config), "token_timestamps": times}
        if not isinstance(outputs, torch.Tensor):
            return _scores_of_kept_beams(outputs)
        if force_unique_generate_call:
            return outputs
        return generated_tokens_only(outputs, begin, config)

    if logprob_threshold is not None:
        config.return_dict_in_generate = True
        config.output_scores = True
    no_speech_token = int(config.no_timestamps_token_id) - 1 if no_speech_threshold is not None else None

    def no_speech_probabilities(features: torch.Tensor, prompts: torch.Tensor, mask: torch.Tensor | None) -> list:
        """Each row's probability of ``<|nospeech|>`` right after ``<|startoftranscript|>``."""
        start_of_transcript = prompts.shape[-1] - init.shape[-1]
        model.__dict__["_positions_from_decoder_mask"] = mask is not None
        try:
            with torch.no_grad():
                logits = model(input_features=features, decoder_input_ids=prompts, decoder_attention_mask=mask).logits
        finally:
            model.__dict__.pop("_positions_from_decoder_mask", None)
        return logits[:, start_of_transcript].float().softmax(dim=-1)[:, no_speech_token].tolist()

    def decode_with_fallback(
        features: torch.Tensor,
        prompts: torch.Tensor,
        mask: torch.Tensor | None,
        conditioned: list[bool],
        frames_left: list[int] | None,
    ) -> tuple[list[dict[str, Any]], list[bool]]:
        """One window for every row; rows whose result is too repetitive (``compression_ratio_threshold``) or too
        unlikely (``logprob_threshold``) are decoded again at the next temperature (the last try is kept). A row
        too unlikely whose ``<|nospeech|>`` probability is above ``no_speech_threshold`` is silence: skipped."""
        start = prompts.shape[-1]
        results: list[dict[str, Any]] = [{} for _ in range(features.shape[0])]
        pending = list(range(features.shape[0]))
        skip = [False] * features.shape[0]
        no_speech = no_speech_probabilities(features, prompts, mask) if no_speech_token is not None else None
        for attempt, temp in enumerate(temperatures):
            config.do_sample = temp is not None and temp > 0.0
            config.temperature = temp if config.do_sample else 1.0
            if config.do_sample:
                config.num_beams = 1
            rows_mask = mask[pending] if mask is not None else None
            outputs = decode_window(features[pending], prompts[pending], rows_mask)
            sequences = outputs if isinstance(outputs, torch.Tensor) else outputs["sequences"]
            times = None
            if return_token_timestamps:
                times = timestamps_of(outputs, start, [frames_left[p] for p in pending] if frames_left else None)
            retry = []
            for k, position in enumerate(pending):
                row = _strip_row(sequences[k, start:].tolist(), config, keep_eos=True)
                too_repetitive = compression_ratio_threshold is not None and (
                    _compression_ratio(row, model.config.vocab_size) > compression_ratio_threshold
                )
                too_unlikely = logprob_threshold is not None and (
                    _average_logprob(outputs, k, row, temp) < logprob_threshold
                )
                # as the reference, the skip flag and the no-speech probability are read at the row's place in
                # this try's batch
                skip[k] = bool(too_unlikely and no_speech is not None and no_speech[k] > no_speech_threshold)
                result: Any = sequences[k]
                if not isinstance(outputs, torch.Tensor):
                    result = {"sequences": sequences[k]}
                    if times is not None:
                        result["token_timestamps"] = times[k]
                results[position] = {"tokens": _strip_row(row, config), "result": result}
                conditioned[position] = condition_on_prev_tokens and (temp is None or temp < 0.5)
                if (too_repetitive or too_unlikely) and not skip[k]:
                    retry.append(position)
            if not retry or attempt == len(temperatures) - 1:
                break
            pending = retry
        return results, skip

    original_suppress = list(suppress_tokens_given or [])
    prev_sot = getattr(config, "prev_sot_token_id", None)
    if prev_sot is None and len(original_suppress) >= 2:
        prev_sot = original_suppress[-2]

    def previous_text(rows: list[list[dict[str, Any]] | None]) -> torch.Tensor:
        """``<|startofprev|>`` and each row's latest text (half the decoder's positions at most), left-padded."""
        cut = max_positions // 2 - 1
        built = []
        for found in rows:
            tokens: list[int] = []
            for segment in found or []:
                text = segment["tokens"]
                ends_double = len(text) > 2 and text[-2] >= timestamp_begin
                tokens += text[:-1] if ends_double else text
            tokens = tokens[-cut:] if found else []
            built.append(([prev_sot] if prev_sot is not None else []) + tokens)
        width = max(len(row) for row in built)
        pad_id = config.pad_token_id if config.pad_token_id is not None else 0
        return torch.tensor([[pad_id] * (width - len(row)) + row for row in built], dtype=torch.long)

    timestamp_begin = int(getattr(config, "no_timestamps_token_id", model.config.vocab_size)) + 1
    total = input_features.shape[-1]
    if long_form and batch > 1:
        max_frames = [int(n) for n in attention_mask.sum(-1).tolist()]
    else:
        max_frames = [total] * batch
    seek = [0] * batch
    # a prompt counts as the text before the first window (and is dropped from the result)
    prompt_segment = [] if prompt_ids is None else [int(t) for t in torch.as_tensor(prompt_ids).view(-1).tolist()]
    if prompt_segment and prompt_segment[0] == prev_sot:
        prompt_segment = prompt_segment[1:]
    segments: list[list[dict[str, Any]]] = [
        [{"tokens": prompt_segment}] if prompt_ids is not None else [] for _ in range(batch)
    ]
    conditioned = [condition_on_prev_tokens] * batch
    while any(seek[i] < max_frames[i] for i in range(batch)):
        active = [i for i in range(batch) if seek[i] < max_frames[i]]
        lengths = [min(max_frames[i] - seek[i], window) for i in active]
        pieces = [input_features[i : i + 1, :, seek[i] : seek[i] + n] for i, n in zip(active, lengths)]
        features = torch.cat([torch.nn.functional.pad(p, (0, window - p.shape[-1])) for p in pieces])
        prompts, mask = decoder_input_ids[active], None
        if any(conditioned) and segments[0]:
            history = previous_text([segments[i] if conditioned[i] else None for i in active]).to(init.device)
            prompts = torch.cat([history, init[active]], dim=-1)
            mask = (prompts != config.pad_token_id).long()
        for processor in processors:
            if hasattr(processor, "set_begin_index"):
                processor.set_begin_index(prompts.shape[-1])
        next_window_lengths(prompts.shape[-1])
        frames_left = [num_frames[i] - seek[i] for i in active] if num_frames is not None else None
        rows, skip = decode_with_fallback(features, prompts, mask, conditioned, frames_left)
        for k, (found, i, n) in enumerate(zip(rows, active, lengths)):
            if skip[k]:
                seek[i] += n
                continue
            tokens, start = found["tokens"], prompts.shape[-1]
            slices, advance = _windows_of(tokens, timestamp_begin, n, input_stride)
            offset = seek[i] * _TIME_PRECISION / input_stride
            times = _segment_times(tokens, slices, timestamp_begin, n, offset, _TIME_PRECISION)
            for (a, b), (begins, ends) in zip(slices, times):
                segment = {"start": begins, "end": ends, "tokens": tokens[a:b], "idxs": (start + a, start + b)}
                segment["result"] = found["result"]
                if return_token_timestamps:
                    segment["token_timestamps"] = found["result"]["token_timestamps"][start + a : start + b] + offset
                segments[i].append(segment)
            seek[i] += advance
    if prompt_ids is not None:
        segments = [found[1:] for found in segments]
    pad = config.pad_token_id if config.pad_token_id is not None else 0
    rows_out = [
        torch.tensor([t for segment in found for t in segment["tokens"]], dtype=torch.long) for found in segments
    ]
    width = max(len(row) for row in rows_out)
    sequences = torch.stack([torch.nn.functional.pad(row, (0, width - len(row)), value=pad) for row in rows_out])
    sequences = sequences.to(model.device)
    if not return_token_timestamps and not return_segments:
        return sequences
    result: dict[str, Any] = {"sequences": sequences}
    if return_token_timestamps:
        # as the reference: each window's own times (without the window's offset) joined
        times = []
        for found in segments:
            row = [s["result"]["token_timestamps"][s["idxs"][0] : s["idxs"][1]] for s in found]
            times.append(torch.cat(row) if row else torch.zeros(0, device=sequences.device))
        result["token_timestamps"] = torch.stack(
            [
                torch.nn.functional.pad(row, (0, width - len(row)), value=float(row[-1]) if len(row) else 0.0)
                for row in times
            ]
        )
    if return_segments:
        for found in segments:
            for segment in found:
                segment["tokens"] = torch.tensor(segment["tokens"], dtype=torch.long)
        result["segments"] = segments
    return result
