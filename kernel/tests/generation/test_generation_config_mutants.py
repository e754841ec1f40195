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
