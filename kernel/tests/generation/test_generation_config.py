from __future__ import annotations

import json
from pathlib import Path

import pytest

from microformers import ConfigError, GenerationConfig, GenerationError


def test_known_fields_unknown_keys_and_json_round_trip(tmp_path):
    config = GenerationConfig(max_new_tokens=7, eos_token_id=[2, 5], top_p=0.8, my_option="x", transformers_version="5")
    assert config.max_new_tokens == 7
    assert config.eos_token_ids == [2, 5]
    assert config.my_option == "x"
    assert config.do_sample is None  # unset stays unset until generation fills defaults
    config.save_pretrained(tmp_path)
    written = json.loads((tmp_path / "generation_config.json").read_text())
    assert written == {"max_new_tokens": 7, "eos_token_id": [2, 5], "top_p": 0.8, "my_option": "x"}
    assert GenerationConfig.from_pretrained(tmp_path) == config


def test_with_defaults_only_fills_unset_fields():
    filled = GenerationConfig(num_beams=3, do_sample=None).with_defaults()
    assert filled.num_beams == 3
    assert filled.do_sample is False
    assert filled.max_length == 20


def test_merged_with_takes_unset_values_from_base():
    base = GenerationConfig(eos_token_id=9, top_k=4, extra_key=1)
    merged = GenerationConfig(top_k=8).merged_with(base)
    assert (merged.top_k, merged.eos_token_id, merged.extra_key) == (8, 9, 1)


def test_update_returns_what_is_not_a_setting():
    config = GenerationConfig()
    rest = config.update(max_new_tokens=3, attention_mask="mask")
    assert config.max_new_tokens == 3
    assert rest == {"attention_mask": "mask"}


def test_from_model_config_keeps_generation_keys_only(tiny_config_class):
    model_config = tiny_config_class(eos_token_id=[2, 3], bos_token_id=1, max_length=33)
    config = GenerationConfig.from_model_config(model_config)
    assert config.eos_token_id == [2, 3]
    assert config.bos_token_id == 1
    assert config.max_length == 33
    assert "hidden_size" not in config.to_dict()


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"temperature": 0.0}, "temperature"),
        ({"early_stopping": "sometimes"}, "early_stopping"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"min_p": 1.5}, "min_p"),
        ({"repetition_penalty": 0}, "repetition_penalty"),
        ({"eos_token_id": [-1]}, "eos_token_id"),
        ({"bad_words_ids": [[]]}, "bad_words_ids"),
        ({"stop_strings": [""]}, "stop_strings"),
        ({"max_new_tokens": 2, "min_new_tokens": 5}, "min_new_tokens"),
    ],
)
def test_validation_names_the_setting(settings, named):
    with pytest.raises(GenerationError, match=named):
        GenerationConfig(**settings).validate()


def test_valid_settings_pass_validation():
    GenerationConfig(do_sample=True, num_return_sequences=3, top_p=1.0, temperature=0.7).validate()
    GenerationConfig(num_beams=4, num_return_sequences=4, early_stopping="never").validate()


def test_malformed_generation_config_json_names_the_file(tmp_path):
    (tmp_path / "generation_config.json").write_text("{not json")
    with pytest.raises(ConfigError, match="generation_config.json"):
        GenerationConfig.from_pretrained(tmp_path)


def test_model_save_and_load_round_trips_generation_config(tmp_path, tiny_model, tiny_model_class):
    tiny_model.generation_config = GenerationConfig(eos_token_id=[2, 7], max_new_tokens=5, custom_flag=True)
    tiny_model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "generation_config.json").read_text())["eos_token_id"] == [2, 7]
    loaded = tiny_model_class.from_pretrained(tmp_path)
    assert loaded.generation_config == tiny_model.generation_config


def test_without_generation_config_json_defaults_come_from_config_json(tmp_path, tiny_model, tiny_model_class):
    tiny_model.save_pretrained(tmp_path)
    (tmp_path / "generation_config.json").unlink()
    loaded = tiny_model_class.from_pretrained(tmp_path)
    assert loaded.generation_config.eos_token_id == 2
    assert loaded.generation_config.pad_token_id == 0


def test_validate_runs_the_registered_checks_between_its_own_passes(isolated_registry) -> None:
    from microformers.generation import configuration

    registry = isolated_registry(configuration)
    # no check registered: only what the kernel reads itself is checked
    GenerationConfig(temperature=-1.0).validate()
    with pytest.raises(GenerationError, match=r"^num_beams=0 must be an integer >= 1$"):
        GenerationConfig(num_beams=0, temperature=-1.0).validate()
    seen: list[str] = []

    def strict_temperature(config: GenerationConfig) -> None:
        seen.append("b")
        if config.temperature is not None and config.temperature <= 0:
            raise GenerationError(f"temperature={config.temperature!r} must be positive")

    registry.add("generation_config_checks", "b", strict_temperature)
    registry.add("generation_config_checks", "a", lambda config: seen.append("a"))
    with pytest.raises(GenerationError, match=r"^temperature=-1\.0 must be positive$"):
        GenerationConfig(temperature=-1.0, bos_token_id=-3).validate()  # before the token-id pass
    assert seen == ["a", "b"]  # in name order
    with pytest.raises(GenerationError, match=r"^bos_token_id=-3 must be a non-negative integer token id$"):
        GenerationConfig(bos_token_id=-3).validate()


# From test_generation_config_mutants.py: Behaviour of ``microformers.generation.configuration`` that the mutation
# pass found unasserted (docs/reliability.md).


def test_to_dict_is_a_deep_copy() -> None:
    config = GenerationConfig(bad_words_ids=[[1, 2]], my_strategy_option={"ids": [3]})
    out = config.to_dict()
    out["bad_words_ids"][0].append(9)
    out["my_strategy_option"]["ids"].append(9)
    assert config.bad_words_ids == [[1, 2]] and config.my_strategy_option == {"ids": [3]}


def test_save_creates_missing_parent_folders_and_from_pretrained_overrides(tmp_path: Path) -> None:
    folder = tmp_path / "a" / "b" / "c"
    GenerationConfig(max_new_tokens=5, do_sample=True).save_pretrained(folder)
    loaded = GenerationConfig.from_pretrained(folder, max_new_tokens=7)
    assert loaded.max_new_tokens == 7 and loaded.do_sample is True


def test_a_non_object_file_names_its_type(tmp_path: Path) -> None:
    (tmp_path / "generation_config.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match=r"must hold a JSON object of generation settings, not list$"):
        GenerationConfig.from_pretrained(tmp_path)


def test_a_model_config_never_chooses_the_strategy() -> None:
    config = GenerationConfig.from_model_config({"strategy": "beam", "eos_token_id": 2, "hidden_size": 8})
    assert config.strategy is None and config.eos_token_id == 2


def test_a_setting_named_extra_is_kept_like_any_unknown_setting(tmp_path: Path) -> None:
    (tmp_path / "generation_config.json").write_text('{"max_new_tokens": 3, "extra": {"a": 1}}')
    config = GenerationConfig.from_pretrained(tmp_path)  # a file key called "extra" is not the field of that name
    assert config.max_new_tokens == 3 and config.to_dict()["extra"] == {"a": 1}
    assert GenerationConfig(extra=5).to_dict()["extra"] == 5


# -- third pass (full run of the module) ---------------------------------------------------------------------------


def test_missing_attribute_message_and_equality() -> None:
    with pytest.raises(AttributeError, match=r"^'GenerationConfig' has no attribute 'nope'$"):
        GenerationConfig().nope  # noqa: B018
    assert GenerationConfig(max_new_tokens=2) != GenerationConfig(max_new_tokens=3)
    assert GenerationConfig(max_new_tokens=2) == GenerationConfig(max_new_tokens=2)


def test_merging_and_defaults_copy_deeply() -> None:
    own = GenerationConfig(my_option=[1])
    base = GenerationConfig(bad_words_ids=[[1, 2]], base_option={"ids": [3]})
    merged = own.merged_with(base)
    merged.bad_words_ids[0].append(9)
    merged.base_option["ids"].append(9)
    merged.my_option.append(9)
    merged.later_option = 1
    assert base.bad_words_ids == [[1, 2]] and base.base_option == {"ids": [3]}
    assert own.my_option == [1] and "base_option" not in own.extra and "later_option" not in own.extra
    filled = own.with_defaults()
    filled.my_option.append(9)
    filled.other = 2
    assert own.my_option == [1] and "other" not in own.extra


def test_json_string_is_sorted_with_two_space_indent() -> None:
    assert GenerationConfig(zeta=1, alpha=2).to_json_string() == '{\n  "alpha": 2,\n  "zeta": 1\n}\n'


def test_save_refuses_push_to_hub_and_a_file_as_folder(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="push_to_hub=True"):
        GenerationConfig().save_pretrained(tmp_path, push_to_hub=True)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match=r"file is a file; pass a folder to write generation_config\.json"):
        GenerationConfig().save_pretrained(tmp_path / "file")


def test_from_pretrained_drops_trust_remote_code_and_passes_the_subfolder(tmp_path: Path) -> None:
    GenerationConfig(max_new_tokens=4).save_pretrained(tmp_path / "sub")
    config = GenerationConfig.from_pretrained(tmp_path, subfolder="sub", trust_remote_code=True)
    assert config.to_dict() == {"max_new_tokens": 4}


def test_from_model_config_copies_values_deeply() -> None:
    values = {"bad_words_ids": [[1, 2]], "eos_token_id": 2}
    GenerationConfig.from_model_config(values).bad_words_ids[0].append(9)
    assert values["bad_words_ids"] == [[1, 2]]
