"""Assisted (speculative) decoding and prompt-lookup decoding, for greedy search.

Each round, a cheap source proposes a few next tokens: a small ``assistant_model`` drafting greedily
(up to ``num_assistant_tokens``, stopping early when its own probability for a token falls below
``assistant_confidence_threshold``), or, with ``prompt_lookup_num_tokens``, the tokens that followed
the latest n-gram (up to ``max_matching_ngram_size`` tokens) where it occurred earlier in the
sequence. The model then scores all proposals in one forward pass; the proposals it would have
chosen itself are kept, plus its own next token. The result is plain greedy decoding's, with fewer
forward passes of the model when the proposals are good.

With ``num_assistant_tokens_schedule="heuristic"`` (or ``"heuristic_transient"``) the draft length
grows by 2 after a fully accepted draft and shrinks by 1 otherwise, within one ``generate`` call.
"""

from __future__ import annotations

from typing import Any

import torch

from microformers import GenerationConfig, GenerationError

from .base import LogitsProcessorList, StoppingCriteriaList
from .encoder_decoder import DecoderView, is_encoder_decoder
from .outputs import GenerateDecoderOnlyOutput
from .strategies import Strategy, loop_start

SCHEDULES = ("constant", "heuristic", "heuristic_transient")


def _forward(model: Any, ids: torch.Tensor, cache: Any, start: int, kwargs: dict[str, Any]) -> tuple[Any, Any]:
    """Logits of every position of ``ids`` (fp32) placed after ``start`` cached tokens, and the cache."""
    positions = torch.arange(start, start + ids.shape[1], device=ids.device).unsqueeze(0)
    out = model(
        input_ids=ids, position_ids=positions, past_key_values=cache, use_cache=True, return_dict=True, **kwargs
    )
    return out.logits.float(), out.past_key_values


class PromptLookup:
    """Proposes the tokens that followed the most recent earlier occurrence of the sequence's last n-gram."""

    def __init__(self, num_tokens: int, max_ngram: int, eos: list[int]) -> None:
        if isinstance(num_tokens, bool) or not isinstance(num_tokens, int) or num_tokens < 1:
            raise GenerationError(f"prompt_lookup_num_tokens={num_tokens!r} must be an integer >= 1")
        if isinstance(max_ngram, bool) or not isinstance(max_ngram, int) or max_ngram < 1:
            raise GenerationError(f"max_matching_ngram_size={max_ngram!r} must be an integer >= 1")
        self.num_tokens, self.max_ngram, self.eos = num_tokens, max_ngram, eos

    def propose(self, sequence: torch.Tensor, limit: int, processors: Any) -> torch.Tensor:
        row = sequence[0]
        length = row.shape[0]
        count = min(self.num_tokens, limit)
        for n in range(min(self.max_ngram, length - 1), 0, -1):
            windows = row[: length - 1].unfold(0, n, 1)  # n-grams that end before the last token
            hits = (windows == row[length - n :]).all(dim=1).nonzero().flatten()
            for start in reversed(hits.tolist()):
                follow = row[start + n : min(start + n + count, length)]
                if follow.numel():
                    return self._cut_at_eos(follow)
        return row[:0]

    def _cut_at_eos(self, tokens: torch.Tensor) -> torch.Tensor:
        if self.eos:
            is_eos = torch.isin(tokens, torch.tensor(self.eos, device=tokens.device))
            if bool(is_eos.any()):
                tokens = tokens[: int(is_eos.nonzero()[0])]
        return tokens

    def accepted(self, sequence: torch.Tensor, matched: int, proposed: int) -> None:
        pass


class AssistantDrafts:
    """Proposes the assistant model's greedy continuation; keeps the assistant's cache between rounds."""

    def __init__(
        self, assistant: Any, num_tokens: int, threshold: float | None, schedule: str, eos: list[int], kwargs: dict
    ) -> None:
        if isinstance(num_tokens, bool) or not isinstance(num_tokens, int) or num_tokens < 1:
            raise GenerationError(f"num_assistant_tokens={num_tokens!r} must be an integer >= 1")
        if threshold is not None and not (isinstance(threshold, (int, float)) and 0 <= threshold < 1):
            raise GenerationError(f"assistant_confidence_threshold={threshold!r} must be in [0, 1)")
        if schedule not in SCHEDULES:
            raise GenerationError(f"num_assistant_tokens_schedule={schedule!r} must be one of {SCHEDULES}")
        self.assistant, self.num_tokens, self.threshold = assistant, num_tokens, threshold
        self.schedule, self.eos, self.kwargs = schedule, eos, kwargs
        self.cache: Any = None
        self.cached = 0  # tokens of the current sequence the assistant's cache holds

    def propose(self, sequence: torch.Tensor, limit: int, processors: Any) -> torch.Tensor:
        count = min(self.num_tokens, limit)
        drafted: list[torch.Tensor] = []
        current = sequence
        feed = sequence[:, self.cached :]
        for _ in range(count):
            logits, self.cache = _forward(self.assistant, feed, self.cache, self.cached, self.kwargs)
            self.cached += feed.shape[1]
            scores = processors(current, logits[:, -1])
            token = scores.argmax(dim=-1, keepdim=True)
            if int(token) in self.eos:
                break
            drafted.append(token)
            current = torch.cat((current, token), dim=1)
            if self.threshold and float(scores.softmax(dim=-1)[0, int(token)]) < self.threshold:
                break
            feed = token
        self._drafted = len(drafted)
        self._base = sequence.shape[1]
        return torch.cat(drafted, dim=1)[0] if drafted else sequence[0, :0]

    def accepted(self, sequence: torch.Tensor, matched: int, proposed: int) -> None:
        keep = min(self.cached, self._base + matched)  # what the assistant saw that is still the sequence
        if self.cache is not None and keep < self.cached:
            self.cache.crop(keep)
        self.cached = keep
        if self.schedule != "constant":
            self.num_tokens = self.num_tokens + 2 if proposed and matched == proposed else max(1, self.num_tokens - 1)


class AssistedDecoding(Strategy):
    """Greedy decoding verified in chunks (see the module docstring); chosen by ``prompt_lookup_num_tokens``
    or by passing ``assistant_model=``."""

    name = "assisted"

    def applies(self, config: GenerationConfig) -> bool:
        return config.prompt_lookup_num_tokens is not None

    def decode(
        self,
        model: Any,
        input_ids: torch.Tensor,
        *,
        generation_config: GenerationConfig,
        logits_processor: LogitsProcessorList,
        stopping_criteria: StoppingCriteriaList,
        streamer: Any = None,
        model_kwargs: dict[str, Any],
        assistant_model: Any = None,
        explicit: GenerationConfig | None = None,
    ) -> Any:
        config = generation_config
        explicit = explicit if explicit is not None else config
        if config.do_sample or config.num_beams > 1:
            raise GenerationError(
                "assisted and prompt-lookup decoding here reproduce greedy search: drop do_sample / num_beams, or "
                "drop assistant_model / prompt_lookup_num_tokens"
            )
        kwargs = dict(model_kwargs)
        if kwargs.pop("attention_mask", None) is not None or input_ids.shape[0] != 1:
            raise GenerationError(
                "assisted and prompt-lookup decoding take one unpadded sequence (batch size 1), as the reference's"
            )
        if not kwargs.pop("use_cache", True):
            raise GenerationError("assisted and prompt-lookup decoding need the KV cache; drop use_cache=False")
        cache = kwargs.pop("past_key_values", None)
        if cache is not None:
            raise GenerationError("assisted and prompt-lookup decoding start from the prompt; drop past_key_values")
        kwargs.pop("logits_to_keep", None)
        eos = config.eos_token_ids
        if assistant_model is not None:
            if config.prompt_lookup_num_tokens is not None:
                raise GenerationError("pass either assistant_model or prompt_lookup_num_tokens, not both")
            if isinstance(model, DecoderView) != is_encoder_decoder(assistant_model):
                raise GenerationError(
                    "assistant_model must be an encoder-decoder model exactly when the model is one; "
                    f"{type(assistant_model).__name__} is not the same kind"
                )
            if isinstance(model, DecoderView):
                assistant_model = model.for_assistant(assistant_model)
            source: Any = AssistantDrafts(
                assistant_model,
                *_assistant_settings(explicit, config, assistant_model),
                eos,
                kwargs,
            )
        else:
            max_ngram = config.max_matching_ngram_size if config.max_matching_ngram_size is not None else 2
            source = PromptLookup(config.prompt_lookup_num_tokens, max_ngram, eos)

        max_length, keep, scores, raw_logits, attentions, hidden_states = loop_start(
            config, stopping_criteria, input_ids.shape[1]
        )
        if attentions is not None or hidden_states is not None:
            raise GenerationError(
                "assisted and prompt-lookup decoding do not collect output_attentions / output_hidden_states: "
                "drop them, or drop assistant_model / prompt_lookup_num_tokens"
            )
        sequence, cached = input_ids, 0
        while True:
            length = sequence.shape[1]
            proposal = source.propose(sequence, max_length - length - 1, logits_processor).view(1, -1)
            count = proposal.shape[1]
            # A chunk must not straddle a length where cached states go stale (Phi-3's LongRoPE): plain
            # decoding scores the positions before it with other rotary factors than those after it.
            while count and model.cache_needs_recompute(length, length + count):
                count -= 1
            proposal = proposal[:, :count]
            candidate = torch.cat((sequence, proposal), dim=1)
            if cache is not None and model.cache_needs_recompute(cached, candidate.shape[1]):
                cache, cached = None, 0  # the states cached so far are stale: rerun every position
            logits, cache = _forward(model, candidate[:, cached:], cache, cached, kwargs)
            logits = logits[:, -(count + 1) :]
            processed = [logits_processor(candidate[:, : length + i], logits[:, i]) for i in range(count + 1)]
            chosen = torch.stack([p.argmax(dim=-1) for p in processed], dim=1)  # (1, count + 1)
            matched = int((proposal == chosen[:, :count]).cumprod(dim=1).sum())
            new_tokens = chosen[:, : matched + 1]
            sequence = torch.cat((sequence, new_tokens), dim=1)
            cached = sequence.shape[1] - 1
            cache.crop(cached)
            source.accepted(sequence, matched, count)
            if scores is not None:
                scores += tuple(processed[: matched + 1])
            if raw_logits is not None:
                raw_logits += tuple(logits[:, i] for i in range(matched + 1))
            if streamer is not None:
                streamer.put(new_tokens[0].cpu())
            if bool(stopping_criteria(sequence, scores).all()) or sequence.shape[1] >= max_length:
                break
        if streamer is not None:
            streamer.end()
        if not keep:
            return sequence
        return GenerateDecoderOnlyOutput(sequences=sequence, scores=scores, logits=raw_logits, past_key_values=cache)


def _assistant_settings(
    explicit: GenerationConfig, config: GenerationConfig, assistant: Any
) -> tuple[int, float | None, str]:
    """A setting given to this call wins; then the assistant's generation config; then the defaults."""
    own = getattr(assistant, "generation_config", None)
    values = []
    for name in ("num_assistant_tokens", "assistant_confidence_threshold", "num_assistant_tokens_schedule"):
        value = getattr(explicit, name, None)
        if value is None and own is not None:
            value = getattr(own, name, None)
        values.append(value if value is not None else getattr(config, name))
    return values[0], values[1], values[2]


assisted = AssistedDecoding()
