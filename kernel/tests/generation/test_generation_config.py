from __future__ import annotations

import json

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
