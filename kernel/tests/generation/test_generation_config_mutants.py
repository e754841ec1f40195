"""Behaviour of ``microformers.generation.configuration`` that the mutation pass found unasserted (docs/reliability.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from microformers import ConfigError, GenerationConfig


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
