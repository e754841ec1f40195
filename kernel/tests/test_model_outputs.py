"""``microformers.outputs``: model output fields, positions, ``None`` fields and pickling."""

from __future__ import annotations

import pickle

import pytest
import torch

from microformers.outputs import ModelOutput
from microformers_sdk.outputs import CausalLMOutput

# From test_kernel_small_mutants.py: Small kernel modules (``microformers/__init__.py`` exports, ``lazy``,
# ``outputs``, ``builtin/commands``): behaviour the mutation pass found unasserted (docs/reliability.md).


def test_setting_an_output_field_to_none_removes_it_and_outputs_pickle() -> None:
    out = CausalLMOutput(logits=torch.ones(1))
    out["loss"] = None  # absent already: nothing to remove
    assert list(out.keys()) == ["logits"]
    out["loss"] = torch.zeros(())
    out["logits"] = None
    assert list(out.keys()) == ["loss"] and out.logits is None
    again = pickle.loads(pickle.dumps(out))
    # exact: a pickle round trip copies bytes
    assert type(again) is CausalLMOutput and list(again.keys()) == ["loss"] and torch.equal(again.loss, out.loss)


# -- third pass (full run of the five modules) ---------------------------------------------------------------------


class _Base(ModelOutput):
    a: int | None
    _hidden: int | None


class _Two(_Base):
    b: int | None
    a: int | None  # declared again: still one field, in its first place


def test_model_output_fields_positions_and_errors() -> None:
    assert _Two._fields == ("a", "b")
    out = _Two(1, 2)
    assert out.a == 1 and out.b == 2 and out.to_tuple() == (1, 2)
    with pytest.raises(TypeError, match=r"^_Two takes at most 2 positional values$"):
        _Two(1, 2, 3)
    with pytest.raises(TypeError, match=r"^_Two got 'a' twice$"):
        _Two(1, a=2)
    extra = _Two(1, c=3, d=None)  # a field a plugin adds is kept; None values are left out
    assert dict(extra) == {"a": 1, "c": 3} and extra.c == 3


def test_a_missing_output_field_is_named() -> None:
    with pytest.raises(AttributeError, match=r"^'_Two' has no field 'nope'$"):
        _Two(1).nope  # noqa: B018
