"""CLIP and SigLIP against the reference on tiny random checkpoints: two-tower outputs within 1e-4 at several image
sizes (interpolated positions included), hidden states and attentions, both losses, every tower class, checkpoints
both ways; image processors within 1e-6; CLIP's and SigLIP's tokenizer ids and text; processors' files both ways;
the zero-shot-image-classification pipeline's labels and scores."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import PIL.Image
import pytest
import torch

import microformers
from parity.harness import assert_close, load_ours, load_reference, make_reference_checkpoint, reference_module

TEXT: dict[str, Any] = {
    "vocab_size": 99,
    "hidden_size": 32,
    "intermediate_size": 37,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "max_position_embeddings": 16,
    "bos_token_id": 97,
    "eos_token_id": 98,
}
VISION: dict[str, Any] = {
    "hidden_size": 24,
    "intermediate_size": 30,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "image_size": 24,
    "patch_size": 6,
}
# Real checkpoints repeat projection_dim in each tower (the *WithProjection classes read it there).
CLIP_TINY: dict[str, Any] = {
    "text_config": {**TEXT, "projection_dim": 16},
    "vision_config": {**VISION, "projection_dim": 16},
    "projection_dim": 16,
}
SIGLIP_TINY: dict[str, Any] = {"text_config": {**TEXT, "projection_size": 24}, "vision_config": VISION}
EOS = TEXT["eos_token_id"]


def _pixels(batch: int, height: int, width: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(batch, 3, height, width, generator=torch.Generator().manual_seed(seed))


def _texts(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Three right-padded rows ending in the end-of-text token (padding repeats it, as CLIP's tokenizer pads)."""
    ids = torch.randint(0, 97, (3, 10), generator=torch.Generator().manual_seed(seed))
    mask = torch.ones_like(ids)
    for row, length in enumerate((10, 6, 8)):
        ids[row, length - 1 :] = EOS
        mask[row, length:] = 0
    return ids, mask


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any, Any]:
    folder, reference = make_reference_checkpoint(
        "CLIPConfig", "CLIPModel", tmp_path_factory.mktemp("clip"), **CLIP_TINY
    )
    return folder, reference, load_ours(folder, "AutoModel")


@pytest.fixture(scope="module")
def siglip(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any, Any]:
    folder, reference = make_reference_checkpoint(
        "SiglipConfig", "SiglipModel", tmp_path_factory.mktemp("siglip"), **SIGLIP_TINY
    )
    return folder, reference, load_ours(folder, "AutoModel")


def _assert_two_tower_outputs_match(got: Any, want: Any) -> None:
    for name in ("logits_per_image", "logits_per_text", "text_embeds", "image_embeds"):
        assert_close(getattr(got, name), getattr(want, name), atol=1e-4, what=name)
    for tower in ("text_model_output", "vision_model_output"):
        for name in ("last_hidden_state", "pooler_output"):
            assert_close(getattr(got, tower)[name], getattr(want, tower)[name], atol=1e-4, what=f"{tower}.{name}")


# -- CLIP ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("height", "width", "interpolate"), [(24, 24, False), (24, 24, True), (36, 30, True), (18, 42, True)]
)
def test_clip_outputs_match_at_image_sizes(
    clip: tuple[Path, Any, Any], height: int, width: int, interpolate: bool
) -> None:
    _, reference, ours = clip
    assert type(ours).__name__ == "CLIPModel"
    ids, mask = _texts()
    pixels = _pixels(3, height, width)
    inputs = {"input_ids": ids, "attention_mask": mask, "pixel_values": pixels, "interpolate_pos_encoding": interpolate}
    with torch.no_grad():
        _assert_two_tower_outputs_match(ours(**inputs), reference(**inputs))


def test_clip_contrastive_loss_and_features_match(clip: tuple[Path, Any, Any]) -> None:
    _, reference, ours = clip
    ids, mask = _texts(seed=1)
    pixels = _pixels(3, 24, 24, seed=1)
    with torch.no_grad():
        got = ours(input_ids=ids, attention_mask=mask, pixel_values=pixels, return_loss=True)
        want = reference(input_ids=ids, attention_mask=mask, pixel_values=pixels, return_loss=True)
        assert_close(got.loss, want.loss, atol=1e-5, what="loss")
        assert_close(ours.logit_scale, reference.logit_scale, atol=0.0, what="logit_scale")
        text_got = ours.get_text_features(input_ids=ids, attention_mask=mask).pooler_output
        text_want = reference.get_text_features(input_ids=ids, attention_mask=mask).pooler_output
        image_got = ours.get_image_features(pixel_values=pixels).pooler_output
        image_want = reference.get_image_features(pixel_values=pixels).pooler_output
    assert_close(text_got, text_want, atol=1e-4, what="get_text_features")
    assert_close(image_got, image_want, atol=1e-4, what="get_image_features")
    with pytest.raises(Exception, match="one image per text"):
        ours(input_ids=ids, attention_mask=mask, pixel_values=pixels[:2], return_loss=True)


def test_clip_hidden_states_and_attentions_match(clip: tuple[Path, Any, Any]) -> None:
    folder, _, _ = clip
    ours = load_ours(folder, "AutoModel", attn_implementation="eager")
    reference = load_reference(folder, "CLIPModel", attn_implementation="eager")
    ids, mask = _texts(seed=2)
    pixels = _pixels(3, 24, 24, seed=2)
    with torch.no_grad():
        got = ours(
            input_ids=ids, attention_mask=mask, pixel_values=pixels, output_hidden_states=True, output_attentions=True
        )
        want = reference(
            input_ids=ids, attention_mask=mask, pixel_values=pixels, output_hidden_states=True, output_attentions=True
        )
    for tower in ("text_model_output", "vision_model_output"):
        ours_tower, their_tower = getattr(got, tower), getattr(want, tower)
        assert len(ours_tower.hidden_states) == len(their_tower.hidden_states) == 3
        for index, (a, b) in enumerate(zip(ours_tower.hidden_states, their_tower.hidden_states)):
            assert_close(a, b, atol=1e-4, what=f"{tower}.hidden_states[{index}]")
        for index, (a, b) in enumerate(zip(ours_tower.attentions, their_tower.attentions)):
            assert_close(a, b, atol=1e-5, what=f"{tower}.attentions[{index}]")


@pytest.mark.parametrize(
    ("reference_class", "auto_or_class"),
    [
        ("CLIPTextModel", "CLIPTextModel"),
        ("CLIPTextModelWithProjection", "CLIPTextModelWithProjection"),
        ("CLIPVisionModel", "CLIPVisionModel"),
        ("CLIPVisionModelWithProjection", "CLIPVisionModelWithProjection"),
    ],
)
def test_clip_towers_load_from_the_two_tower_folder_and_their_own(
    clip: tuple[Path, Any, Any], tmp_path: Path, reference_class: str, auto_or_class: str
) -> None:
    import microformers_clip

    folder, _, _ = clip
    reference = load_reference(folder, reference_class)
    ours = getattr(microformers_clip, auto_or_class).from_pretrained(str(folder)).eval()
    text = "Text" in reference_class
    ids, mask = _texts(seed=3)
    inputs = {"input_ids": ids, "attention_mask": mask} if text else {"pixel_values": _pixels(2, 30, 36, seed=3),
                                                                     "interpolate_pos_encoding": True}  # fmt: skip
    with torch.no_grad():
        got, want = ours(**inputs), reference(**inputs)
    keys = [k for k in ("text_embeds", "image_embeds", "pooler_output", "last_hidden_state") if want.get(k) is not None]
    assert keys and all(got[k] is not None for k in keys)
    for key in keys:
        assert_close(got[key], want[key], atol=1e-4, what=key)
    # saved on its own: the reference's tower loads our file and ours loads the reference's
    ours.save_pretrained(tmp_path / "ours")
    reference.save_pretrained(tmp_path / "theirs")
    back_in_reference = load_reference(tmp_path / "ours", reference_class)
    back_in_ours = getattr(microformers_clip, auto_or_class).from_pretrained(str(tmp_path / "theirs")).eval()
    with torch.no_grad():
        for model in (back_in_reference, back_in_ours):
            assert_close(model(**inputs)[keys[0]], want[keys[0]], atol=1e-5, what=f"{keys[0]} after a round trip")


def test_clip_checkpoint_loads_in_reference(clip: tuple[Path, Any, Any], tmp_path: Path) -> None:
    _, reference, ours = clip
    ours.save_pretrained(tmp_path / "ours")
    back = load_reference(tmp_path / "ours", "CLIPModel")
    ids, mask = _texts(seed=4)
    pixels = _pixels(3, 24, 24, seed=4)
    with torch.no_grad():
        got = back(input_ids=ids, attention_mask=mask, pixel_values=pixels).logits_per_image
        want = reference(input_ids=ids, attention_mask=mask, pixel_values=pixels).logits_per_image
    assert_close(got, want, atol=1e-5)


@pytest.mark.parametrize(("config_name", "model_name", "tiny"), [
    ("CLIPConfig", "CLIPForImageClassification", CLIP_TINY),
    ("SiglipConfig", "SiglipForImageClassification", SIGLIP_TINY),
])  # fmt: skip
def test_image_classification_heads_match(
    tmp_path: Path, config_name: str, model_name: str, tiny: dict[str, Any]
) -> None:
    folder, reference = make_reference_checkpoint(config_name, model_name, tmp_path, num_labels=3, **tiny)
    ours = load_ours(folder, "AutoModelForImageClassification")
    assert type(ours).__name__ == model_name
    pixels, labels = _pixels(2, 24, 24, seed=5), torch.tensor([2, 0])
    with torch.no_grad():
        got, want = ours(pixels, labels=labels), reference(pixels, labels=labels)
    assert_close(got.logits, want.logits, atol=1e-4, what="logits")
    assert_close(got.loss, want.loss, atol=1e-5, what="loss")


# -- SigLIP --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("height", "width", "interpolate"), [(24, 24, False), (30, 30, True), (24, 36, True)])
def test_siglip_outputs_and_sigmoid_loss_match(
    siglip: tuple[Path, Any, Any], height: int, width: int, interpolate: bool
) -> None:
    _, reference, ours = siglip
    assert type(ours).__name__ == "SiglipModel"
    ids, mask = _texts(seed=6)
    pixels = _pixels(3, height, width, seed=6)
    inputs = {"input_ids": ids, "attention_mask": mask, "pixel_values": pixels,
              "interpolate_pos_encoding": interpolate, "return_loss": True}  # fmt: skip
    with torch.no_grad():
        got, want = ours(**inputs), reference(**inputs)
    _assert_two_tower_outputs_match(got, want)
    assert_close(got.loss, want.loss, atol=1e-4, what="sigmoid loss")


@pytest.mark.parametrize("reference_class", ["SiglipTextModel", "SiglipVisionModel"])
def test_siglip_towers_match_and_round_trip(
    siglip: tuple[Path, Any, Any], tmp_path: Path, reference_class: str
) -> None:
    import microformers_clip

    folder, _, _ = siglip
    reference = load_reference(folder, reference_class, attn_implementation="eager")
    ours = getattr(microformers_clip, reference_class).from_pretrained(str(folder), attn_implementation="eager").eval()
    ids, mask = _texts(seed=7)
    inputs = {"input_ids": ids, "attention_mask": mask} if "Text" in reference_class else {
        "pixel_values": _pixels(2, 24, 24, seed=7)}  # fmt: skip
    with torch.no_grad():
        got = ours(**inputs, output_hidden_states=True, output_attentions=True)
        want = reference(**inputs, output_hidden_states=True, output_attentions=True)
    assert_close(got.pooler_output, want.pooler_output, atol=1e-4, what="pooler_output")
    assert_close(got.last_hidden_state, want.last_hidden_state, atol=1e-4, what="last_hidden_state")
    for index, (a, b) in enumerate(zip(got.hidden_states, want.hidden_states, strict=True)):
        assert_close(a, b, atol=1e-4, what=f"hidden_states[{index}]")
    for index, (a, b) in enumerate(zip(got.attentions, want.attentions, strict=True)):
        assert_close(a, b, atol=1e-5, what=f"attentions[{index}]")
    ours.save_pretrained(tmp_path / "ours")
    with torch.no_grad():
        back = load_reference(tmp_path / "ours", reference_class)(**inputs).pooler_output
    assert_close(back, want.pooler_output, atol=1e-5, what="pooler_output from our file")


def test_siglip_checkpoint_loads_in_reference(siglip: tuple[Path, Any, Any], tmp_path: Path) -> None:
    _, reference, ours = siglip
    ours.save_pretrained(tmp_path / "ours")
    back = load_reference(tmp_path / "ours", "SiglipModel")
    ids, mask = _texts(seed=8)
    pixels = _pixels(3, 24, 24, seed=8)
    with torch.no_grad():
        got = back(input_ids=ids, attention_mask=mask, pixel_values=pixels).logits_per_image
        want = reference(input_ids=ids, attention_mask=mask, pixel_values=pixels).logits_per_image
    assert_close(got, want, atol=1e-5)
    assert_close(back.logit_bias, reference.logit_bias, atol=0.0, what="logit_bias")


# -- image processors ----------------------------------------------------------------------------------
def _images() -> list[Any]:
    rng = np.random.default_rng(0)
    rgb = PIL.Image.fromarray(rng.integers(0, 256, (37, 23, 3), dtype=np.uint8))
    grey = PIL.Image.fromarray(rng.integers(0, 256, (20, 41), dtype=np.uint8))
    rgba = PIL.Image.fromarray(rng.integers(0, 256, (31, 31, 4), dtype=np.uint8))
    array = rng.integers(0, 256, (26, 19, 3), dtype=np.uint8)
    return [rgb, grey, rgba, array]


@pytest.mark.parametrize(
    ("ours_name", "reference_module_path", "reference_name", "settings"),
    [
        ("CLIPImageProcessor", "transformers.models.clip.image_processing_pil_clip", "CLIPImageProcessorPil", {}),
        ("CLIPImageProcessor", "transformers.models.clip.image_processing_pil_clip", "CLIPImageProcessorPil",
         {"size": {"shortest_edge": 20}, "crop_size": {"height": 18, "width": 16}}),
        ("SiglipImageProcessor", "transformers.models.siglip.image_processing_pil_siglip", "SiglipImageProcessorPil", {}),
        ("SiglipImageProcessor", "transformers.models.siglip.image_processing_pil_siglip", "SiglipImageProcessorPil",
         {"size": {"height": 30, "width": 20}}),
    ],
)  # fmt: skip
def test_image_processors_match_and_files_load_both_ways(
    tmp_path: Path, ours_name: str, reference_module_path: str, reference_name: str, settings: dict[str, Any]
) -> None:
    import importlib

    import microformers_clip

    reference_module()
    reference = getattr(importlib.import_module(reference_module_path), reference_name)(**settings)
    ours = getattr(microformers_clip, ours_name)(**settings)
    images = _images()
    want = reference(images, return_tensors="np")["pixel_values"]
    got = ours(images, return_tensors="np")["pixel_values"]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=1e-6)
    ours.save_pretrained(tmp_path / "ours")
    reference.save_pretrained(tmp_path / "theirs")
    from microformers import AutoImageProcessor

    transformers = reference_module()
    back_in_reference = transformers.AutoImageProcessor.from_pretrained(str(tmp_path / "ours"))
    back_in_ours = AutoImageProcessor.from_pretrained(str(tmp_path / "theirs"))
    assert type(back_in_ours).__name__ == ours_name
    np.testing.assert_allclose(back_in_reference(images, return_tensors="np")["pixel_values"], want, atol=1e-6)
    np.testing.assert_allclose(back_in_ours(images, return_tensors="np")["pixel_values"], want, atol=1e-6)


# -- tokenizer and processor ---------------------------------------------------------------------------
def _reference_clip_tokenizer(model_max_length: int = 16) -> Any:
    """A tiny CLIP BPE vocabulary: every byte-level symbol, with and without the word-end mark, plus a few merges."""
    from tokenizers.pre_tokenizers import ByteLevel

    symbols = sorted(ByteLevel.alphabet())
    vocab = {symbol: index for index, symbol in enumerate(symbols)}
    vocab.update({symbol + "</w>": len(symbols) + index for index, symbol in enumerate(symbols)})
    merges = [("t", "h"), ("th", "e</w>"), ("c", "a"), ("ca", "t</w>"), ("d", "o"), ("do", "g</w>"), ("p", "h"),
              ("o", "t"), ("ph", "ot"), ("phot", "o</w>"), ("o", "f</w>")]  # fmt: skip
    for left, right in merges:
        vocab.setdefault(left + right, len(vocab))
    vocab["<|startoftext|>"] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    return reference_module().CLIPTokenizer(vocab=vocab, merges=merges, model_max_length=model_max_length)


TEXTS = ["a photo of the cat", "A  Photo of THE dog!", "it's 42 cats, isn't it?", "naïve café ☕", "<|endoftext|> x"]


def test_clip_tokenizer_ids_and_text_match(tmp_path: Path) -> None:
    from microformers import AutoTokenizer

    reference = _reference_clip_tokenizer()
    reference.save_pretrained(tmp_path / "theirs")
    ours = AutoTokenizer.from_pretrained(str(tmp_path / "theirs"))
    assert type(ours).__name__ == "CLIPTokenizerFast"
    for text in TEXTS:
        assert ours(text)["input_ids"] == reference(text)["input_ids"], text
    for options in ({"padding": True}, {"padding": "max_length", "max_length": 12, "truncation": True}):
        got, want = ours(TEXTS, **options), reference(TEXTS, **options)
        assert got["input_ids"] == want["input_ids"] and got["attention_mask"] == want["attention_mask"]
    ids = reference(TEXTS, padding=True)["input_ids"]
    for skip in (False, True):
        assert ours.batch_decode(ids, skip_special_tokens=skip) == reference.batch_decode(ids, skip_special_tokens=skip)
    ours.save_pretrained(tmp_path / "ours")
    back = reference_module().AutoTokenizer.from_pretrained(str(tmp_path / "ours"))
    assert back(TEXTS, padding=True)["input_ids"] == ids


SLOW_TEXTS = [
    "A photo of THE Cat",
    "  the\t\tcat   of\n\nthe  dog  ",  # whitespace runs, leading and trailing
    "it's 42 cats, isn't it?! ...",  # contractions, digits one by one, punctuation runs
    "naïve café, Ünïcödé e\u0301 ＡＢＣ",  # non-ASCII letters, a combining accent (NFC), full-width letters
    "emoji 😀🐈 ☕ and 中文",
    "<|startoftext|>photo<|endoftext|> x",
]


def _slow_clip_folder(folder: Path, *, with_tokenizer_config: bool = True) -> Path:
    """The files a slow CLIPTokenizer saved (vocab.json, merges.txt with its #version header, the token configs;
    no tokenizer.json), written by hand: the reference's save_pretrained always writes tokenizer.json now."""
    import json

    reference = _reference_clip_tokenizer()
    model = json.loads(reference.backend_tokenizer.to_str())["model"]
    merges = [" ".join(m) if isinstance(m, list) else m for m in model["merges"]]
    folder.mkdir(parents=True)
    (folder / "vocab.json").write_text(json.dumps(reference.get_vocab(), ensure_ascii=False), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")
    tokens = {"bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>",
              "pad_token": "<|endoftext|>"}  # fmt: skip
    (folder / "special_tokens_map.json").write_text(json.dumps(tokens))
    if with_tokenizer_config:
        config = {"tokenizer_class": "CLIPTokenizer", "model_max_length": 16, "do_lower_case": True, **tokens}
        (folder / "tokenizer_config.json").write_text(json.dumps(config))
    else:
        (folder / "config.json").write_text(json.dumps({"model_type": "clip"}))
    return folder


@pytest.mark.parametrize("with_tokenizer_config", [True, False], ids=["tokenizer_config", "model_config_only"])
def test_clip_tokenizer_loads_slow_vocab_and_merges_like_reference(tmp_path: Path, with_tokenizer_config: bool) -> None:
    from microformers import AutoTokenizer
    from microformers_clip import CLIPTokenizer

    folder = _slow_clip_folder(tmp_path / "slow", with_tokenizer_config=with_tokenizer_config)
    reference = reference_module().AutoTokenizer.from_pretrained(str(folder))
    ours = AutoTokenizer.from_pretrained(str(folder))
    assert type(reference).__name__ == "CLIPTokenizer"
    assert type(ours).__name__ == "CLIPTokenizerFast"
    assert (ours.bos_token, ours.eos_token, ours.pad_token) == (
        reference.bos_token, reference.eos_token, reference.pad_token)  # fmt: skip
    for text in SLOW_TEXTS:
        assert ours.tokenize(text) == reference.tokenize(text), text
        assert ours(text)["input_ids"] == reference(text)["input_ids"], text
    for options in ({"padding": True}, {"padding": "max_length", "max_length": 24, "truncation": True}):
        got, want = ours(SLOW_TEXTS, **options), reference(SLOW_TEXTS, **options)
        assert got["input_ids"] == want["input_ids"], options
        assert got["attention_mask"] == want["attention_mask"], options
    ids = reference(SLOW_TEXTS, padding=True)["input_ids"]
    for skip in (False, True):
        assert ours.batch_decode(ids, skip_special_tokens=skip) == reference.batch_decode(ids, skip_special_tokens=skip)
    # The class itself, from the folder and from the two files (the slow tokenizer's constructor arguments).
    direct = CLIPTokenizer.from_pretrained(str(folder))
    from_files = CLIPTokenizer(vocab_file=str(folder / "vocab.json"), merges_file=str(folder / "merges.txt"))
    assert direct(SLOW_TEXTS)["input_ids"] == from_files(SLOW_TEXTS)["input_ids"] == reference(SLOW_TEXTS)["input_ids"]
    # What we save from it (tokenizer.json) loads in the reference with the same ids.
    ours.save_pretrained(tmp_path / "ours")
    back = reference_module().AutoTokenizer.from_pretrained(str(tmp_path / "ours"))
    assert back(SLOW_TEXTS, padding=True)["input_ids"] == ids


def test_clip_tokenizer_slow_files_errors_name_the_fix(tmp_path: Path) -> None:
    from microformers.errors import ConfigError, FileMissingError
    from microformers_clip import CLIPTokenizer

    folder = _slow_clip_folder(tmp_path / "slow")
    vocab = (folder / "vocab.json").read_text(encoding="utf-8")
    with pytest.raises(FileMissingError, match="merges.txt"):
        CLIPTokenizer.from_files({"vocab.json": vocab})
    with pytest.raises(ConfigError, match="vocab.json"):
        CLIPTokenizer.from_files({"vocab.json": "{not json", "merges.txt": ""})
    with pytest.raises(ConfigError, match="needs both vocab"):
        CLIPTokenizer(vocab=str(folder / "vocab.json"))
    with pytest.raises(ConfigError, match="not both"):
        CLIPTokenizer(vocab=str(folder / "vocab.json"), vocab_file=str(folder / "vocab.json"), merges=[])
    with pytest.raises(FileMissingError, match="merges file"):
        CLIPTokenizer(vocab=str(folder / "vocab.json"), merges=str(folder / "missing.txt"))


def _siglip_spm(folder: Path) -> Path:
    """A tiny SentencePiece Unigram model with SigLIP's ids (``<pad>`` 0, ``</s>`` 1, ``<unk>`` 2)."""
    import sentencepiece

    if not (folder / "m.model").is_file():
        folder.mkdir(parents=True, exist_ok=True)
        texts = ["a photo of a cat", "two dogs playing in the snow", "the quick brown fox jumps over the lazy dog",
                 "hello world it is 42 degrees", "a car on the road at night"]  # fmt: skip
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter(texts * 20), model_prefix=str(folder / "m"), model_type="unigram", vocab_size=90,
            hard_vocab_limit=False, minloglevel=2, num_threads=1, pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
        )  # fmt: skip
    return folder / "m.model"


def _reference_siglip_tokenizer(tmp_path: Path) -> Any:
    return reference_module().SiglipTokenizer(vocab_file=str(_siglip_spm(tmp_path / "spm")))


def _reference_processor(kind: str, tmp_path: Path) -> Any:
    transformers = reference_module()
    if kind == "clip":
        from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

        image_processor = CLIPImageProcessorPil(size={"shortest_edge": 24}, crop_size={"height": 24, "width": 24})
        return transformers.CLIPProcessor(image_processor=image_processor, tokenizer=_reference_clip_tokenizer())
    from transformers.models.siglip.image_processing_pil_siglip import SiglipImageProcessorPil

    image_processor = SiglipImageProcessorPil(size={"height": 24, "width": 24})
    return transformers.SiglipProcessor(
        image_processor=image_processor, tokenizer=_reference_siglip_tokenizer(tmp_path)
    )


SIGLIP_TEXTS = ["A photo of a cat.", "Two  DOGS,playing!! in snow", "  naïve café ☕ x ", "it's 42°C — “quoted”",
                "a</s>b", "</s> start", "ｆｕｌｌ！", "a cat </s>", "</s>", "a cat</s></s>"]  # fmt: skip


def test_siglip_tokenizer_ids_and_text_match(tmp_path: Path) -> None:
    from microformers import AutoTokenizer

    reference = _reference_siglip_tokenizer(tmp_path)
    reference.save_pretrained(tmp_path / "theirs")
    ours = AutoTokenizer.from_pretrained(str(tmp_path / "theirs"))
    assert type(ours).__name__ == "SiglipTokenizer"
    for text in SIGLIP_TEXTS:
        assert ours(text)["input_ids"] == reference(text)["input_ids"], text
    options = {"padding": "max_length", "max_length": 12, "truncation": True}
    got, want = ours(SIGLIP_TEXTS, **options), reference(SIGLIP_TEXTS, **options)
    assert got["input_ids"] == want["input_ids"] and got["attention_mask"] == want["attention_mask"]
    pairs = (["a dog", "  the cat"], ["b</s>", "snow"])
    assert ours(*pairs)["input_ids"] == reference(*pairs)["input_ids"]
    ids = reference(SIGLIP_TEXTS)["input_ids"]
    for skip in (False, True):
        assert ours.batch_decode(ids, skip_special_tokens=skip) == reference.batch_decode(ids, skip_special_tokens=skip)
    start, end = next(span for span in ours("  a cat", return_offsets_mapping=True)["offset_mapping"] if span[1] > 0)
    assert "  a cat"[start:end] == "a"  # offsets point into the original text, leading spaces included
    ours.save_pretrained(tmp_path / "ours")
    back = reference_module().AutoTokenizer.from_pretrained(str(tmp_path / "ours"))
    assert back(SIGLIP_TEXTS)["input_ids"] == ids
    assert AutoTokenizer.from_pretrained(str(tmp_path / "ours"))(SIGLIP_TEXTS)["input_ids"] == ids


@pytest.mark.parametrize("kind", ["clip", "siglip"])
def test_processors_match_and_files_load_both_ways(tmp_path: Path, kind: str) -> None:
    from microformers import AutoProcessor

    reference = _reference_processor(kind, tmp_path)
    reference.save_pretrained(tmp_path / "theirs")
    ours = AutoProcessor.from_pretrained(str(tmp_path / "theirs"))
    assert type(ours).__name__ == type(reference).__name__
    images = _images()[:2]
    texts = TEXTS[:2] if kind == "clip" else SIGLIP_TEXTS[:2]
    options = {"padding": "max_length", "max_length": 14, "truncation": True}
    got = ours(images=images, text=texts, return_tensors="pt", **options)
    want = reference(images=images, text=texts, return_tensors="pt", **options)
    assert sorted(got.keys()) == sorted(want.keys())
    assert torch.equal(got["input_ids"], want["input_ids"])
    assert_close(got["pixel_values"], want["pixel_values"], atol=1e-6, what="pixel_values")
    ours.save_pretrained(tmp_path / "ours")
    back = reference_module().AutoProcessor.from_pretrained(str(tmp_path / "ours"))
    assert type(back).__name__ == type(reference).__name__
    again = back(images=images, text=texts, return_tensors="pt", **options)
    assert torch.equal(again["input_ids"], want["input_ids"])
    assert_close(again["pixel_values"], want["pixel_values"], atol=1e-6, what="pixel_values from our files")
    with pytest.raises(Exception, match="neither"):
        ours(text=texts[:1], not_an_option=True)
    # one (Pillow) backend: use_fast=True gets it, as the reference falls back without torchvision; others refused
    fast = AutoProcessor.from_pretrained(str(tmp_path / "theirs"), use_fast=True)
    assert_close(fast(images=images, return_tensors="pt")["pixel_values"], want["pixel_values"], atol=1e-6)
    with pytest.raises(microformers.ConfigError, match="backend='torchvision'"):
        AutoProcessor.from_pretrained(str(tmp_path / "theirs"), backend="torchvision")


# -- zero-shot-image-classification ------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["clip", "siglip"])
def test_zero_shot_pipeline_matches_reference(kind: str, tmp_path: Path) -> None:
    from microformers import pipeline
    from microformers_vision import ImageInputError

    tokenizer = _reference_clip_tokenizer()
    text = {**TEXT, "vocab_size": len(tokenizer), "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id}  # fmt: skip
    if kind == "clip":
        _, reference_model = make_reference_checkpoint(
            "CLIPConfig", "CLIPModel", tmp_path, **{**CLIP_TINY, "text_config": text}
        )
    else:  # SigLIP pads the texts to 64 tokens: a text tower with 64 positions
        text.update(max_position_embeddings=64, projection_size=VISION["hidden_size"])
        _, reference_model = make_reference_checkpoint(
            "SiglipConfig", "SiglipModel", tmp_path, text_config=text, vision_config=VISION
        )
    reference = _reference_processor(kind, tmp_path)
    model_folder = tmp_path / "model"
    reference_model.save_pretrained(model_folder)
    reference.save_pretrained(model_folder)
    theirs = reference_module().pipeline(
        "zero-shot-image-classification",
        model=reference_model,
        tokenizer=reference.tokenizer,
        image_processor=reference.image_processor,
    )
    ours = pipeline("zero-shot-image-classification", model=str(model_folder))  # processor files from the folder
    image = _images()[0]
    path = tmp_path / "image.png"
    image.save(path)
    labels = ["cat", "dog", "the photo", "car"]
    want = theirs(image, candidate_labels=labels)
    for inputs in (image, str(path), np.asarray(image)):
        got = ours(inputs, candidate_labels=labels)
        assert [g["label"] for g in got] == [w["label"] for w in want]
        np.testing.assert_allclose([g["score"] for g in got], [w["score"] for w in want], atol=1e-4)
    options = {"candidate_labels": labels[:2], "hypothesis_template": "a {} here"}
    got, want = ours([image, str(path)], **options), theirs([image, str(path)], **options)
    assert [[g["label"] for g in row] for row in got] == [[w["label"] for w in row] for row in want]
    np.testing.assert_allclose([g["score"] for g in got[1]], [w["score"] for w in want[1]], atol=1e-4)
    with pytest.raises(ImageInputError, match="URL"):
        ours("https://example.com/cat.png", candidate_labels=labels)
    for bad, match in (
        ({}, "needs candidate_labels"),
        ({"candidate_labels": []}, "non-empty list of label strings"),
        ({"candidate_labels": ["cat", 3]}, "non-empty list of label strings"),
        ({"candidate_labels": labels, "hypothesis_template": "no slot"}, "hypothesis_template='no slot'.*\\{\\}"),
        ({"candidate_labels": labels, "tokenizer_kwargs": "max_length=4"}, "tokenizer_kwargs="),
    ):
        with pytest.raises(microformers.ConfigError, match=match):
            ours(image, **bad)
