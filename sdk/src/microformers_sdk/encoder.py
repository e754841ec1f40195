"""Small building blocks that bidirectional encoders (BERT and its descendants) share.

The encoder families write their attention, layers, base model and heads out in their own model files
(``microformers-bert``, ``microformers-distilbert``; ``microformers-roberta`` derives from BERT's classes;
``microformers-wav2vec2`` has its own attention). What they share is here, as plain functions:

- ``check_one_input``: exactly one of ``input_ids`` / ``inputs_embeds``.
- ``layer_head_masks``: a ``head_mask`` of ``(heads,)`` or ``(layers, heads)`` as one row per layer.
- ``prune_model_heads``: ``model.prune_heads`` (checks the layers and heads, records ``config.pruned_heads``,
  and calls ``model.base_model._prune_heads``, which the family writes).
- ``mirror_output_bias``: the masked-LM output bias under both of its checkpoint names.
- ``classifier_dropout``, ``require_two_labels``, ``question_answering_output``: the task heads' settings
  and extractive-QA output.
- ``flatten_choices``, ``multiple_choice_output``: a multiple-choice head's ``(batch, num_choices, length)`` inputs
  as one row per choice, and its scores back as ``(batch, num_choices)`` logits with the loss.

Errors are raised as the caller's ``InputError`` subclass (``error``) where one is given.
"""

from __future__ import annotations

from typing import Any

import torch

from microformers.errors import ConfigError, InputError

from .losses import span_loss, token_cross_entropy
from .outputs import MultipleChoiceModelOutput, QuestionAnsweringModelOutput

__all__ = [
    "check_one_input",
    "classifier_dropout",
    "flatten_choices",
    "layer_head_masks",
    "mirror_output_bias",
    "multiple_choice_output",
    "prune_model_heads",
    "question_answering_output",
    "require_two_labels",
]


# -- inputs --------------------------------------------------------------------------------------------
def check_one_input(model: Any, input_ids: Any, inputs_embeds: Any, error: type[InputError] = InputError) -> None:
    if (input_ids is None) == (inputs_embeds is None):
        raise error(f"{type(model).__name__}.forward needs exactly one of input_ids or inputs_embeds")


def layer_head_masks(
    head_mask: Any, layers: int, heads: int, error: type[InputError] = InputError
) -> list[torch.Tensor | None]:
    """``head_mask`` of shape ``(heads,)`` (every layer) or ``(layers, heads)``: 1 keeps a head, 0 silences it."""
    if head_mask is None:
        return [None] * layers
    mask = torch.as_tensor(head_mask)
    if mask.dim() == 1 and mask.shape[0] == heads:
        mask = mask.expand(layers, heads)
    if tuple(mask.shape) != (layers, heads):
        raise error(
            f"head_mask has shape {tuple(mask.shape)}; pass ({heads},) for every layer or ({layers}, {heads}), "
            "1.0 to keep a head and 0.0 to mask it (indices of the original, unpruned heads)"
        )
    return list(mask)


# -- head pruning and checkpoint names -------------------------------------------------------------
def prune_model_heads(model: Any, heads_to_prune: dict[int, list[int]], error: type[InputError] = InputError) -> None:
    """``model.prune_heads``: remove heads (``{layer: [head, ...]}``, original indices); kept in ``config.pruned_heads``."""
    config = model.config
    pruned = {int(k): set(v) for k, v in (getattr(config, "pruned_heads", None) or {}).items()}
    for layer, heads in heads_to_prune.items():
        if not 0 <= int(layer) < config.num_hidden_layers:
            raise error(f"prune_heads: layer {layer} does not exist ({config.num_hidden_layers} layers)")
        bad = [h for h in heads if not 0 <= h < config.num_attention_heads]
        if bad:
            raise error(f"prune_heads: heads {bad} do not exist ({config.num_attention_heads} heads)")
        pruned.setdefault(int(layer), set()).update(heads)
    model.base_model._prune_heads({int(k): list(v) for k, v in heads_to_prune.items()})
    config.pruned_heads = {str(k): sorted(v) for k, v in pruned.items()}


def mirror_output_bias(renamed: dict[str, str], head: str) -> dict[str, str]:
    """The MLM output bias has two names (``{head}.bias`` and ``{head}.decoder.bias``) holding the same values;
    a checkpoint with only one fills both. ``renamed`` maps our name -> checkpoint key."""
    for key in list(renamed):
        if key.endswith(f"{head}.decoder.bias"):
            renamed.setdefault(key[: -len("decoder.bias")] + "bias", renamed[key])
        elif key.endswith(f"{head}.bias"):
            renamed.setdefault(key[: -len("bias")] + "decoder.bias", renamed[key])
    return renamed


# -- heads ---------------------------------------------------------------------------------------------
def classifier_dropout(config: Any) -> float:
    """``classifier_dropout``, or ``hidden_dropout_prob`` where the config leaves it ``None``."""
    return config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob


def question_answering_output(
    logits: torch.Tensor, start_positions: Any, end_positions: Any, encoded: Any
) -> QuestionAnsweringModelOutput:
    """Split ``(batch, length, 2)`` logits into start and end logits; the span loss when both positions are given."""
    start_logits, end_logits = (part.squeeze(-1).contiguous() for part in logits.split(1, dim=-1))
    loss = None
    if start_positions is not None and end_positions is not None:
        loss = span_loss(start_logits, end_logits, start_positions, end_positions)
    return QuestionAnsweringModelOutput(
        loss=loss,
        start_logits=start_logits,
        end_logits=end_logits,
        hidden_states=encoded.hidden_states,
        attentions=encoded.attentions,
    )


def require_two_labels(config: Any, head: str) -> None:
    if config.num_labels != 2:
        raise ConfigError(
            f"{head} needs num_labels=2 (start and end logits) but the config has num_labels={config.num_labels}; "
            "drop num_labels/id2label from config.json or set num_labels=2"
        )


def flatten_choices(tensor: torch.Tensor | None, name: str, error: type[InputError] = InputError) -> torch.Tensor | None:
    """``(batch, num_choices, length[, hidden])`` -> ``(batch * num_choices, length[, hidden])``: every choice is a row."""
    if tensor is None:
        return None
    if name == "position_ids" and tensor.dim() == 2:  # one row of positions for every choice (broadcast)
        return tensor
    want = 4 if name == "inputs_embeds" else 3
    if tensor.dim() != want:
        shape = "(batch, num_choices, length, hidden_size)" if want == 4 else "(batch, num_choices, length)"
        raise error(
            f"{name} has shape {tuple(tensor.shape)} but a multiple-choice head takes {shape}: one row of "
            "tokens per choice (tokenize each (context, choice) pair and stack them per example)"
        )
    return tensor.reshape(-1, *tensor.shape[2:])


def multiple_choice_output(
    scores: torch.Tensor, num_choices: int, labels: torch.Tensor | None, encoded: Any
) -> MultipleChoiceModelOutput:
    """One score per flattened row -> ``(batch, num_choices)`` logits; the loss is cross-entropy over the choices."""
    logits = scores.view(-1, num_choices)
    return MultipleChoiceModelOutput(
        loss=token_cross_entropy(logits, labels) if labels is not None else None,
        logits=logits,
        hidden_states=encoded.hidden_states,
        attentions=encoded.attentions,
    )
