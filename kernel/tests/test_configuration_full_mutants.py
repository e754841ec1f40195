"""``microformers.configuration``: behaviour the fourth (full) mutation run found unasserted
(docs/reliability.md, "Fourth pass")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from microformers import ConfigError, PretrainedConfig
from microformers.configuration import check_config_dict


def test_a_given_label2id_is_kept_as_given() -> None:
    # the reference keeps label2id as written, even when it is not the inverse of id2label
    config = PretrainedConfig(id2label={"0": "NEG", "1": "POS"}, label2id={"negative": "0", "positive": 1})
    assert config.label2id == {"negative": 0, "positive": 1}
    assert config.id2label == {0: "NEG", 1: "POS"}


def test_dunder_keys_that_are_not_methods_are_refused_too() -> None:
    with pytest.raises(ConfigError) as info:
        PretrainedConfig(__module__="evil")
    assert str(info.value) == "config key '__module__' is reserved: it names a method of PretrainedConfig"
    with pytest.raises(ConfigError) as info:
        check_config_dict({"__module__": "evil"}, "/models/x/config.json")
    assert str(info.value) == (
        "/models/x/config.json: the key '__module__' is reserved (it names a method of the configuration object). "
        "Fix the file (or download it again)."
    )


def test_label_ids_must_be_digit_strings() -> None:
    check_config_dict({"id2label": {"-1": "none", "0": "a"}}, "c.json")  # negative ids are ids
    with pytest.raises(ConfigError, match=r"^c\.json: id2label must map label ids"):
        check_config_dict({"id2label": {"X1": "a"}}, "c.json")


def test_from_pretrained_reads_the_config_of_a_subfolder(tmp_path: Path) -> None:
    (tmp_path / "text").mkdir()
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 1}))
    (tmp_path / "text" / "config.json").write_text(json.dumps({"hidden_size": 2}))
    assert PretrainedConfig.from_pretrained(tmp_path, subfolder="text").hidden_size == 2
    assert PretrainedConfig.from_pretrained(tmp_path).hidden_size == 1
