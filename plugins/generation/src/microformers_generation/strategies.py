"""The standard decoding strategies: greedy, multinomial sampling and beam search.

Each is a :class:`Strategy`: the kernel calls it with the raw ``generate`` arguments, its
``__call__`` runs :func:`~microformers_generation.prepare.prepare` (inputs, lengths, processors,
criteria) and then its ``decode`` loop. ``applies(config)`` and the registration priority let the
kernel pick it; third-party strategies subclass :class:`Strategy` and implement ``applies`` and
``decode`` to get the same preparation.

The loops write tokens into buffers that grow with the tokens actually produced (never sized for
``max_new_tokens`` up front) and hand processors and criteria views of them; the model sees only the
newest token (:class:`~microformers_generation.decoding.IncrementalDecoder`).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from typing import Any

import torch

from microformers import GenerationConfig, GenerationError

from . import defaults
from .base import LogitsProcessorList, StoppingCriteriaList
from .decoding import IncrementalDecoder, grow
from .encoder_decoder import DecoderView, as_encoder_decoder_output
from .outputs import GenerateBeamDecoderOnlyOutput, GenerateDecoderOnlyOutput
from .prepare import prepare

# Beam scores of impossible candidates (finite, so sums and comparisons stay ordered).
IMPOSSIBLE = -1.0e9


# The sampling settings named when the probabilities cannot be sampled (with their "off" values).
_SAMPLING_SETTINGS = (
    ("temperature", 1.0), ("top_k", None), ("top_p", 1.0), ("min_p", None), ("typical_p", 1.0),
    ("epsilon_cutoff", 0.0), ("eta_cutoff", 0.0), ("repetition_penalty", 1.0), ("sequence_bias", None),
)  # fmt: skip


def sample_rows(probabilities: torch.Tensor, num_samples: int, config: GenerationConfig) -> torch.Tensor:
    """``torch.multinomial`` over rows of probabilities; a row that is not a distribution (inf/nan from scores that
    overflowed, or nothing left to sample) is a :class:`GenerationError` naming the settings in play.

    On the CPU torch checks the rows itself (nothing is paid until it fails); elsewhere they are checked first, as
    a CUDA device-side assert would leave the device unusable."""
    if probabilities.device.type != "cpu" and not bool(_distributions(probabilities).all()):
        raise _not_a_distribution(probabilities, config)
    try:
        return torch.multinomial(probabilities, num_samples=num_samples)
    except RuntimeError as exc:
        if bool(_distributions(probabilities).all()):
            raise  # not about the rows' values
        raise _not_a_distribution(probabilities, config) from exc


def _distributions(probabilities: torch.Tensor) -> torch.Tensor:
    """Per row: finite, non-negative and summing above 0."""
    finite = torch.isfinite(probabilities).all(dim=-1) & (probabilities >= 0).all(dim=-1)
    return finite & (probabilities.sum(dim=-1) > 0)


def _not_a_distribution(probabilities: torch.Tensor, config: GenerationConfig) -> GenerationError:
    bad = (~_distributions(probabilities)).nonzero().flatten().tolist()
    shown = ", ".join(map(str, bad[:8])) + (" ..." if len(bad) > 8 else "")
    settings = [
        f"{name}={getattr(config, name)!r}"
        for name, off in _SAMPLING_SETTINGS
        if getattr(config, name, off) is not None and getattr(config, name, off) != off
    ]
    return GenerationError(
        f"sampling: the probabilities of row(s) {shown} are not finite (the scores overflowed, or were not finite "
        f"from the model) with {', '.join(settings) or 'the default sampling settings'}; use a larger temperature "
        "or milder penalties and biases, or do_sample=False for the most likely tokens"
    )


class Strategy:
    """Base class: preparation, the default builders; subclasses implement ``applies`` and ``decode``."""

    name = ""

    def applies(self, config: GenerationConfig) -> bool:
        return False

    def build_logits_processor(self, model: Any, config: GenerationConfig, **kwargs: Any) -> LogitsProcessorList:
        return defaults.build_logits_processor(model, config, **kwargs)

    def build_stopping_criteria(self, model: Any, config: GenerationConfig, **kwargs: Any) -> StoppingCriteriaList:
        return defaults.build_stopping_criteria(model, config, **kwargs)

    def __call__(
        self,
        model: Any,
        inputs: torch.Tensor | None,
        *,
        generation_config: GenerationConfig,
        logits_processor: Any = None,
        stopping_criteria: Any = None,
        streamer: Any = None,
        model_kwargs: dict[str, Any],
    ) -> Any:
        prepared = prepare(
            model,
            inputs,
            generation_config=generation_config,
            logits_processor=logits_processor,
            stopping_criteria=stopping_criteria,
            streamer=streamer,
            model_kwargs=model_kwargs,
            builders=self,
            fast_decoding=True,
        )
        assistant = prepared.call_arguments.get("assistant_model")
        if assistant is not None:  # assisted decoding: the settings the call made decide the draft length
            from .assisted import assisted

            return run_loop(assisted.decode, model, prepared, assistant_model=assistant, explicit=generation_config)
        return run_loop(self.decode, model, prepared)

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
    ) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement decode(model, input_ids, ...)")

    def __repr__(self) -> str:
        return f"<generation strategy {self.name!r}>"


def run_loop(loop: Any, model: Any, prepared: Any, **extra: Any) -> Any:
    """Call ``loop(model, input_ids, generation_config=..., ...)`` with a prepared call.

    Inference mode skips autograd bookkeeping on every step; it is only used when no tensor made
    inside (a cache, scores) is handed back to the caller, and the sequences are copied out of it.
    An encoder-decoder model is called through the prepared :class:`DecoderView`, and a returned
    dictionary becomes the encoder-decoder output type. The prepared ``decode_step`` (the model's
    native step, by default) runs the static steps of this call only.
    """
    config = prepared.generation_config
    view = getattr(prepared, "model", None)
    if isinstance(view, DecoderView):
        model = view
    step = getattr(prepared, "decode_step", None)
    # a cache made by prepare() for the default step is not the caller's: inference mode is safe
    own_cache = "past_key_values" not in prepared.model_kwargs or step is not None
    inference_only = not config.return_dict_in_generate and own_cache
    with (
        torch.inference_mode() if inference_only else contextlib.nullcontext(),
        decoding_with(model, step) if step is not None else contextlib.nullcontext(),
        cycle_collection_paused(),
    ):
        output = loop(
            model,
            prepared.input_ids,
            generation_config=config,
            logits_processor=prepared.logits_processor,
            stopping_criteria=prepared.stopping_criteria,
            streamer=prepared.streamer,
            model_kwargs=prepared.model_kwargs,
            **extra,
        )
    if config.return_dict_in_generate and isinstance(output, torch.Tensor):
        output = GenerateDecoderOnlyOutput(sequences=output)  # a loop that returned bare sequences
    if isinstance(view, DecoderView):
        return as_encoder_decoder_output(output, view) if config.return_dict_in_generate else output.clone()
    return output.clone() if inference_only and isinstance(output, torch.Tensor) else output


@contextlib.contextmanager
def cycle_collection_paused() -> Iterator[None]:
    """Python's cycle collector off for a decoding loop, back on after it (if it was on before).

    Reference counting still frees what each step drops; only objects in reference cycles wait for the end of
    the call. A step allocates a few hundred container objects, so a collection ran every few tokens, and the
    older generations' passes walk every object the process holds (the model's modules, a tokenizer's vocabulary:
    200,000 objects here): 5% of a quantized SmolLM2-135M token's CPU time.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def decoding_with(model: Any, step: Any) -> Any:
    """The SDK's context that runs ``model``'s static steps through ``step`` (only models built on the SDK get one)."""
    from microformers_sdk.decode_steps import decoding_with as install

    return install(model, step)


class TokenByToken(Strategy):
    """One token per row and step: the best one (greedy) or a draw from the processed distribution (sample)."""

    def __init__(self, name: str, sample: bool) -> None:
        self.name = name
        self.sample = sample

    def applies(self, config: GenerationConfig) -> bool:
        return (config.num_beams or 1) == 1 and bool(config.do_sample) == self.sample

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
    ) -> Any:
        config = generation_config
        rows, prompt_length = input_ids.shape
        max_length, keep, scores, raw_logits, attentions, hidden_states = loop_start(
            config, stopping_criteria, prompt_length
        )
        pad = config.pad_token_id
        fill_finished = pad is not None and any(hasattr(c, "eos_token_id") for c in stopping_criteria)

        sequences = input_ids
        unfinished = torch.ones(rows, dtype=torch.bool, device=input_ids.device)
        decoder = IncrementalDecoder(model, model_kwargs, max_length, attentions is not None, hidden_states is not None)
        length = prompt_length
        logits = decoder.prefill(input_ids)
        while True:
            next_scores = logits_processor(sequences[:, :length], logits)
            if scores is not None:
                scores += (next_scores,)
            if raw_logits is not None:
                raw_logits += (logits,)
            if attentions is not None:
                attentions += (decoder.last_outputs.attentions,)
            if hidden_states is not None:
                hidden_states += (decoder.last_outputs.hidden_states,)
            if self.sample:
                next_tokens = sample_rows(next_scores.softmax(dim=-1), 1, config).squeeze(1)
            else:
                next_tokens = next_scores.argmax(dim=-1)
            if fill_finished:
                next_tokens = torch.where(unfinished, next_tokens, pad)
            sequences = grow(sequences, length + 1, max_length)
            sequences[:, length] = next_tokens
            length += 1
            unfinished &= ~stopping_criteria(sequences[:, :length], scores)
            if streamer is not None:
                streamer.put(next_tokens.cpu())
            if length >= max_length or not bool(unfinished.any()):
                break
            logits = decoder.step(sequences[:, :length])
        if streamer is not None:
            streamer.end()

        sequences = sequences[:, :length].clone()
        if not keep:
            return sequences
        return GenerateDecoderOnlyOutput(
            sequences=sequences,
            scores=scores,
            logits=raw_logits,
            attentions=attentions,
            hidden_states=hidden_states,
            past_key_values=decoder.cache,
        )


class BeamSearch(Strategy):
    """Beam search (or beam sampling with ``do_sample``), with length penalty and early stopping.

    Per step and batch item, the best ``k = max(2, 1 + number of eos ids) * num_beams`` continuations
    of all beams are scored. Those that hit a stopping criterion become finished hypotheses, scored
    as ``sum log p / (generated length ** length_penalty)`` and kept if among the ``num_beams`` best;
    the best ``num_beams`` unfinished ones go on. ``early_stopping``: ``True`` stops a batch item as
    soon as it has ``num_beams`` finished hypotheses; ``False`` stops when the best running beam,
    at its current length, cannot beat the worst kept hypothesis; ``"never"`` assumes running beams
    may reach ``max_length`` when the length penalty favours length.
    """

    name = "beam_search"

    def applies(self, config: GenerationConfig) -> bool:
        return (config.num_beams or 1) > 1

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
    ) -> Any:
        config = generation_config
        num_beams = config.num_beams or 1
        num_return = config.num_return_sequences or 1
        if num_return > num_beams:
            raise GenerationError(
                f"num_return_sequences={num_return} is larger than num_beams={num_beams}; raise num_beams"
            )
        if streamer is not None:
            raise GenerationError("streamer= cannot be used with beam search (num_beams > 1)")
        rows, prompt_length = input_ids.shape
        if rows % num_beams:
            raise GenerationError(f"beam search got {rows} rows, not a multiple of num_beams={num_beams}")
        batch = rows // num_beams
        max_length, keep, all_scores, raw_logits, attentions, hidden_states = loop_start(
            config, stopping_criteria, prompt_length
        )
        early_stopping = config.early_stopping
        length_penalty = float(config.length_penalty if config.length_penalty is not None else 1.0)
        device = input_ids.device
        eos = config.eos_token_ids

        candidates = max(2, 1 + len(eos)) * num_beams
        is_top_candidate = torch.zeros(candidates, dtype=torch.bool, device=device)
        is_top_candidate[:num_beams] = True
        # Unused positions of shorter returned sequences (the reference's choice: pad unless it is 0).
        pad = config.pad_token_id
        fill = (pad if pad else eos[0]) if eos else -1

        running = input_ids.view(batch, num_beams, prompt_length).clone()
        finished = running.clone()
        running_scores = torch.zeros((batch, num_beams), dtype=torch.float32, device=device)
        running_scores[:, 1:] = IMPOSSIBLE  # all beams start identical: only the first may expand
        finished_scores = torch.full((batch, num_beams), IMPOSSIBLE, dtype=torch.float32, device=device)
        is_finished = torch.zeros((batch, num_beams), dtype=torch.bool, device=device)
        can_improve = torch.ones((batch, 1), dtype=torch.bool, device=device)
        running_origins = torch.full((batch, num_beams, 0), -1, dtype=torch.int32, device=device)
        finished_origins = running_origins.clone()
        row_offset = (torch.arange(batch, device=device) * num_beams).view(-1, 1)
        identity_rows = torch.arange(rows, device=device)

        decoder = IncrementalDecoder(model, model_kwargs, max_length, attentions is not None, hidden_states is not None)
        length = prompt_length
        flat_running = input_ids
        logits = decoder.prefill(input_ids)
        while True:
            log_probs = logits_processor(flat_running, logits.log_softmax(dim=-1))
            if raw_logits is not None:
                raw_logits += (logits,)
            if attentions is not None:
                attentions += (decoder.last_outputs.attentions,)
            if hidden_states is not None:
                hidden_states += (decoder.last_outputs.hidden_states,)
            if running.shape[-1] <= length:  # room for this step's token, grown with the tokens produced
                running, finished = (grow(t, length + 1, max_length, fill) for t in (running, finished))
                generated = length + 1 - prompt_length
                running_origins, finished_origins = (
                    grow(t, generated, max_length - prompt_length, -1) for t in (running_origins, finished_origins)
                )
            if all_scores is not None:
                all_scores += (log_probs,)
            vocab = log_probs.shape[-1]
            totals = (log_probs.view(batch, num_beams, vocab) + running_scores[:, :, None]).view(batch, -1)

            # 1. the best continuations over all beams of each batch item
            if config.do_sample:
                picked = sample_rows(totals.softmax(dim=-1), candidates, config)
                picked_scores = totals.gather(1, picked)
            else:
                picked_scores, picked = torch.topk(totals, candidates, dim=1)
            source_beam = picked // vocab
            cand_sequences = _take_beams(running, source_beam)
            cand_sequences[:, :, length] = picked % vocab
            cand_origins = _take_beams(running_origins, source_beam)
            cand_origins[:, :, length - prompt_length] = (source_beam + row_offset).to(torch.int32)
            hits_stop = stopping_criteria(cand_sequences[:, :, : length + 1].reshape(-1, length + 1), all_scores)
            hits_stop = hits_stop.view(batch, candidates)

            # 2. the best candidates that did not stop continue
            continuing_scores = picked_scores + hits_stop.to(torch.float32) * IMPOSSIBLE
            best = torch.topk(continuing_scores, num_beams, dim=1).indices
            running = _take_beams(cand_sequences, best)
            running_scores = _take_beams(continuing_scores, best)
            running_origins = _take_beams(cand_origins, best)

            # 3. candidates that stopped (among the top num_beams) compete with the kept hypotheses
            just_finished = hits_stop & is_top_candidate[None, :]
            penalised = picked_scores / ((length + 1 - prompt_length) ** length_penalty)
            item_full = is_finished.all(dim=-1, keepdim=True) & (early_stopping is True)
            penalised = penalised + item_full.to(torch.float32) * IMPOSSIBLE
            penalised = penalised + (~can_improve).to(torch.float32) * IMPOSSIBLE
            penalised = penalised + (~just_finished).to(torch.float32) * IMPOSSIBLE
            merged_scores = torch.cat((finished_scores, penalised), dim=1)
            best = torch.topk(merged_scores, num_beams, dim=1).indices
            finished = _take_beams(torch.cat((finished, cand_sequences), dim=1), best)
            finished_scores = _take_beams(merged_scores, best)
            finished_origins = _take_beams(torch.cat((finished_origins, cand_origins), dim=1), best)
            is_finished = _take_beams(torch.cat((is_finished, just_finished), dim=1), best)

            # 4. the cache follows the beams that continue
            beam_rows = running_origins[:, :, length - prompt_length].reshape(-1).long()
            if not torch.equal(beam_rows, identity_rows):
                decoder.reorder(beam_rows)
            length += 1

            # 5. stop when no batch item can still improve, or every candidate stopped
            if early_stopping == "never" and length_penalty > 0.0:
                best_length = max_length - prompt_length
            else:
                best_length = length - prompt_length
            best_possible = running_scores[:, :1] / (best_length**length_penalty)
            worst_kept = torch.where(is_finished, finished_scores.min(dim=1, keepdim=True).values, IMPOSSIBLE)
            can_improve = can_improve & (best_possible > worst_kept).any(dim=-1, keepdim=True)
            all_full = bool(is_finished.all()) and early_stopping is True
            if not bool(can_improve.any()) or all_full or bool(hits_stop.all()) or length >= max_length:
                break
            flat_running = running[:, :, :length].reshape(rows, length)
            logits = decoder.step(flat_running)

        sequences = finished[:, :num_return].reshape(batch * num_return, finished.shape[-1])
        sequence_scores = finished_scores[:, :num_return].reshape(-1)
        origins = finished_origins[:, :num_return].reshape(batch * num_return, finished_origins.shape[-1])
        generated = int((origins >= 0).sum(dim=1).max())
        sequences = sequences[:, : prompt_length + generated].contiguous()
        if not keep:
            return sequences
        return GenerateBeamDecoderOnlyOutput(
            sequences=sequences,
            sequences_scores=sequence_scores if config.output_scores else None,
            scores=all_scores,
            logits=raw_logits,
            beam_indices=origins[:, :generated].contiguous(),
            attentions=attentions,
            hidden_states=hidden_states,
            past_key_values=decoder.cache,
        )


def _take_beams(tensor: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``tensor[b, index[b, j], ...]`` for a ``(batch, beams, ...)`` tensor and ``(batch, k)`` index."""
    while index.dim() < tensor.dim():
        index = index.unsqueeze(-1)
    return torch.take_along_dim(tensor, index, dim=1)


Kept = tuple[Any, ...] | None  # one entry per step, or None when the output was not asked for


def loop_start(
    config: GenerationConfig, criteria: StoppingCriteriaList, prompt_length: int
) -> tuple[int, bool, Kept, Kept, Kept, Kept]:
    """What every decoding loop starts from: the length bound, whether a ``GenerateDecoderOnlyOutput`` is
    returned (``return_dict_in_generate``), and an empty tuple for each per-step output it asks for
    (``output_scores``, ``output_logits``, ``output_attentions``, ``output_hidden_states``; None otherwise)."""
    keep = bool(config.return_dict_in_generate)
    flags = (config.output_scores, config.output_logits, config.output_attentions, config.output_hidden_states)
    scores, logits, attentions, hidden_states = (() if keep and flag else None for flag in flags)
    return _max_length(config, criteria, prompt_length), keep, scores, logits, attentions, hidden_states


def _max_length(config: GenerationConfig, criteria: StoppingCriteriaList, prompt_length: int) -> int:
    max_length = config.max_length or criteria.max_length
    if max_length is None:
        raise GenerationError("generation needs max_length or max_new_tokens to bound the output")
    if max_length <= prompt_length:
        raise GenerationError(f"max_length={max_length} leaves no room after a prompt of {prompt_length} tokens")
    return int(max_length)


greedy = TokenByToken("greedy", sample=False)
sample = TokenByToken("sample", sample=True)
beam_search = BeamSearch()
