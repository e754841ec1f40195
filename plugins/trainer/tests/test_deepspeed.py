"""``TrainingArguments(deepspeed=...)`` is refused with what to use instead (FSDP2), never accepted and ignored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from microformers import ConfigError, HfArgumentParser, TrainingArguments

ZERO3 = {"zero_optimization": {"stage": 3}, "train_micro_batch_size_per_gpu": "auto"}


@pytest.mark.parametrize("given", ["config_file", "dict"])
def test_a_deepspeed_config_is_refused_naming_fsdp_instead(tmp_path: Path, given: str) -> None:
    config_file = tmp_path / "ds_config.json"
    config_file.write_text(json.dumps(ZERO3))
    deepspeed = str(config_file) if given == "config_file" else ZERO3
    with pytest.raises(ConfigError, match=r"TrainingArguments\(deepspeed=") as caught:
        TrainingArguments(output_dir=str(tmp_path), deepspeed=deepspeed)
    message = str(caught.value)
    assert "not supported" in message and "fsdp='full_shard'" in message and "torchrun" in message


def test_deepspeed_on_the_command_line_is_refused_the_same_way(tmp_path: Path) -> None:
    parser = HfArgumentParser(TrainingArguments)
    with pytest.raises(ConfigError, match="fsdp='full_shard'"):
        parser.parse_args_into_dataclasses(["--output_dir", str(tmp_path), "--deepspeed", "ds_config.json"])


def test_without_deepspeed_nothing_changes(tmp_path: Path) -> None:
    args = TrainingArguments(output_dir=str(tmp_path))
    assert args.deepspeed is None
    assert json.loads(args.to_json_string())["deepspeed"] is None
