"""``PreTrainedModel.from_pretrained``: arguments, configs, dtypes, devices, checks of declared sizes against
the checkpoint, missing/unexpected/tied tensors and how they are reported."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from modeling_stand_ins import _Flat, _Initialised, _Mixed, _Small

from microformers import AutoModelForCausalLM, CheckpointError, ConfigError, PretrainedConfig
from microformers import modeling as modeling_module

# From test_modeling_full_mutants.py: Behaviour of ``microformers.modeling`` that the full mutation run (workspace
# hmod) found unasserted. See docs/reliability.md, "Mutation testing": each test here fails with at least one mutant
# of ``kernel/src/microformers/modeling.py`` that the other judging tests let survive, and passes on the real code.


# -- loading: which missing tensors are errors --------------------------------------------------------------


def test_a_missing_top_level_parameter_or_persistent_buffer_is_an_error_unless_not_strict(tmp_path: Path) -> None:
    model = _Flat(PretrainedConfig())
    model.save_pretrained(tmp_path, state_dict={k: v for k, v in model.state_dict().items() if k.startswith("inner.")})
    with pytest.raises(CheckpointError, match=r"is missing 2 tensor\(s\) the model needs: scale, table\. "):
        _Flat.from_pretrained(tmp_path, config=PretrainedConfig())
    loaded, info = _Flat.from_pretrained(tmp_path, config=PretrainedConfig(), strict=False, output_loading_info=True)
    assert info["missing_keys"] == ["scale", "table"]
    torch.testing.assert_close(loaded.inner.weight, model.inner.weight)


def test_a_base_model_missing_its_own_tensors_is_an_error_but_a_head_model_missing_its_head_is_not(
    toy_model: torch.nn.Module, tmp_path: Path
) -> None:
    from microformers_test_toy.modeling_toy import ToyConfig, ToyForCausalLM, ToyModel

    config = ToyConfig(vocab_size=40, hidden_size=24, num_layers=2, tie_word_embeddings=False)
    base = ToyModel(config)
    state = base.state_dict()
    base.save_pretrained(tmp_path / "base")
    base.save_pretrained(tmp_path / "holed", state_dict={k: v for k, v in state.items() if k != "blocks.1.proj.weight"})
    with pytest.raises(CheckpointError, match=r"is missing 1 tensor\(s\) the model needs: blocks\.1\.proj\.weight\. "):
        ToyModel.from_pretrained(tmp_path / "holed")
    head, info = ToyForCausalLM.from_pretrained(tmp_path / "base", output_loading_info=True)  # untied head: new
    assert info["missing_keys"] == ["lm_head.weight"]
    torch.testing.assert_close(head.model.embed.weight, base.embed.weight)
    assert not head.lm_head.weight.is_meta


# -- a format that carries the configuration in its weights file (as GGUF does) ----------------------------


@pytest.fixture
def onefile_folder(toy_model: torch.nn.Module, tmp_path: Path, one_file_format: Any) -> Path:
    config = {"model_type": "toy", "vocab_size": 40, "hidden_size": 24, "num_layers": 3}
    tensors = {k: v.tolist() for k, v in toy_model.state_dict().items() if k != "lm_head.weight"}
    (tmp_path / "model.onefile").write_text(json.dumps({"config": config, "tensors": tensors}))
    return tmp_path


def test_a_format_that_carries_the_config_is_read_with_the_overrides(
    toy_model: torch.nn.Module, onefile_folder: Path
) -> None:
    assert not (onefile_folder / "config.json").exists()
    model = type(toy_model).from_pretrained(onefile_folder, flavour="spicy")
    assert (model.config.hidden_size, model.config.num_layers, model.config.flavour) == (24, 3, "spicy")
    torch.testing.assert_close(model.model.embed.weight, toy_model.model.embed.weight)


def test_a_bad_config_in_the_weights_file_names_that_file(toy_model: torch.nn.Module, onefile_folder: Path) -> None:
    path = onefile_folder / "model.onefile"
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "config": {**data["config"], "id2label": [1]}}))
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))} holds a value ToyConfig cannot use"):
        type(toy_model).from_pretrained(onefile_folder)
    path.write_text(json.dumps({**data, "config": {**data["config"], "num_layers": -2}}))
    with pytest.raises(ConfigError, match=rf"^num_layers=-2 in {re.escape(str(path))} must be a non-negative integer"):
        type(toy_model).from_pretrained(onefile_folder)


def test_config_settings_passed_to_from_pretrained_reach_the_config(
    toy_model: torch.nn.Module, saved_toy: Path
) -> None:
    model = type(toy_model).from_pretrained(saved_toy, flavour="spicy", output_hidden_states=True)
    assert model.config.flavour == "spicy" and model.config.output_hidden_states is True


def test_a_loaded_model_knows_where_it_came_from(toy_model: torch.nn.Module, saved_toy: Path) -> None:
    assert type(toy_model).from_pretrained(saved_toy).name_or_path == str(saved_toy)


class _Frozen(modeling_module.PreTrainedModel):
    """A parameter made from values and frozen at construction, beside trainable ones."""

    config_class = PretrainedConfig

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__(config)
        self.fixed = torch.nn.Parameter(torch.ones(3), requires_grad=False)
        self.norm = torch.nn.LayerNorm(3)
        self.post_init()


def test_loading_keeps_which_parameters_are_trainable(tmp_path: Path) -> None:
    model = _Frozen(PretrainedConfig())
    with torch.no_grad():
        model.fixed.mul_(2.0)
    model.save_pretrained(tmp_path)
    loaded = _Frozen.from_pretrained(tmp_path, config=PretrainedConfig())
    assert {n: p.requires_grad for n, p in loaded.named_parameters()} == {
        "fixed": False,
        "norm.weight": True,
        "norm.bias": True,
    }
    torch.testing.assert_close(loaded.fixed, torch.full((3,), 2.0))


class _Tied(modeling_module.PreTrainedModel):
    """Two tied targets: a nested one, and one whose module the model does not have."""

    config_class = PretrainedConfig
    _tied_weights_keys = {"absent.head.weight": "embed.weight", "out.head.weight": "embed.weight"}

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__(config)
        self.embed = torch.nn.Embedding(5, 3)
        self.out = torch.nn.Module()
        self.out.head = torch.nn.Linear(3, 5, bias=False)
        self.post_init()


def test_tied_targets_are_tied_at_any_depth_and_an_absent_one_is_skipped() -> None:
    model = _Tied(PretrainedConfig())
    assert model.out.head.weight is model.embed.weight
    assert model.tied_parameter_names() == {"absent.head.weight", "out.head.weight"}
    untied = _Tied(PretrainedConfig(tie_word_embeddings=False))
    assert untied.out.head.weight is not untied.embed.weight
    assert untied.tied_parameter_names() == set()


# -- dtypes ----------------------------------------------------------------------------------------------------


def test_dtype_names_and_objects_and_a_wrong_one(toy_model: torch.nn.Module, saved_toy: Path) -> None:
    cls = type(toy_model)
    assert cls.from_pretrained(saved_toy, dtype=torch.float64).dtype == torch.float64
    toy_model.to(torch.bfloat16).save_pretrained(saved_toy)
    assert cls.from_pretrained(saved_toy).dtype == torch.bfloat16  # "auto": the saved dtype
    assert cls.from_pretrained(saved_toy, dtype="torch.bfloat16").dtype == torch.bfloat16
    assert cls.from_pretrained(saved_toy, dtype=None).dtype == torch.float32
    assert cls.from_pretrained(saved_toy, torch_dtype="float16").dtype == torch.float16
    with pytest.raises(
        ConfigError, match=r"^dtype='float77' is not a torch dtype; use e\.g\. 'float32', 'bfloat16' or 'auto'$"
    ):
        cls.from_config(toy_model.config, dtype="float77")
    with pytest.raises(ConfigError, match=r"^dtype='' is not a torch dtype"):
        cls.from_config(toy_model.config, dtype="")


def test_an_integer_parameter_stored_in_another_dtype_is_cast_to_its_own_as_the_reference_does(
    tmp_path: Path,
) -> None:
    for stored in (torch.tensor([3.0, 4.0, 5.0, 6.0]), torch.tensor([3, 4, 5, 6], dtype=torch.int64)):
        state = {**_Mixed(PretrainedConfig()).state_dict(), "codes": stored}
        _Mixed(PretrainedConfig()).save_pretrained(tmp_path / str(stored.dtype), state_dict=state)
        loaded = _Mixed.from_pretrained(tmp_path / str(stored.dtype), config=PretrainedConfig())
        assert loaded.codes.dtype == torch.int32 and loaded.codes.tolist() == [3, 4, 5, 6]


def test_an_integer_parameter_whose_stored_values_its_dtype_cannot_hold_is_refused(tmp_path: Path) -> None:
    # The reference truncates 3.5 to 3 and wraps 2**40 silently.
    for stored in (torch.tensor([3.5, 4.0, 5.0, 6.0]), torch.tensor([2**40, 4, 5, 6], dtype=torch.int64)):
        state = {**_Mixed(PretrainedConfig()).state_dict(), "codes": stored}
        folder = tmp_path / str(stored.dtype)
        _Mixed(PretrainedConfig()).save_pretrained(folder, state_dict=state)
        with pytest.raises(CheckpointError) as info:
            _Mixed.from_pretrained(folder, config=PretrainedConfig())
        assert str(info.value) == (
            f"tensor 'codes' in {folder / 'model.safetensors'} is stored as {stored.dtype} with values that "
            "torch.int32, the dtype of the model's 'codes', cannot hold exactly; the checkpoint is corrupt or was "
            "converted wrongly. Re-save it with torch.int32 values."
        )


class _Bytes(modeling_module.PreTrainedModel):
    """A persistent uint8 buffer (e.g. packed quantized weights)."""

    config_class = PretrainedConfig

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__(config)
        self.register_buffer("packed", torch.zeros(2, dtype=torch.uint8))
        self.post_init()


def test_signed_values_stored_for_an_unsigned_buffer_load_only_when_they_are_not_negative(tmp_path: Path) -> None:
    _Bytes(PretrainedConfig()).save_pretrained(
        tmp_path / "ok", state_dict={"packed": torch.tensor([1, 2], dtype=torch.int8)}
    )
    loaded = _Bytes.from_pretrained(tmp_path / "ok", config=PretrainedConfig())
    assert loaded.packed.dtype == torch.uint8 and loaded.packed.tolist() == [1, 2]
    state = {"packed": torch.tensor([-1, 2], dtype=torch.int8)}  # -1 would wrap to 255
    _Bytes(PretrainedConfig()).save_pretrained(tmp_path / "bad", state_dict=state)
    with pytest.raises(CheckpointError, match="stored as torch.int8 with values that torch.uint8"):
        _Bytes.from_pretrained(tmp_path / "bad", config=PretrainedConfig())


def test_missing_parameters_are_made_in_the_load_dtype_keeping_their_kind_and_trainability(tmp_path: Path) -> None:
    _Mixed(PretrainedConfig()).save_pretrained(tmp_path, state_dict={"linear.bias": torch.zeros(4)})
    loaded, info = _Mixed.from_pretrained(
        tmp_path, config=PretrainedConfig(), dtype=torch.bfloat16, strict=False, output_loading_info=True
    )
    assert info["missing_keys"] == ["frozen", "codes", "linear.weight"]
    kinds = {n: (p.dtype, p.requires_grad, p.is_meta) for n, p in loaded.named_parameters()}
    assert kinds == {
        "linear.weight": (torch.bfloat16, True, False),
        "linear.bias": (torch.bfloat16, True, False),
        "frozen": (torch.bfloat16, False, False),
        "codes": (torch.int32, False, False),
    }


# -- check_declared_sizes: config sizes the checkpoint's tensors cannot back ---------------------------------


class _Shapes:
    """A checkpoint format that reports its tensors' shapes without loading them."""

    def __init__(self, shapes: dict[str, tuple[int, ...]]) -> None:
        self._shapes = shapes

    def shapes(self, files: list[Path]) -> dict[str, tuple[int, ...]]:
        return self._shapes


_TWO_LAYERS = {"model.layers.0.w": (8, 4), "model.layers.1.w": (8, 4), "lm_head.weight": (10, 8)}


_CORRUPT = "The configuration is corrupt or belongs to another checkpoint; fix the value or use the matching files."


def _refusal(config: PretrainedConfig, fmt: object, files: list[Path], strict: bool = True) -> str | None:
    try:
        modeling_module.check_declared_sizes(config, fmt, files, strict)
    except ConfigError as exc:
        return str(exc)
    return None


def test_declared_layer_counts_may_exceed_the_checkpoints_layers_by_at_most_64(tmp_path: Path) -> None:
    files, fmt = [tmp_path / "model.safetensors"], _Shapes(_TWO_LAYERS)
    source = tmp_path / "config.json"
    for field in ("num_hidden_layers", "num_layers", "n_layer"):
        assert _refusal(PretrainedConfig(**{field: 66}), fmt, files) is None
        assert _refusal(PretrainedConfig(**{field: 67}), fmt, files) == (
            f"{field}=67 in {source} does not match the weights: its tensors have layer indices up to 1. {_CORRUPT}"
        )
    # strict=False: only the absolute limit
    assert _refusal(PretrainedConfig(num_hidden_layers=4096), fmt, files, strict=False) is None
    assert _refusal(PretrainedConfig(num_hidden_layers=4097), fmt, files, strict=False) == (
        f"num_hidden_layers=4097 in {source} does not match the weights: at most 4096. {_CORRUPT}"
    )
    # no layer index in any tensor name: up to 64 layers
    no_layers = _Shapes({"embed.weight": (10, 8)})
    assert _refusal(PretrainedConfig(num_layers=64), no_layers, files) is None
    assert _refusal(PretrainedConfig(num_layers=65), no_layers, files) == (
        f"num_layers=65 in {source} does not match the weights: its tensors have layer indices up to -1. {_CORRUPT}"
    )


def test_declared_sizes_without_shape_information_are_bounded_only_for_layers(tmp_path: Path) -> None:
    files, fmt = [tmp_path / "model.safetensors"], object()  # a format that cannot list shapes
    assert _refusal(PretrainedConfig(num_layers=4096, hidden_size=10**9), fmt, files) is None
    assert _refusal(PretrainedConfig(n_layer=4097), fmt, files) == (
        f"n_layer=4097 in {tmp_path / 'config.json'} does not match the weights: at most 4096. {_CORRUPT}"
    )


def test_declared_dimensions_may_not_exceed_the_largest_tensor_dimension(tmp_path: Path) -> None:
    files, fmt = [tmp_path / "model.safetensors"], _Shapes(_TWO_LAYERS)
    fields = (
        "hidden_size",
        "intermediate_size",
        "vocab_size",
        "head_dim",
        "num_attention_heads",
        "num_key_value_heads",
    )
    for field in fields:
        assert _refusal(PretrainedConfig(**{field: 10}), fmt, files) is None
        assert _refusal(PretrainedConfig(**{field: 0}), fmt, files) is None
        assert _refusal(PretrainedConfig(**{field: 11}), fmt, files) == (
            f"{field}=11 in {tmp_path / 'config.json'} does not match the weights: the largest tensor dimension in "
            f"the checkpoint is 10. {_CORRUPT}"
        )


def test_declared_sizes_must_be_non_negative_integers(tmp_path: Path) -> None:
    files, fmt = [tmp_path / "model.safetensors"], _Shapes(_TWO_LAYERS)
    for value in (-1, True, 2.0, "4"):
        assert _refusal(PretrainedConfig(num_key_value_heads=value), fmt, files) == (
            f"num_key_value_heads={value!r} in {tmp_path / 'config.json'} must be a non-negative integer; fix the file"
        )


# -- _materialise: shapes, kinds, what is missing or unused, and where it is reported ---------------------


def _save_state(folder: Path, state: dict[str, torch.Tensor], safe: bool = True, sharded: bool = False) -> Path:
    """Saves ``state``; returns the file that holds ``scale``."""
    _Flat(PretrainedConfig()).save_pretrained(
        folder, state_dict=state, safe_serialization=safe, max_shard_size=40 if sharded else "50GB"
    )
    if sharded:
        weight_map = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"]
        assert len(set(weight_map.values())) > 1
        return folder / weight_map["scale"]
    return folder / ("model.safetensors" if safe else "pytorch_model.bin")


def _flat_state(**changes: torch.Tensor) -> dict[str, torch.Tensor]:
    return {**_Flat(PretrainedConfig()).state_dict(), **changes}


def test_a_tensor_of_the_wrong_shape_is_refused_naming_file_and_shapes_or_reinitialised(tmp_path: Path) -> None:
    state = _flat_state(scale=torch.ones(4))
    for safe, sharded in ((True, False), (True, True), (False, False)):  # safetensors names the tensor's own file
        file = _save_state(tmp_path / f"{safe}{sharded}", state, safe, sharded)
        with pytest.raises(Exception) as info:
            _Flat.from_pretrained(file.parent, config=PretrainedConfig())
        assert str(info.value) == (
            f"tensor 'scale' in {file} has shape (4,), but the model built from config.json expects (3,) for it. "
            "The config does not match the weights; fix config.json, or pass ignore_mismatched_sizes=True to "
            "re-initialise this tensor."
        )
    loaded, info = _Flat.from_pretrained(
        tmp_path / "TrueFalse", config=PretrainedConfig(), ignore_mismatched_sizes=True, output_loading_info=True
    )
    assert info == {"missing_keys": ["scale"], "unexpected_keys": [], "mismatched_keys": [("scale", (4,), (3,))]}
    assert loaded.scale.shape == (3,) and not loaded.scale.is_meta
    torch.testing.assert_close(loaded.state_dict()["inner.weight"], state["inner.weight"])  # the rest still loads
    torch.testing.assert_close(loaded.state_dict()["table"], state["table"])


def test_integers_stored_for_a_floating_point_parameter_are_refused_naming_the_file(tmp_path: Path) -> None:
    for safe, sharded in ((True, False), (True, True), (False, False)):
        file = _save_state(tmp_path / f"{safe}{sharded}", _flat_state(scale=torch.arange(3)), safe, sharded)
        with pytest.raises(CheckpointError) as info:
            _Flat.from_pretrained(file.parent, config=PretrainedConfig())
        assert str(info.value) == (
            f"tensor 'scale' in {file} is stored as torch.int64, but the model's 'scale' holds floating-point "
            "values; the checkpoint is corrupt or was converted wrongly. Re-save it with floating-point weights."
        )


class _Wide(modeling_module.PreTrainedModel):
    """Twenty-one small parameters: more than the messages list."""

    config_class = PretrainedConfig

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__(config)
        for i in range(21):
            self.register_parameter(f"p{i:02d}", torch.nn.Parameter(torch.ones(2)))
        self.post_init()


def test_the_missing_tensor_error_lists_eight_names_and_counts_the_rest(tmp_path: Path) -> None:
    state = _Wide(PretrainedConfig()).state_dict()
    for kept, suffix in ((13, ""), (12, " and 1 more")):
        folder = tmp_path / str(kept)
        _Wide(PretrainedConfig()).save_pretrained(folder, state_dict=dict(list(state.items())[:kept]))
        shown = ", ".join(f"p{i:02d}" for i in range(kept, kept + 8))
        with pytest.raises(CheckpointError) as info:
            _Wide.from_pretrained(folder, config=PretrainedConfig())
        assert str(info.value) == (
            f"checkpoint {folder / 'model.safetensors'} is missing {21 - kept} tensor(s) the model needs: {shown}"
            f"{suffix}. The checkpoint is incomplete or for a different architecture; pass strict=False to "
            "initialise them randomly instead."
        )


def test_unused_and_newly_initialised_weights_are_logged_twenty_at_most_and_returned_in_full(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = {f"extra{i:02d}": torch.zeros(1) for i in range(21)}
    file = _save_state(tmp_path, state)
    with caplog.at_level("WARNING", logger="microformers"):
        _, info = _Wide.from_pretrained(tmp_path, config=PretrainedConfig(), strict=False, output_loading_info=True)
    names = [f"p{i:02d}" for i in range(21)]
    assert info == {"missing_keys": names, "unexpected_keys": sorted(state), "mismatched_keys": []}
    assert [r.getMessage() for r in caplog.records] == [
        f"Unused weights in {file}: " + ", ".join(sorted(state)[:20]),
        f"Newly initialised weights (not in {file}): " + ", ".join(names[:20]),
    ]


def test_a_sharded_checkpoint_is_reported_by_its_folder(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    model = _Wide(PretrainedConfig())
    state = {**dict(list(model.state_dict().items())[:20]), "unused": torch.zeros(1)}
    model.save_pretrained(tmp_path, state_dict=state, max_shard_size=40)
    assert len(list(tmp_path.glob("*.safetensors"))) > 1
    with caplog.at_level("WARNING", logger="microformers"):
        _Wide.from_pretrained(tmp_path, config=PretrainedConfig(), strict=False)
    assert [r.getMessage() for r in caplog.records] == [
        f"Unused weights in {tmp_path}: unused",
        f"Newly initialised weights (not in {tmp_path}): p20",
    ]
    with pytest.raises(CheckpointError, match=rf"^checkpoint {re.escape(str(tmp_path))} is missing 1 tensor"):
        _Wide.from_pretrained(tmp_path, config=PretrainedConfig())


class _Lenient(_Wide):
    _keys_to_ignore_on_load_missing = [r"^p0[0-4]$"]
    _keys_to_ignore_on_load_unexpected = [r"^old\."]


def test_keys_the_model_ignores_are_neither_reported_nor_errors(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = {**dict(list(_Wide(PretrainedConfig()).state_dict().items())[5:]), "old.a": torch.zeros(1)}
    state["new.b"] = torch.zeros(1)
    file = _save_state(tmp_path, state)
    with caplog.at_level("WARNING", logger="microformers"):
        loaded, info = _Lenient.from_pretrained(tmp_path, config=PretrainedConfig(), output_loading_info=True)
    assert info == {"missing_keys": [], "unexpected_keys": ["new.b"], "mismatched_keys": []}
    assert [r.getMessage() for r in caplog.records] == [f"Unused weights in {file}: new.b"]
    assert not loaded.p00.is_meta


def test_weights_missing_from_the_checkpoint_get_the_reference_initialisation(tmp_path: Path) -> None:
    _Initialised(PretrainedConfig()).save_pretrained(tmp_path, state_dict={"embed.weight": torch.zeros(8, 64)})
    torch.manual_seed(0)
    config = PretrainedConfig(initializer_range=0.5)
    loaded = _Initialised.from_pretrained(tmp_path, config=config, strict=False)
    assert abs(loaded.linear.weight.std().item() - 0.5) < 0.05 and not loaded.linear.bias.any()
    assert not loaded.embed.weight.any()  # loaded, not initialised


class _HeadFirst(modeling_module.PreTrainedModel):
    """The tied head is registered before the embedding it shares its weight with, and before other layers."""

    config_class = PretrainedConfig
    _tied_weights_keys = {"head.weight": "embed.weight"}

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__(config)
        self.head = torch.nn.Linear(3, 5, bias=False)
        self.embed = torch.nn.Embedding(5, 3)
        self.norm = torch.nn.LayerNorm(3)
        self.post_init()


def test_a_tied_weight_listed_first_does_not_stop_the_others_loading(tmp_path: Path) -> None:
    model = _HeadFirst(PretrainedConfig())
    with torch.no_grad():
        model.norm.weight.fill_(3.0)
    model.save_pretrained(tmp_path)
    loaded = _HeadFirst.from_pretrained(tmp_path, config=PretrainedConfig())
    torch.testing.assert_close(loaded.embed.weight, model.embed.weight)
    torch.testing.assert_close(loaded.norm.weight, model.norm.weight)
    assert loaded.head.weight is loaded.embed.weight


def test_a_buffer_stored_in_another_float_dtype_is_cast_to_the_models(tmp_path: Path) -> None:
    _save_state(tmp_path, _flat_state(table=torch.tensor([1.5, 2.5, 3.5], dtype=torch.float16)))
    loaded = _Flat.from_pretrained(tmp_path, config=PretrainedConfig())
    # exact: float16 to float32 is exact
    assert loaded.table.dtype == torch.float32 and loaded.table.tolist() == [1.5, 2.5, 3.5]


# From test_modeling_mutants.py: Behaviour of ``microformers.modeling`` that the mutation pass found unasserted
# (docs/reliability.md).


def test_a_declared_size_larger_than_the_weights_is_refused_with_the_fix(saved_toy: Path) -> None:
    config_json = saved_toy / "config.json"
    config_json.write_text(json.dumps({**json.loads(config_json.read_text()), "vocab_size": 1_000_000}))
    with pytest.raises(ConfigError) as info:
        AutoModelForCausalLM.from_pretrained(saved_toy)
    message = str(info.value)
    assert message.startswith("vocab_size=1000000 in ") and "does not match the weights" in message
    assert message.endswith(
        "The configuration is corrupt or belongs to another checkpoint; fix the value or use the matching files."
    )


# From test_modeling_rest_mutants.py: Behaviour of ``microformers.modeling`` that the seventh mutation pass
# (workspace jmod) found unasserted. See docs/reliability.md, "Mutation testing": each test here fails with at least
# one mutant of ``kernel/src/microformers/modeling.py`` (``from_pretrained``, construction on meta, ``post_init``)
# that the other judging tests let survive, and passes on the real code.


@pytest.fixture
def small_folder(tmp_path: Path) -> Path:
    torch.manual_seed(0)
    folder = tmp_path / "small"
    _Small(PretrainedConfig(flavour="saved")).save_pretrained(folder)
    return folder


def _message(exc: pytest.ExceptionInfo[BaseException]) -> str:
    return str(exc.value)


# -- arguments from_pretrained takes, ignores or refuses ------------------------------------------------------


def test_trust_remote_code_and_low_cpu_mem_usage_are_accepted_and_reach_no_config(small_folder: Path) -> None:
    model = _Small.from_pretrained(
        small_folder, config=PretrainedConfig(), trust_remote_code=True, low_cpu_mem_usage=True
    )
    assert isinstance(model, _Small)
    loaded = _Small.from_pretrained(small_folder, trust_remote_code=True, low_cpu_mem_usage=True)
    assert loaded.config.flavour == "saved"
    assert not hasattr(loaded.config, "trust_remote_code") and not hasattr(loaded.config, "low_cpu_mem_usage")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"offload_folder": "off"}, "offload_folder only apply(ies) to a model placed with device_map"),
        ({"offload_state_dict": True}, "offload_state_dict only apply(ies) to a model placed with device_map"),
        ({"offload_buffers": True}, "offload_buffers=True is not supported"),
        ({"offload_folder": "off", "offload_buffers": True}, "offload_folder only apply(ies)"),
        ({"device_map": {"": "disk"}}, "device_map puts '' on disk, but no offload_folder was given"),
        ({"device_map": {"inner": "cpu", "fixed": "disk"}}, "device_map puts fixed on disk, but no offload_folder"),
    ],
)
def test_disk_offload_without_what_it_needs_is_refused_naming_it(
    small_folder: Path, kwargs: dict[str, Any], message: str
) -> None:
    # disk offload itself: tests/integration/test_offload.py
    with pytest.raises(ConfigError) as info:
        _Small.from_pretrained(small_folder, config=PretrainedConfig(), **kwargs)
    assert _message(info).startswith(message)


def test_offload_arguments_that_ask_for_nothing_are_accepted(small_folder: Path) -> None:
    model = _Small.from_pretrained(
        small_folder, config=PretrainedConfig(), offload_folder=None, offload_state_dict=False, offload_buffers=False
    )
    assert isinstance(model, _Small)


def test_arguments_nothing_uses_are_refused_by_name(small_folder: Path) -> None:
    with pytest.raises(ConfigError) as info:
        _Small.from_pretrained(small_folder, config=PretrainedConfig(), flavour="x", colour="y")
    assert _message(info) == (
        "from_pretrained() does not use colour, flavour: neither a loading argument nor a setting of "
        "PretrainedConfig; check the spelling (settings of a config= object go on it)"
    )
    with pytest.raises(ConfigError) as info:  # a state dict is not a config setting either
        _Small.from_pretrained(small_folder, state_dict={})
    assert _message(info).startswith("from_pretrained() does not use state_dict: neither a loading argument nor a ")


def test_a_config_given_as_a_folder_is_read_from_that_folder(small_folder: Path, tmp_path: Path) -> None:
    PretrainedConfig(flavour="other").save_pretrained(tmp_path / "config_only")
    model = _Small.from_pretrained(small_folder, config=str(tmp_path / "config_only"))
    assert model.config.flavour == "other"
    assert _Small.from_pretrained(small_folder).config.flavour == "saved"


def test_attn_implementation_is_checked_and_set_on_the_config(small_folder: Path) -> None:
    assert _Small.from_pretrained(small_folder, attn_implementation="eager").config._attn_implementation == "eager"
    with pytest.raises(Exception, match=r"attn_implementation"):
        _Small.from_pretrained(small_folder, attn_implementation="no-such-attention")


def test_torch_dtype_is_used_when_given(small_folder: Path) -> None:
    assert _Small.from_pretrained(small_folder, torch_dtype=torch.float16).inner.weight.dtype == torch.float16
    assert _Small.from_pretrained(small_folder, torch_dtype="bfloat16").inner.weight.dtype == torch.bfloat16
    assert _Small.from_pretrained(small_folder).inner.weight.dtype == torch.float32


def test_device_and_device_map_place_the_loaded_model(small_folder: Path) -> None:
    on_meta = _Small.from_pretrained(small_folder, device="meta")
    assert all(p.is_meta for p in on_meta.parameters())
    placed = _Small.from_pretrained(small_folder, device_map="cpu")
    assert placed.hf_device_map == {"": "cpu"} and placed.inner.weight.device.type == "cpu"
    assert not hasattr(_Small.from_pretrained(small_folder), "hf_device_map")


def test_loading_info_only_when_asked(small_folder: Path) -> None:
    assert isinstance(_Small.from_pretrained(small_folder), _Small)
    model, info = _Small.from_pretrained(small_folder, output_loading_info=True)
    assert isinstance(model, _Small) and info["missing_keys"] == [] and info["unexpected_keys"] == []


# -- declared sizes, and errors the model class raises about its config ------------------------------------------


class _Layers(modeling_module.PreTrainedModel):
    config_class = PretrainedConfig

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__(config)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(2, 2) for _ in range(config.num_hidden_layers))
        self.post_init()


def test_a_layer_count_far_beyond_the_checkpoint_is_refused_unless_not_strict(tmp_path: Path) -> None:
    _Layers(PretrainedConfig(num_hidden_layers=2)).save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 67}))
    with pytest.raises(ConfigError) as info:
        _Layers.from_pretrained(tmp_path)
    assert _message(info).startswith(
        f"num_hidden_layers=67 in {tmp_path / 'config.json'} does not match the weights: its tensors have layer "
        "indices up to 1. "
    )
    model, info_dict = _Layers.from_pretrained(tmp_path, strict=False, output_loading_info=True)
    assert len(model.layers) == 67 and len(info_dict["missing_keys"]) == 130


class _Picky(modeling_module.PreTrainedModel):
    config_class = PretrainedConfig

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__(config)
        if getattr(config, "width", 1) != 1:
            raise ConfigError(f"width={config.width} is not supported")
        self.inner = torch.nn.Linear(1, 1)
        self.post_init()


def test_a_config_value_the_class_refuses_is_reported_with_the_config_file(tmp_path: Path) -> None:
    _Picky(PretrainedConfig()).save_pretrained(tmp_path)
    with pytest.raises(ConfigError) as info:
        _Picky.from_pretrained(tmp_path, width=3)
    assert _message(info) == f"{tmp_path / 'config.json'}: width=3 is not supported"


def test_a_config_value_the_class_refuses_is_reported_with_the_weights_file_that_holds_it(
    tmp_path: Path, one_file_format: Any
) -> None:
    tensors = {"inner.weight": [[0.5]], "inner.bias": [0.0]}
    path = tmp_path / "model.onefile"
    path.write_text(json.dumps({"config": {"width": 3}, "tensors": tensors}))
    with pytest.raises(ConfigError) as info:
        _Picky.from_pretrained(tmp_path)
    assert _message(info) == f"{path}: width=3 is not supported"
    path.write_text(json.dumps({"config": {"width": 1}, "tensors": tensors}))
    # exact: 0.5 loaded from the file, nothing computed
    assert _Picky.from_pretrained(tmp_path).inner.weight.item() == 0.5


class _ShapesOnly:
    """A format that lists tensor shapes (two layers)."""

    def shapes(self, files: list[Path]) -> dict[str, tuple[int, ...]]:
        return {"layers.0.weight": (2, 2), "layers.1.weight": (2, 2)}


def test_check_declared_sizes_is_strict_by_default(tmp_path: Path) -> None:
    files, fmt = [tmp_path / "model.safetensors"], _ShapesOnly()
    modeling_module.check_declared_sizes(PretrainedConfig(num_hidden_layers=66), fmt, files)
    with pytest.raises(ConfigError, match=r"^num_hidden_layers=67 in .* its tensors have layer indices up to 1\. "):
        modeling_module.check_declared_sizes(PretrainedConfig(num_hidden_layers=67), fmt, files)


class _Widened(modeling_module.PreTrainedModel):
    """A model class that takes a positional argument after its config."""

    config_class = PretrainedConfig

    def __init__(self, config: PretrainedConfig, width: int = 1) -> None:
        super().__init__(config)
        self.width = width
        self.inner = torch.nn.Linear(2, 2)
        self.post_init()


def test_positional_arguments_after_the_path_reach_the_model_class(tmp_path: Path) -> None:
    _Widened(PretrainedConfig()).save_pretrained(tmp_path)
    assert _Widened.from_pretrained(tmp_path, 5).width == 5
    assert _Widened.from_pretrained(tmp_path).width == 1


def test_the_format_is_asked_for_tensors_in_the_load_dtype(tmp_path: Path, one_file_format: Any) -> None:
    # The format contract (hookspecs: load(files, dtype=...)): GGUF dequantises straight into the load dtype,
    # so a bfloat16 load never holds a float32 copy of the weights.
    tensors = {"inner.weight": [[0.5]], "inner.bias": [0.0]}
    (tmp_path / "model.onefile").write_text(json.dumps({"config": {"width": 1}, "tensors": tensors}))
    model = _Picky.from_pretrained(tmp_path, dtype=torch.bfloat16)
    assert one_file_format.asked == [torch.bfloat16] and model.inner.weight.dtype == torch.bfloat16
