"""Model helpers training scripts call, and load/save arguments, compared with the reference (issue 18 item 4)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers

import microformers
import microformers.modeling
from microformers import MicroformersError
from parity.harness import assert_close, load_ours, load_reference, make_reference_checkpoint, random_ids

LLAMA = dict(
    vocab_size=61, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=64,
)


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    tmp = tmp_path_factory.mktemp("llama")
    return make_reference_checkpoint("LlamaConfig", "LlamaForCausalLM", tmp, tie_word_embeddings=False, **LLAMA)


@pytest.fixture(scope="module")
def llama_tied(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    tmp = tmp_path_factory.mktemp("llama-tied")
    return make_reference_checkpoint("LlamaConfig", "LlamaForCausalLM", tmp, tie_word_embeddings=True, **LLAMA)


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    return make_reference_checkpoint(
        "BertConfig", "BertForMaskedLM", tmp_path_factory.mktemp("bert"), vocab_size=50, hidden_size=32,
        intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=32,
    )


def test_num_parameters_matches_reference(
    llama: tuple[Path, object], llama_tied: tuple[Path, object], bert: tuple[Path, object]
) -> None:
    for (folder, reference), auto in (
        (llama, "AutoModelForCausalLM"), (llama_tied, "AutoModelForCausalLM"), (bert, "AutoModelForMaskedLM")
    ):
        ours = load_ours(folder, auto)
        for only_trainable in (False, True):
            for exclude in (False, True):
                expected = reference.num_parameters(only_trainable=only_trainable, exclude_embeddings=exclude)
                assert ours.num_parameters(only_trainable=only_trainable, exclude_embeddings=exclude) == expected
        ours.get_input_embeddings().weight.requires_grad_(False)
        frozen = ours.get_input_embeddings().weight.numel()
        assert ours.num_parameters(only_trainable=True) == ours.num_parameters() - frozen


@pytest.mark.parametrize("tied, new, multiple", [(False, 70, 8), (True, 70, 8), (False, 50, None), (True, None, 16)])
def test_resize_token_embeddings_matches_reference(
    llama: tuple[Path, object], llama_tied: tuple[Path, object], tied: bool, new: int | None, multiple: int | None
) -> None:
    folder, _ = llama_tied if tied else llama
    ours, reference = load_ours(folder), load_reference(folder)
    old_embed = ours.get_input_embeddings().weight.detach().clone()
    got = ours.resize_token_embeddings(new, pad_to_multiple_of=multiple)
    want = reference.resize_token_embeddings(new, pad_to_multiple_of=multiple)
    assert got.weight.shape == want.weight.shape
    assert ours.config.vocab_size == reference.config.vocab_size == want.weight.shape[0]
    head, ref_head = ours.get_output_embeddings(), reference.get_output_embeddings()
    assert head.weight.shape == ref_head.weight.shape
    assert (head.weight is got.weight) == (ref_head.weight is want.weight)  # tied heads follow
    kept = min(old_embed.shape[0], got.weight.shape[0])
    assert torch.equal(got.weight[:kept], old_embed[:kept])  # exact: resizing copies the kept rows
    assert torch.isfinite(got.weight).all() and torch.isfinite(head.weight).all()
    # rows the old vocabulary had still give the reference's logits
    ids = random_ids(min(kept, 61), batch=1, length=5)
    assert_close(ours(ids).logits[..., :kept], reference(ids).logits[..., :kept])
    assert ours.resize_token_embeddings() is got  # no arguments: the embeddings, unchanged


def test_resize_bert_tied_head_and_bias(bert: tuple[Path, object], tmp_path: Path) -> None:
    folder, _ = bert
    ours, reference = load_ours(folder, "AutoModelForMaskedLM"), load_reference(folder, "AutoModelForMaskedLM")
    ours.resize_token_embeddings(64, mean_resizing=False)
    reference.resize_token_embeddings(64, mean_resizing=False)
    assert ours.cls.predictions.decoder.weight is ours.get_input_embeddings().weight
    assert ours.cls.predictions.decoder.bias.shape == (64,) == reference.cls.predictions.decoder.bias.shape
    ids = random_ids(50, batch=1, length=6)
    assert_close(ours(ids).logits[..., :50], reference(ids).logits[..., :50])
    ours.save_pretrained(tmp_path / "resized")
    again = load_reference(tmp_path / "resized", "AutoModelForMaskedLM")
    assert again.config.vocab_size == 64
    assert_close(ours(ids).logits, again(ids).logits)


def test_resize_refuses_bad_sizes(llama: tuple[Path, object]) -> None:
    ours = load_ours(llama[0])
    for bad in (0, -3, 2.5):
        with pytest.raises(MicroformersError, match="new_num_tokens"):
            ours.resize_token_embeddings(bad)
    with pytest.raises(MicroformersError, match="pad_to_multiple_of"):
        ours.resize_token_embeddings(64, pad_to_multiple_of=0)


def test_enable_input_require_grads_like_reference(llama: tuple[Path, object]) -> None:
    folder, _ = llama
    ids = random_ids(61, batch=1, length=4)
    for model in (load_ours(folder), load_reference(folder)):
        model.requires_grad_(False)
        captured: list[torch.Tensor] = []
        model.get_input_embeddings().register_forward_hook(lambda m, i, o, seen=captured: seen.append(o))
        model(ids)
        assert not captured[-1].requires_grad
        model.enable_input_require_grads()
        model(ids)
        assert captured[-1].requires_grad
        model.disable_input_require_grads()
        model(ids)
        assert not captured[-1].requires_grad


@pytest.mark.parametrize("device_map", ["auto", "cpu", torch.device("cpu"), {"": "cpu"}, {"model": "cpu", "lm_head": "cpu"}])
def test_device_map_places_and_records(llama: tuple[Path, object], device_map: object) -> None:
    folder, reference = llama
    ours = load_ours(folder, device_map=device_map)
    assert all(p.device.type == "cpu" for p in ours.parameters())
    expected = device_map if isinstance(device_map, dict) else {"": "cpu" if device_map == "auto" else device_map}
    assert ours.hf_device_map == expected
    ids = random_ids(61, batch=1, length=4)
    assert_close(ours(ids).logits, reference(ids).logits)


def test_device_map_errors_name_the_argument(llama: tuple[Path, object]) -> None:
    folder, _ = llama
    with pytest.raises(MicroformersError, match="device_map gives no device for lm_head"):
        load_ours(folder, device_map={"model": "cpu"})
    with pytest.raises(MicroformersError, match="device_map entry 'nope'"):
        load_ours(folder, device_map={"": "cpu", "nope": "cpu"})
    with pytest.raises(MicroformersError, match="offload_folder.*places nothing on disk"):
        load_ours(folder, device_map={"": "cpu"}, offload_folder=str(folder / "offload"))
    with pytest.raises(MicroformersError, match="no offload_folder was given"):
        load_ours(folder, device_map={"model": "cpu", "lm_head": "disk"})


def test_attn_implementation_checked_at_load(llama: tuple[Path, object]) -> None:
    folder = llama[0]
    with pytest.raises(MicroformersError, match=r"attention implementation.*'nope'(?s:.*)eager.*sdpa"):
        load_ours(folder, attn_implementation="nope")
    with pytest.raises(MicroformersError, match="'nope'"):
        microformers.AutoModelForCausalLM.from_config(load_ours(folder).config, attn_implementation="nope")
    with pytest.raises(MicroformersError, match="from_config.. does not take use_cahce"):
        microformers.AutoModelForCausalLM.from_config(load_ours(folder).config, use_cahce=False)
    model = load_ours(folder, attn_implementation="eager")
    assert model.config._attn_implementation == "eager"


def test_auto_config_accepts_a_config_json_path(llama: tuple[Path, object]) -> None:
    folder, _ = llama
    from_file = microformers.AutoConfig.from_pretrained(str(folder / "config.json"))
    from_folder = microformers.AutoConfig.from_pretrained(str(folder))
    assert type(from_file) is type(from_folder) and from_file.to_dict() == from_folder.to_dict()
    reference = load_reference.__globals__["reference_module"]().AutoConfig.from_pretrained(str(folder / "config.json"))
    assert from_file.hidden_size == reference.hidden_size and from_file.vocab_size == reference.vocab_size
    assert type(from_file).from_pretrained(folder / "config.json").hidden_size == 32


def test_push_to_hub_refused_everywhere(llama: tuple[Path, object], tmp_path: Path) -> None:
    folder, _ = llama
    model = load_ours(folder)
    objects = [model, model.config, model.generation_config]
    for obj in objects:
        with pytest.raises(MicroformersError, match="push_to_hub=True.*upload_folder"):
            obj.save_pretrained(tmp_path / "out", push_to_hub=True)
    assert not (tmp_path / "out").exists()
    for obj in (model, model.config):
        with pytest.raises(MicroformersError, match="push_to_hub"):
            obj.push_to_hub("me/model")


def test_push_to_hub_refused_for_tokenizer(tmp_path: Path) -> None:
    pytest.importorskip("tokenizers", reason="the tokenizer backend (microformers-tokenizers) needs tokenizers")
    from tokenizers import Tokenizer, models

    folder = tmp_path / "tok"
    folder.mkdir()
    Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]")).save(str(folder / "tokenizer.json"))
    tokenizer = microformers.AutoTokenizer.from_pretrained(folder)
    with pytest.raises(MicroformersError, match="push_to_hub=True"):
        tokenizer.save_pretrained(tmp_path / "out", push_to_hub=True)
    with pytest.raises(MicroformersError, match="push_to_hub"):
        tokenizer.push_to_hub("me/tok")


@pytest.mark.parametrize(("tied", "max_shard_size"), [(False, "50GB"), (True, "4KB")])
def test_safe_serialization_false_writes_legacy_bin_the_reference_loads(
    llama: tuple[Path, object], llama_tied: tuple[Path, object], tied: bool, max_shard_size: str, tmp_path: Path
) -> None:
    """pytorch_model.bin (or shards with pytorch_model.bin.index.json), read by the reference and by us."""
    folder = (llama_tied if tied else llama)[0]
    model = load_ours(folder)
    out = tmp_path / "pickle"
    model.save_pretrained(out, safe_serialization=False, max_shard_size=max_shard_size)
    names = {p.name for p in out.iterdir()} - {"config.json", "generation_config.json"}
    assert not any(name.endswith(".safetensors") for name in names)
    if max_shard_size == "50GB":
        assert names == {"pytorch_model.bin"}
    else:
        index = json.loads((out / "pytorch_model.bin.index.json").read_text())
        shards = set(index["weight_map"].values())
        assert len(shards) > 1 and names == shards | {"pytorch_model.bin.index.json"}
        assert all(name.startswith("pytorch_model-") and name.endswith(".bin") for name in shards)
        assert ("lm_head.weight" in index["weight_map"]) is not tied  # a tied head is saved once, as the embeddings
    ids = random_ids(61, 2, 7)
    expected = model(ids).logits
    reference = load_reference(out)
    with torch.no_grad():
        assert_close(reference(ids).logits, expected, atol=1e-5)
    ours = load_ours(out, use_safetensors=False)
    # exact: the same model code on the same inputs, with weights save/load copied byte for byte
    assert torch.equal(ours(ids).logits, expected)
    model.save_pretrained(out)  # back to safetensors: the pickle files are superseded, not left beside it
    assert {p.name for p in out.iterdir()} == {"config.json", "generation_config.json", "model.safetensors"}


def _hold_integers(model: torch.nn.Module) -> None:
    """The toy model both libraries build: a linear layer, an int32 parameter and an int64 buffer."""
    model.linear = torch.nn.Linear(2, 2)
    model.codes = torch.nn.Parameter(torch.arange(4, dtype=torch.int32), requires_grad=False)
    model.register_buffer("ids", torch.arange(4, dtype=torch.int64))


class _ReferenceIntConfig(transformers.PretrainedConfig):
    model_type = "int-holder"


class _ReferenceIntHolder(transformers.PreTrainedModel):
    config_class = _ReferenceIntConfig

    def __init__(self, config: _ReferenceIntConfig) -> None:
        super().__init__(config)
        _hold_integers(self)
        self.post_init()

    def _init_weights(self, module: torch.nn.Module) -> None:
        pass


class _IntHolder(microformers.modeling.PreTrainedModel):
    config_class = microformers.PretrainedConfig

    def __init__(self, config: microformers.PretrainedConfig) -> None:
        super().__init__(config)
        _hold_integers(self)
        self.post_init()


def test_integer_tensors_stored_in_another_dtype_load_as_the_reference_loads_them(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    stored = {
        "linear.weight": torch.ones(2, 2), "linear.bias": torch.zeros(2),
        "codes": torch.tensor([3.0, 4.0, 5.0, 6.0]), "ids": torch.tensor([1, 2, 3, 4], dtype=torch.int32),
    }
    _ReferenceIntConfig().save_pretrained(tmp_path)
    save_file(stored, tmp_path / "model.safetensors", metadata={"format": "pt"})
    expected = _ReferenceIntHolder.from_pretrained(tmp_path)
    got = _IntHolder.from_pretrained(tmp_path, config=microformers.PretrainedConfig())
    for name in ("codes", "ids"):
        want, have = getattr(expected, name), getattr(got, name)
        assert (have.dtype, have.tolist()) == (want.dtype, want.tolist())
