"""microformers_sdk.losses, checked against the loss formulas written out by hand."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from microformers.errors import ConfigError
from microformers_sdk.losses import causal_lm_loss, sequence_classification_loss, span_loss, token_cross_entropy


def negative_log_likelihood(logits: torch.Tensor, target: int) -> torch.Tensor:
    return -torch.log_softmax(logits.double(), dim=-1)[target]


def config(num_labels: int, problem_type: str | None = None) -> SimpleNamespace:
    return SimpleNamespace(num_labels=num_labels, problem_type=problem_type)


def test_token_cross_entropy_averages_over_labelled_positions_only() -> None:
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 5)
    labels = torch.tensor([[1, -100, 4], [-100, 0, 2]])
    kept = [(0, 0), (0, 2), (1, 1), (1, 2)]
    want = sum(negative_log_likelihood(logits[b, t], int(labels[b, t])) for b, t in kept) / len(kept)
    torch.testing.assert_close(token_cross_entropy(logits, labels).double(), want)


def test_token_cross_entropy_takes_one_label_per_sequence() -> None:
    torch.manual_seed(0)
    logits = torch.randn(3, 2)  # next-sentence prediction: (batch, 2)
    loss = token_cross_entropy(logits, torch.tensor([1, -100, 0]))
    want = (negative_log_likelihood(logits[0], 1) + negative_log_likelihood(logits[2], 0)) / 2
    torch.testing.assert_close(loss.double(), want)


def test_token_cross_entropy_upcasts_half_precision_logits() -> None:
    torch.manual_seed(0)
    logits = torch.randn(1, 4, 6)
    labels = torch.tensor([[0, 5, 2, 3]])
    loss = token_cross_entropy(logits.bfloat16(), labels)
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss, token_cross_entropy(logits.bfloat16().float(), labels))


def test_causal_lm_loss_predicts_the_next_label() -> None:
    torch.manual_seed(0)
    logits = torch.randn(2, 4, 7)
    labels = torch.tensor([[3, 1, -100, 6], [2, 2, 5, 0]])
    # Position t is scored against labels[t + 1]; the last position has no target.
    pairs = [(b, t) for b in range(2) for t in range(3) if labels[b, t + 1] != -100]
    terms = [negative_log_likelihood(logits[b, t], int(labels[b, t + 1])) for b, t in pairs]
    torch.testing.assert_close(causal_lm_loss(logits, labels).double(), sum(terms) / len(terms))
    summed_over_items = causal_lm_loss(logits, labels, num_items_in_batch=10)
    torch.testing.assert_close(summed_over_items.double(), sum(terms) / 10)


def test_sequence_classification_loss_infers_the_problem_type() -> None:
    torch.manual_seed(0)
    logits = torch.randn(2, 3)
    single = sequence_classification_loss(logits, torch.tensor([2, 0]), config(3))
    want = (negative_log_likelihood(logits[0], 2) + negative_log_likelihood(logits[1], 0)) / 2
    torch.testing.assert_close(single.double(), want)

    targets = torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]])
    multi = sequence_classification_loss(logits, targets, config(3))
    probabilities = torch.sigmoid(logits)
    bce = -(targets * probabilities.log() + (1 - targets) * (1 - probabilities).log()).mean()
    torch.testing.assert_close(multi, bce)

    scores = torch.randn(2, 1)
    values = torch.tensor([0.5, -1.5])
    regression = sequence_classification_loss(scores, values, config(1))
    torch.testing.assert_close(regression, ((scores[:, 0] - values) ** 2).mean())


def test_sequence_classification_loss_follows_an_explicit_problem_type() -> None:
    torch.manual_seed(0)
    logits = torch.randn(2, 2)
    targets = torch.tensor([[0.25, 1.0], [-1.0, 2.0]])
    regression = sequence_classification_loss(logits, targets, config(2, "regression"))
    torch.testing.assert_close(regression, ((logits - targets) ** 2).mean())
    # Integer labels would infer single-label; the config overrides that.
    multi = sequence_classification_loss(
        logits, torch.tensor([[1, 0], [0, 1]]), config(2, "multi_label_classification")
    )
    assert multi.dtype == torch.float32
    assert multi > 0


def test_sequence_classification_loss_rejects_an_unknown_problem_type() -> None:
    with pytest.raises(ConfigError, match="problem_type='ranking'.*regression"):
        sequence_classification_loss(torch.zeros(1, 2), torch.tensor([1]), config(2, "ranking"))


def test_span_loss_ignores_positions_past_the_sequence() -> None:
    torch.manual_seed(0)
    start_logits, end_logits = torch.randn(2, 5), torch.randn(2, 5)
    loss = span_loss(start_logits, end_logits, torch.tensor([1, 4]), torch.tensor([2, 40]))
    start = (negative_log_likelihood(start_logits[0], 1) + negative_log_likelihood(start_logits[1], 4)) / 2
    end = negative_log_likelihood(end_logits[0], 2)  # the second row's end (40) is out of range
    torch.testing.assert_close(loss.double(), (start + end) / 2)


# From test_losses_mutants.py: ``microformers_sdk.losses`` behaviour the mutation pass found unasserted
# (docs/reliability.md).


def test_token_cross_entropy_over_every_row_but_ignored_labels() -> None:
    torch.manual_seed(0)
    logits, labels = torch.randn(2, 3, 5), torch.tensor([[1, -100, 4], [0, 2, -100]])
    keep = labels != -100
    torch.testing.assert_close(token_cross_entropy(logits, labels), F.cross_entropy(logits[keep], labels[keep]))


def test_span_positions_below_zero_count_as_zero_and_past_the_end_are_ignored() -> None:
    torch.manual_seed(0)
    start, end = torch.randn(2, 6), torch.randn(2, 6)
    ends = torch.tensor([2, 3])
    clamped = span_loss(start, end, torch.tensor([-5, 1]), ends)
    torch.testing.assert_close(clamped, span_loss(start, end, torch.tensor([0, 1]), ends))
    ignored = span_loss(start, end, torch.tensor([99, 1]), ends)  # the first start is outside: left out
    expected = (F.cross_entropy(start[1:], torch.tensor([1])) + F.cross_entropy(end, ends)) / 2
    torch.testing.assert_close(ignored, expected)


def test_span_positions_at_zero_stay_and_negative_end_positions_count_as_zero() -> None:
    generator = torch.Generator().manual_seed(0)
    start_logits, end_logits = torch.randn(2, 5, generator=generator), torch.randn(2, 5, generator=generator)
    loss = span_loss(start_logits, end_logits, torch.tensor([0, 3]), torch.tensor([-1, 0]))
    expected = (
        F.cross_entropy(start_logits, torch.tensor([0, 3])) + F.cross_entropy(end_logits, torch.tensor([0, 0]))
    ) / 2
    torch.testing.assert_close(loss, expected)


def test_an_unknown_problem_type_is_named_with_the_choices() -> None:
    from types import SimpleNamespace

    import pytest

    from microformers import ConfigError
    from microformers_sdk.losses import sequence_classification_loss

    message = (
        "problem_type='bogus' in the model config is not one of regression, single_label_classification, "
        "multi_label_classification; set config.problem_type to one of them or to None to infer it from the labels"
    )
    with pytest.raises(ConfigError) as info:
        sequence_classification_loss(
            torch.zeros(2, 3), torch.tensor([0, 1]), SimpleNamespace(num_labels=3, problem_type="bogus")
        )
    assert str(info.value) == message
