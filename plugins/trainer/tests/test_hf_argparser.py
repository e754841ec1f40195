"""HfArgumentParser: the same options, defaults and values as the reference's parser on the same dataclasses."""

from __future__ import annotations

import dataclasses
import enum
import json
from pathlib import Path
from typing import Literal

import pytest
import transformers

from microformers import ConfigError, HfArg, HfArgumentParser, TrainingArguments


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass
class ModelArguments:
    model_name: str
    dropout: float = 0.1
    layers: int | None = None
    freeze: bool = False
    use_cache: bool = True
    color: Color = Color.RED
    mode: Literal["fast", "slow"] = "fast"
    sizes: list[int] = dataclasses.field(default_factory=lambda: [1, 2])
    note: str = HfArg(default="none", aliases=["-n"], help="a free-form note")


@dataclasses.dataclass
class DataArguments:
    data_file: str = "train.txt"
    max_length: int = 128


COMMAND_LINES = {
    "required only": ["--model_name", "tiny"],
    "every kind": [
        "--model_name", "tiny", "--dropout", "0.3", "--layers", "4", "--freeze", "--no_use_cache",
        "--color", "blue", "--mode", "slow", "--sizes", "3", "4", "5", "-n", "hello", "--max_length", "64",
    ],
    "bool values and dashes": ["--model-name", "tiny", "--freeze", "false", "--use-cache", "no", "--data-file", "x"],
    "dashed negation": ["--model_name", "tiny", "--no-use-cache"],
}  # fmt: skip


@pytest.mark.parametrize("argv", COMMAND_LINES.values(), ids=list(COMMAND_LINES))
def test_command_lines_parse_as_the_reference(argv: list[str]) -> None:
    ours = HfArgumentParser((ModelArguments, DataArguments)).parse_args_into_dataclasses(argv, look_for_args_file=False)
    theirs = transformers.HfArgumentParser((ModelArguments, DataArguments)).parse_args_into_dataclasses(
        argv, look_for_args_file=False
    )
    assert ours == theirs
    assert isinstance(ours[0], ModelArguments) and isinstance(ours[1], DataArguments)


def test_help_lists_every_option_with_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        HfArgumentParser(ModelArguments).parse_args_into_dataclasses(["--help"], look_for_args_file=False)
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for option in ("--model_name", "--no_use_cache", "--sizes", "-n", "a free-form note", "{fast,slow}"):
        assert option in text
    assert "a free-form note (default: none)" in text  # defaults shown beside help texts, as argparse does


def test_errors_unknown_options_missing_required_and_bad_values(capsys: pytest.CaptureFixture[str]) -> None:
    parser = HfArgumentParser(ModelArguments)
    with pytest.raises(ConfigError, match="not used by the HfArgumentParser.*--nope"):
        parser.parse_args_into_dataclasses(["--model_name", "x", "--nope", "1"], look_for_args_file=False)
    args, remaining = parser.parse_args_into_dataclasses(
        ["--model_name", "x", "--nope", "1"], return_remaining_strings=True, look_for_args_file=False
    )
    assert args.model_name == "x" and remaining == ["--nope", "1"]
    for argv in (
        ["--dropout", "0.2"],
        ["--model_name", "x", "--mode", "medium"],
        ["--model_name", "x", "--freeze", "maybe"],
    ):
        with pytest.raises(SystemExit):
            parser.parse_args_into_dataclasses(argv, look_for_args_file=False)
    assert "error" in capsys.readouterr().err


def test_args_files_come_first_and_the_command_line_wins(tmp_path: Path) -> None:
    (tmp_path / "base.args").write_text("--model_name from_file --dropout 0.5")
    extra = tmp_path / "extra.args"
    extra.write_text("--max_length 32")
    model, data = HfArgumentParser((ModelArguments, DataArguments)).parse_args_into_dataclasses(
        ["--dropout", "0.7", "--args_file", str(extra)],
        args_filename=str(tmp_path / "base.args"),
        args_file_flag="--args_file",
    )
    assert (model.model_name, model.dropout, data.max_length) == ("from_file", 0.7, 32)


def test_dict_json_and_yaml_configs(tmp_path: Path) -> None:
    parser = HfArgumentParser((ModelArguments, DataArguments))
    values = {"model_name": "tiny", "layers": 2, "max_length": 16}
    expected = (ModelArguments(model_name="tiny", layers=2), DataArguments(max_length=16))
    assert parser.parse_dict(values) == expected
    (tmp_path / "a.json").write_text(json.dumps(values))
    assert parser.parse_json_file(tmp_path / "a.json") == expected
    (tmp_path / "a.yaml").write_text("model_name: tiny\nlayers: 2\nmax_length: 16\n")
    assert parser.parse_yaml_file(str(tmp_path / "a.yaml")) == expected
    with pytest.raises(ConfigError, match=r"not used by the HfArgumentParser: \['extra'\]"):
        parser.parse_dict({**values, "extra": 1})
    assert parser.parse_dict({**values, "extra": 1}, allow_extra_keys=True) == expected
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"bad\.json"):
        parser.parse_json_file(tmp_path / "bad.json")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match=r"list\.yaml.*not a mapping"):
        parser.parse_yaml_file(tmp_path / "list.yaml")


def test_training_arguments_from_the_command_line(tmp_path: Path) -> None:
    argv = [
        "--output_dir", str(tmp_path), "--max_steps", "7", "--learning_rate", "3e-4", "--bf16",
        "--lr_scheduler_type", "cosine", "--lr_scheduler_kwargs", '{"num_cycles": 0.25}', "--report_to", "jsonl",
        "--no_remove_unused_columns", "--label_names", "labels", "start_positions", "--neftune_noise_alpha", "5",
    ]  # fmt: skip
    (args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses(argv, look_for_args_file=False)
    assert isinstance(args, TrainingArguments)
    assert (args.max_steps, args.learning_rate, args.bf16, args.lr_scheduler_type) == (7, 3e-4, True, "cosine")
    assert args.lr_scheduler_kwargs == {"num_cycles": 0.25} and args.report_to == ["jsonl"]
    assert args.remove_unused_columns is False and args.label_names == ["labels", "start_positions"]
    assert args.neftune_noise_alpha == 5.0 and args.per_device_train_batch_size == 8  # a default kept
    with pytest.raises(ConfigError, match="lr_scheduler_type='sideways'"):
        HfArgumentParser(TrainingArguments).parse_dict({"lr_scheduler_type": "sideways"})


def test_a_union_argparse_cannot_express_is_refused() -> None:
    @dataclasses.dataclass
    class Odd:
        value: int | float = 1

    with pytest.raises(ConfigError, match="field 'value'"):
        HfArgumentParser(Odd)
