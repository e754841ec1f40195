"""The reference-parity tests every decoder family shares, as a base class: a family's test file subclasses
:class:`DecoderFamilyParity`, names the family (its classes are ``<family>Config``, ``<family>ForCausalLM`` and
``<family>ForSequenceClassification`` in both implementations), its tiny config and its cases, and adds what is its
own (GGUF files, refused settings).

    class TestStableLmMatchesTheReference(DecoderFamilyParity):
        family, tiny, cases = "StableLm", TINY, CASES

        @pytest.fixture(scope="class", params=list(CASES))
        def case(self, request: pytest.FixtureRequest) -> str:
            return request.param
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch

from parity.harness import (
    assert_close,
    assert_generation_matches,
    assert_same_state_dict,
    generate_both,
    load_ours,
    load_reference,
    make_reference_checkpoint,
    max_abs_diff,
    padded_batch,
    position_ids_for,
    random_ids,
)


class DecoderFamilyParity:
    """Logits and loss, left-padded and cached steps (SDPA and eager), greedy generation, our checkpoint in the
    reference, the base model and sequence classification — each case a tiny checkpoint saved by the reference."""

    family: ClassVar[str]
    tiny: ClassVar[dict[str, Any]]
    cases: ClassVar[dict[str, dict[str, Any]]]

    @pytest.fixture(scope="class")
    def checkpoints(self, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Any, Any]]:
        built: dict[str, tuple[Path, Any, Any]] = {}
        for name, overrides in self.cases.items():
            folder, reference = make_reference_checkpoint(
                f"{self.family}Config",
                f"{self.family}ForCausalLM",
                tmp_path_factory.mktemp(name),
                **{**self.tiny, **overrides},
            )
            built[name] = (folder, reference, load_ours(folder))
        return built

    def test_logits_and_loss_match_reference(self, case: str, checkpoints: dict[str, tuple[Path, Any, Any]]) -> None:
        _, reference, ours = checkpoints[case]
        assert type(ours).__name__ == f"{self.family}ForCausalLM"
        ids = random_ids(self.tiny["vocab_size"], batch=2, length=9, seed=1)
        labels = ids.clone()
        labels[0, :3] = -100
        with torch.no_grad():
            got, want = ours(ids, labels=labels), reference(ids, labels=labels)
        assert_close(got.logits, want.logits, atol=1e-4)
        assert_close(got.loss, want.loss, atol=1e-5, what="loss")

    @pytest.mark.parametrize("attn_implementation", ["sdpa", "eager"])
    def test_left_padded_batch_and_cached_steps_match_reference(
        self, case: str, attn_implementation: str, checkpoints: dict[str, tuple[Path, Any, Any]]
    ) -> None:
        folder, reference, _ = checkpoints[case]
        ours = load_ours(folder, attn_implementation=attn_implementation)
        ids, mask = padded_batch(self.tiny["vocab_size"], [8, 5, 2], pad_token_id=0, seed=2)
        with torch.no_grad():
            got = ours(ids, attention_mask=mask).logits
            want = reference(ids, attention_mask=mask, position_ids=position_ids_for(mask)).logits
            out = ours(ids[:, :3], attention_mask=mask[:, :3], use_cache=True)
            steps = [out.logits]
            for t in range(3, ids.shape[1]):
                out = ours(ids[:, t : t + 1], attention_mask=mask[:, : t + 1], past_key_values=out.past_key_values)
                steps.append(out.logits)
        assert_close(got, want, atol=1e-4, mask=mask)
        assert_close(torch.cat(steps, dim=1), want, atol=1e-4, mask=mask, what="cached steps vs reference")

    def test_greedy_generation_matches_reference(
        self, case: str, checkpoints: dict[str, tuple[Path, Any, Any]]
    ) -> None:
        _, reference, ours = checkpoints[case]
        ids, mask = padded_batch(self.tiny["vocab_size"], [5, 3], pad_token_id=0, seed=11, side="left")
        settings = {"max_new_tokens": 8, "do_sample": False, "pad_token_id": 0, "eos_token_id": None}
        got, want = generate_both(ours, reference, ids, attention_mask=mask, **settings)
        assert_generation_matches(got, want, prompt_length=ids.shape[1])

    def test_our_checkpoint_loads_in_reference(
        self, case: str, checkpoints: dict[str, tuple[Path, Any, Any]], tmp_path: Path
    ) -> None:
        _, _, ours = checkpoints[case]
        ours.save_pretrained(tmp_path / "ours")
        reference = load_reference(tmp_path / "ours", "AutoModelForCausalLM")
        assert type(reference).__name__ == f"{self.family}ForCausalLM"
        assert_same_state_dict(dict(ours.state_dict()), dict(reference.state_dict()))
        ids = random_ids(self.tiny["vocab_size"], batch=2, length=9, seed=4)
        with torch.no_grad():
            assert max_abs_diff(ours(ids).logits, reference(ids).logits) <= 1e-4

    def test_base_model_and_sequence_classification_match_reference(self, tmp_path: Path) -> None:
        folder, reference = make_reference_checkpoint(
            f"{self.family}Config", f"{self.family}ForSequenceClassification", tmp_path, num_labels=3, **self.tiny
        )
        ours = load_ours(folder, "AutoModelForSequenceClassification")
        ids, mask = padded_batch(self.tiny["vocab_size"], [9, 5, 3], pad_token_id=0, seed=5, side="right")
        labels = torch.tensor([0, 2, 1])
        with torch.no_grad():
            got = ours(ids, attention_mask=mask, labels=labels)
            want = reference(ids, attention_mask=mask, position_ids=position_ids_for(mask), labels=labels)
            assert_close(got.logits, want.logits, atol=1e-4)
            assert_close(got.loss, want.loss, atol=1e-5, what="loss")
            base, reference_base = load_ours(folder, "AutoModel"), load_reference(folder, "AutoModel")
            assert_close(base(ids).last_hidden_state, reference_base(ids).last_hidden_state, atol=1e-4)
