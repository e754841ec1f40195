"""``microformers_sdk.losses`` behaviour the mutation pass found unasserted (docs/reliability.md)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from microformers_sdk.losses import span_loss, token_cross_entropy


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
    expected = (F.cross_entropy(start_logits, torch.tensor([0, 3])) + F.cross_entropy(end_logits, torch.tensor([0, 0]))) / 2
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
        sequence_classification_loss(torch.zeros(2, 3), torch.tensor([0, 1]), SimpleNamespace(num_labels=3, problem_type="bogus"))
    assert str(info.value) == message
