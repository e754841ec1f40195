"""automatic-speech-recognition of a tiny random Whisper: encoder and decoder graphs run by ONNX Runtime.

The model is exported once per module through ``microformers export onnx`` (the task taken from
config.architectures); the export compares every graph with the PyTorch model on other shapes than the export's
(its reported difference is asserted here). The tests then check the graph names ONNX Runtime users expect,
``ORTModelForSpeechSeq2Seq.generate`` (greedy and beam search, a given or detected language, translation) against
the PyTorch Whisper model's, the automatic-speech-recognition pipeline on the exported model, and the refusals.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import microformers
from microformers import GenerationError, cli
from microformers_sdk.testing import assert_close, assert_similar_generation, one_thread  # noqa: F401

pytest.importorskip("onnxruntime")
pytest.importorskip("microformers_whisper")

from microformers_onnx import export_onnx
from microformers_onnx.export import OnnxExportError

SPECIALS = ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|de|>", "<|translate|>", "<|transcribe|>",
            "<|notimestamps|>"]  # fmt: skip
WORDS = "the a cat dog sat on mat hello world good morning house is big small red blue green one two three".split()
# Whisper's order: text, then the special tokens, <|notimestamps|> last (timestamps would follow it: none here)
VOCAB = [SPECIALS[0], *WORDS, *SPECIALS[1:]]
LAYERS = 2
MEL = 8
FRAMES = 100  # one second of 16 kHz audio at hop 160: max_source_positions = 50


def write_folder(folder: Path) -> tuple[Any, dict[str, int]]:
    """A tiny multilingual Whisper checkpoint with its tokenizer and feature extractor; returns (model, token ids)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    from microformers_whisper import WhisperFeatureExtractor

    vocab = {token: i for i, token in enumerate(VOCAB)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<|endoftext|>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.add_special_tokens(SPECIALS)
    folder.mkdir(parents=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
        "unk_token": "<|endoftext|>",
    }))  # fmt: skip
    WhisperFeatureExtractor(feature_size=MEL, chunk_length=1).save_pretrained(folder)
    eos = vocab["<|endoftext|>"]
    config = microformers.AutoConfig.for_model(
        "whisper", vocab_size=len(vocab), d_model=16, encoder_layers=1, decoder_layers=LAYERS,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=20, decoder_ffn_dim=20,
        num_mel_bins=MEL, max_source_positions=FRAMES // 2, max_target_positions=24, pad_token_id=eos,
        bos_token_id=eos, eos_token_id=eos, decoder_start_token_id=vocab["<|startoftranscript|>"],
        begin_suppress_tokens=[eos], suppress_tokens=[vocab["the"], *(vocab[t] for t in SPECIALS[1:])],
    )  # fmt: skip
    torch.manual_seed(0)
    model = microformers.AutoModelForSpeechSeq2Seq.from_config(config).eval()
    with torch.no_grad():  # wider than the initialiser (norms and the sinusoids kept), so that the tokens vary
        for name, parameter in model.named_parameters():
            if "layer_norm" not in name and "encoder.embed_positions" not in name:
                parameter.normal_(0.0, 0.4)
    generation = model.generation_config
    generation.lang_to_id = {"<|en|>": vocab["<|en|>"], "<|de|>": vocab["<|de|>"]}
    generation.task_to_id = {"transcribe": vocab["<|transcribe|>"], "translate": vocab["<|translate|>"]}
    generation.no_timestamps_token_id = vocab["<|notimestamps|>"]
    generation.is_multilingual = True
    model.save_pretrained(folder)
    return microformers.AutoModelForSpeechSeq2Seq.from_pretrained(folder).eval(), vocab


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any, dict[str, int], Path]:
    """(ONNX folder, the PyTorch model, token ids, the model folder)."""
    root = tmp_path_factory.mktemp("whisper")
    model, vocab = write_folder(root / "model")
    assert cli.main(["export", "onnx", str(root / "model"), str(root / "onnx")]) == 0
    return root / "onnx", model, vocab, root / "model"


def features(batch: int, seed: int = 1) -> torch.Tensor:
    return torch.randn(batch, MEL, FRAMES, generator=torch.Generator().manual_seed(seed))


def test_export_writes_whisper_encoder_and_decoder_graphs_with_the_ort_names(exported) -> None:
    folder = exported[0]
    info = json.loads((folder / "onnx_export.json").read_text())
    assert info["task"] == "automatic-speech-recognition"  # from config.architectures (WhisperForConditional...)
    past = [f"past_key_values.{i}.{side}.{kind}" for i in range(LAYERS) for side in ("decoder", "encoder")
            for kind in ("key", "value")]  # fmt: skip
    present = [name.replace("past_key_values", "present") for name in past]
    graphs = info["graphs"]
    assert graphs["encoder_model.onnx"]["input_names"] == ["input_features"]
    assert graphs["encoder_model.onnx"]["output_names"] == ["last_hidden_state"]
    # Whisper attends to every frame: no encoder_attention_mask input
    assert graphs["decoder_model.onnx"]["input_names"] == ["input_ids", "encoder_hidden_states"]
    assert graphs["decoder_model.onnx"]["output_names"] == ["logits", *present]
    assert graphs["decoder_with_past_model.onnx"]["input_names"] == ["input_ids", *past]
    assert graphs["decoder_with_past_model.onnx"]["output_names"] == [
        "logits",
        *(n for n in present if ".decoder." in n),
    ]
    for name, graph in graphs.items():
        assert graph["max_difference"] <= 1e-4, name  # the export's own check: ONNX Runtime against PyTorch
    for name in ("config.json", "generation_config.json", "tokenizer.json", "preprocessor_config.json"):
        assert (folder / name).is_file(), name


def test_encoder_and_decoder_steps_give_the_pytorch_logits(exported) -> None:
    folder, model, vocab, _ = exported
    ort = microformers.ORTModelForSpeechSeq2Seq.from_pretrained(folder)
    inputs = features(batch=2, seed=5)
    prompt = torch.tensor([[vocab["<|startoftranscript|>"], vocab["<|de|>"], vocab["<|transcribe|>"]]] * 2)
    got = ort(input_features=inputs, decoder_input_ids=prompt)
    with torch.no_grad():
        want = model(input_features=inputs, decoder_input_ids=prompt, use_cache=True)
    assert_close(got.encoder_last_hidden_state, want.encoder_last_hidden_state, atol=1e-4)
    assert_close(got.logits, want.logits, atol=1e-4)
    step = torch.tensor([[vocab["cat"]], [vocab["dog"]]])
    got = ort(
        encoder_outputs=(got.encoder_last_hidden_state,), decoder_input_ids=step, past_key_values=got.past_key_values
    )
    with torch.no_grad():
        want = model(encoder_outputs=(want.encoder_last_hidden_state,), decoder_input_ids=step,
                     past_key_values=want.past_key_values)  # fmt: skip
    assert_close(got.logits, want.logits, atol=1e-4, msg="the with-past graph's step")


@pytest.mark.parametrize(
    "settings",
    [
        {"num_beams": 1},  # the language detected from the first step
        {"num_beams": 3},
        {"num_beams": 1, "language": "de"},
        {"num_beams": 2, "language": "<|en|>", "task": "translate"},
    ],
)
def test_ort_generate_gives_the_pytorch_whisper_tokens(exported, settings: dict[str, Any]) -> None:
    folder, model, vocab, _ = exported
    ort = microformers.ORTModelForSpeechSeq2Seq.from_pretrained(folder)
    inputs = features(batch=3)
    got = ort.generate(inputs, max_new_tokens=8, **settings)
    want = model.generate(inputs, max_new_tokens=8, **settings)  # the generated tokens, without Whisper's prompt
    assert got.shape[0] == 3 and got.shape[1] > 0
    scores = None  # beam search: every row must be the same
    if settings["num_beams"] == 1:  # greedy: the step scores tell a near tie from a real difference
        scores = model.generate(inputs, max_new_tokens=8, return_dict_in_generate=True, output_scores=True,
                                **settings).scores  # fmt: skip
    assert_similar_generation(got, want, scores, prompt_length=0, pad_token_id=vocab["<|endoftext|>"])


def test_ort_generate_scores_match_the_pytorch_models(exported) -> None:
    folder, model, _, _ = exported
    ort = microformers.ORTModelForSpeechSeq2Seq.from_pretrained(folder)
    inputs = features(batch=2, seed=3)
    settings = {"max_new_tokens": 6, "language": "en", "return_dict_in_generate": True, "output_scores": True}
    got = ort.generate(inputs, **settings)
    want = model.generate(inputs, **settings)
    assert torch.equal(got.sequences, want.sequences)  # greedy on scores 1e-6 apart: the same argmax
    for step, (a, b) in enumerate(zip(got.scores, want.scores)):
        assert_close(a, b, atol=1e-4, msg=f"scores of step {step}")


def test_pipeline_transcribes_with_the_exported_model(exported) -> None:
    folder, _, _, source = exported
    ort = microformers.ORTModelForSpeechSeq2Seq.from_pretrained(folder)
    audio = (np.random.default_rng(0).standard_normal(12000) * 0.1).astype(np.float32)
    ours = microformers.pipeline(
        "automatic-speech-recognition", model=ort, tokenizer=microformers.AutoTokenizer.from_pretrained(folder)
    )
    eager = microformers.pipeline("automatic-speech-recognition", model=str(source))
    settings = {"max_new_tokens": 8, "generate_kwargs": {"language": "de"}}
    got = ours([audio, audio[:8000]], **settings)
    want = eager([audio, audio[:8000]], **settings)
    # decoded text of near-identical logits (1e-6 apart on this tiny model): the same words
    assert got == want
    assert got[0]["text"]
    long_audio = np.concatenate([audio, audio[::-1], audio])  # 2.25 s: windows of the 1 s the model takes
    chunked = {**settings, "chunk_length_s": 1.0}
    got = ours(long_audio, **chunked)
    assert got == eager(long_audio, **chunked) and len(got["text"].split()) > 8  # several windows' words joined


def test_generate_refuses_what_only_the_pytorch_model_decodes(exported) -> None:
    folder = exported[0]
    ort = microformers.ORTModelForSpeechSeq2Seq.from_pretrained(folder)
    inputs = features(batch=1)
    with pytest.raises(GenerationError, match="return_timestamps.*PyTorch Whisper model"):
        ort.generate(inputs, return_timestamps=True)
    with pytest.raises(GenerationError, match="condition_on_prev_tokens"):
        ort.generate(inputs, condition_on_prev_tokens=True)
    with pytest.raises(GenerationError, match="chunk_length_s"):
        ort.generate(torch.randn(1, MEL, 2 * FRAMES))
    with pytest.raises(GenerationError, match="max_target_positions=24"):
        ort.generate(inputs, max_new_tokens=40)
    with pytest.raises(GenerationError, match="language=.fr.*de, en"):
        ort.generate(inputs, language="fr")
    with pytest.raises(GenerationError, match="English-only"):  # as PyTorch Whisper's generate
        ort.generate(inputs, language="en", is_multilingual=False)
    with pytest.raises(microformers.InputError, match="exactly 100"):
        ort.get_encoder()(input_features=torch.randn(1, MEL, 60))


def test_generate_without_microformers_whisper_names_the_extra(exported, monkeypatch: pytest.MonkeyPatch) -> None:
    ort = microformers.ORTModelForSpeechSeq2Seq.from_pretrained(exported[0])
    monkeypatch.setitem(sys.modules, "microformers_whisper", None)  # as if not installed: its import fails
    with pytest.raises(microformers.PluginError, match=r"microformers-whisper.*microformers-onnx\[whisper\]"):
        ort.generate(features(batch=1), language="en")


def test_whisper_folder_is_refused_by_the_text_class_and_text_task(exported, tmp_path: Path) -> None:
    folder, model, _, _ = exported
    with pytest.raises(OnnxExportError, match="--task text2text-generation"):
        microformers.ORTModelForSeq2SeqLM.from_pretrained(folder)
    with pytest.raises(OnnxExportError, match="--task automatic-speech-recognition"):
        export_onnx(model, tmp_path / "out", task="text2text-generation")
    assert not (tmp_path / "out").exists()


def test_timestamp_tokens_in_one_window_decoding_are_warned_about(exported, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    folder, _, vocab, _ = exported
    ort = microformers.ORTModelForSpeechSeq2Seq.from_pretrained(folder)
    with caplog.at_level(logging.WARNING, logger="microformers"):
        ort.generate(features(batch=2), max_new_tokens=4, language="de")
    assert "timestamp tokens" not in caplog.text  # <|notimestamps|> is the last token: nothing counts as a timestamp
    # a generation config whose <|notimestamps|> comes before the text tokens makes every word a "timestamp"
    ort.generation_config.no_timestamps_token_id = vocab["the"]
    with caplog.at_level(logging.WARNING, logger="microformers"):
        ort.generate(features(batch=2), max_new_tokens=4, language="de")
    assert "generated timestamp tokens after <|notimestamps|>" in caplog.text
