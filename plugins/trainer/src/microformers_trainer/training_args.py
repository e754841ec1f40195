"""``TrainingArguments``: the reference's names and defaults; contradictory settings raise ``ConfigError``."""

from __future__ import annotations

import json
import math
import numbers
import os
from typing import Any

import attrs

from microformers import ConfigError

from .optimization import scheduler_type

INTERVALS = ("no", "steps", "epoch")
OPTIMIZERS = ("adamw_torch", "adamw_torch_fused", "sgd", "adafactor")
LOG_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50, "passive": -1}
DEBUG_OPTIONS = ("underflow_overflow",)


def _listify(value: Any) -> list[str]:
    if value is None:
        return ["none"]
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()] or ["none"]
    return [str(v) for v in value]


def _choice(name: str, value: Any, allowed: tuple[str, ...]) -> str:
    value = getattr(value, "value", value)
    if value not in allowed:
        raise ConfigError(f"TrainingArguments({name}={value!r}): use one of {', '.join(map(repr, allowed))}")
    return value


# numbers the optimizer, schedule and loss read, with their ranges (low, high, whether high is included): checked
# when the arguments are made, not when the first step fails (a string learning rate, a beta of 1.5, a NaN norm)
_NUMBERS: dict[str, tuple[float, float, bool]] = {
    "learning_rate": (0.0, math.inf, False),
    "weight_decay": (0.0, math.inf, False),
    "adam_beta1": (0.0, 1.0, False),
    "adam_beta2": (0.0, 1.0, False),
    "adam_epsilon": (0.0, math.inf, False),
    "max_grad_norm": (-math.inf, math.inf, False),  # 0 or less: no clipping, as in the reference
    "num_train_epochs": (0.0, math.inf, False),
    "label_smoothing_factor": (0.0, 1.0, True),
    "warmup_steps": (0.0, math.inf, False),
    "warmup_ratio": (0.0, 1.0, True),
}
_INTEGERS: dict[str, tuple[int, int]] = {
    "seed": (0, 2**32 - 1),  # numpy's seed range (set_seed seeds numpy too)
    "data_seed": (0, 2**32 - 1),
    "dataloader_num_workers": (0, 1024),
    "max_steps": (-1, 2**62),
    "save_total_limit": (-(2**31), 2**31),  # 0 or less keeps every checkpoint, as in the reference
}
_FLAGS = (
    "do_train", "do_eval", "do_predict", "logging_first_step", "logging_nan_inf_filter", "stop_on_nan_inf",
    "eval_on_start", "prediction_loss_only", "save_only_model", "load_best_model_at_end", "dataloader_drop_last",
    "dataloader_pin_memory", "remove_unused_columns", "bf16", "fp16", "use_cpu", "gradient_checkpointing",
    "torch_compile", "ignore_data_skip", "full_determinism", "log_on_each_node",
)  # fmt: skip


def _check_types(args: Any) -> None:
    """Flags are bools (a string "no" would be truthy), numbers are finite numbers in range, counts integers."""
    for name in _FLAGS:
        value = getattr(args, name)
        if not isinstance(value, bool):
            raise ConfigError(f"TrainingArguments({name}={value!r:.60}): use True or False")
    for name, (low, high, closed) in _NUMBERS.items():
        value = getattr(args, name)
        if name == "max_grad_norm" and value is None:
            continue
        number = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
        if not number or value < low or value > high or (value == high and not closed):
            if not math.isfinite(low):
                wanted = "any finite number"
            elif not math.isfinite(high):
                wanted = f"a number >= {low:g}"
            else:
                wanted = f"a number from {low:g} to {high:g}" + ("" if closed else f" ({high:g} excluded)")
            raise ConfigError(f"TrainingArguments({name}={value!r:.60}): use {wanted}")
    names = args.label_names
    if names is not None and not (isinstance(names, (list, tuple)) and all(isinstance(n, str) for n in names)):
        raise ConfigError(f"TrainingArguments(label_names={names!r:.60}): use a list of batch keys, e.g. ['labels']")
    for name, (low, high) in _INTEGERS.items():
        value = getattr(args, name)
        if value is None and name in ("data_seed", "save_total_limit"):
            continue
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not low <= value <= high:
            raise ConfigError(f"TrainingArguments({name}={value!r:.60}): use an integer from {low:,} to {high:,}")


FSDP_OPTIONS = ("full_shard", "shard_grad_op", "auto_wrap")
# how checkpoints hold the model and optimizer: gathered into single files, or one shard per process
FSDP_STATE_DICT_TYPES = ("FULL_STATE_DICT", "SHARDED_STATE_DICT")
FSDP_REFUSED = {
    "offload": "CPU offload of parameters is not implemented",
    "no_shard": "no_shard is plain data parallelism: run without fsdp (torchrun gives DistributedDataParallel)",
    "hybrid_shard": "hybrid sharding exists only in the legacy FSDP1 engine; FSDP2 here shards within one group",
    "hybrid_shard_zero2": "hybrid sharding exists only in the legacy FSDP1 engine; FSDP2 here shards within one group",
}
# fsdp_config keys that are accepted only at the value this Trainer implements
FSDP_FIXED = {
    "version": (2, "only FSDP2 (torch.distributed.fsdp.fully_shard) is implemented"),
    "auto_wrap_policy": ("TRANSFORMER_BASED_WRAP", "layers are wrapped by class (transformer_layer_cls_to_wrap)"),
    "min_num_params": (0, "size-based wrapping is not implemented"),
    "cpu_offload": (False, "CPU offload of parameters is not implemented"),
    "activation_checkpointing": (False, "use TrainingArguments(gradient_checkpointing=True) instead"),
    "cpu_ram_efficient_loading": (False, "every process loads the full model before sharding"),
    "xla": (False, "XLA is not supported"),
}


def _as_bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ConfigError(f"TrainingArguments(fsdp_config={{{name!r}: {value!r}}}): use True or False")


def _check_fsdp(fsdp: Any, config: Any) -> tuple[list[str], dict[str, Any]]:
    """``fsdp`` as the list of options in force ([] when off) and ``fsdp_config`` normalised; what is not
    implemented raises ``ConfigError``."""
    if fsdp is None or fsdp is False or fsdp == "":
        items: list[str] = []
    elif fsdp is True:
        items = ["full_shard"]
    elif isinstance(fsdp, str):
        items = fsdp.split()
    elif isinstance(fsdp, (list, tuple)):
        items = [str(getattr(item, "value", item)) for item in fsdp]
    else:
        raise ConfigError(
            f"TrainingArguments(fsdp={fsdp!r}): use True, 'full_shard', 'shard_grad_op' or a list of them"
        )
    for item in items:
        if item in FSDP_REFUSED:
            raise ConfigError(f"TrainingArguments(fsdp={fsdp!r}): {item!r} is refused: {FSDP_REFUSED[item]}")
        if item not in FSDP_OPTIONS:
            raise ConfigError(
                f"TrainingArguments(fsdp={fsdp!r}): unknown option {item!r}; use one of "
                f"{', '.join(map(repr, FSDP_OPTIONS))}"
            )
    if "full_shard" in items and "shard_grad_op" in items:
        raise ConfigError(f"TrainingArguments(fsdp={fsdp!r}): pick one of 'full_shard' and 'shard_grad_op'")
    if items and not {"full_shard", "shard_grad_op"} & set(items):
        items.insert(0, "full_shard")
    if config is None:
        config = {}
    elif isinstance(config, str) and config.lstrip().startswith("{"):  # inline JSON, as a command line passes it
        try:
            config = json.loads(config)
        except ValueError as exc:
            raise ConfigError(f"TrainingArguments(fsdp_config={config!r}): not valid JSON ({exc})") from exc
    elif isinstance(config, (str, os.PathLike)):
        try:
            config = json.loads(open(config, encoding="utf-8").read())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"TrainingArguments(fsdp_config={config!r}): cannot read it as JSON ({exc})") from exc
    if not isinstance(config, dict):
        raise ConfigError(
            f"TrainingArguments(fsdp_config=...): pass a dict or a JSON file; got {type(config).__name__}"
        )
    config = {(k[5:] if k.startswith("fsdp_") else k): v for k, v in config.items()}
    if config and not items:
        raise ConfigError("TrainingArguments(fsdp_config=...) is set but fsdp is off; pass fsdp='full_shard' too")
    if not items:
        return [], {}
    known = {*FSDP_FIXED, "reshard_after_forward", "transformer_layer_cls_to_wrap", "state_dict_type"}
    unknown = sorted(set(config) - known)
    if unknown:
        raise ConfigError(
            f"TrainingArguments(fsdp_config=...): {unknown} are not supported; the keys are {sorted(known)}"
        )
    for key, (value, why) in FSDP_FIXED.items():
        given = config.get(key, value)
        if isinstance(value, bool):
            given = _as_bool(key, given)
        elif isinstance(value, int):
            given = int(given) if str(given).lstrip("-").isdigit() else given
        elif isinstance(given, str):
            given = given.upper()
        if given != value:
            raise ConfigError(f"TrainingArguments(fsdp_config={{{key!r}: {config[key]!r}}}): {why}; use {value!r}")
        config[key] = value
    kind = config.get("state_dict_type", "FULL_STATE_DICT")
    kind = kind.upper() if isinstance(kind, str) else kind
    if kind not in FSDP_STATE_DICT_TYPES:
        raise ConfigError(
            f"TrainingArguments(fsdp_config={{'state_dict_type': {config['state_dict_type']!r}}}): use "
            f"{' or '.join(map(repr, FSDP_STATE_DICT_TYPES))} (LOCAL_STATE_DICT is FSDP1's)"
        )
    config["state_dict_type"] = kind
    default = "shard_grad_op" not in items
    config["reshard_after_forward"] = _as_bool("reshard_after_forward", config.get("reshard_after_forward", default))
    layers = config.get("transformer_layer_cls_to_wrap")
    if isinstance(layers, str):
        layers = [part.strip() for part in layers.split(",") if part.strip()]
    if layers is not None and (not layers or not all(isinstance(x, str) and x for x in layers)):
        raise ConfigError(
            "TrainingArguments(fsdp_config={'transformer_layer_cls_to_wrap': ...}): use a list of layer class names"
        )
    config["transformer_layer_cls_to_wrap"] = layers
    return items, config


@attrs.define(kw_only=True, slots=False)
class TrainingArguments:
    """Everything that controls a training run (see docs/training.md for each group)."""

    output_dir: str | None = None
    do_train: bool = False
    do_eval: bool = False
    do_predict: bool = False
    num_train_epochs: float = 3.0
    max_steps: int = -1
    per_device_train_batch_size: int = 8
    per_device_eval_batch_size: int = 8
    gradient_accumulation_steps: int = 1
    eval_accumulation_steps: int | None = None
    learning_rate: float = 5e-5
    weight_decay: float = 0.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_epsilon: float = 1e-8
    max_grad_norm: float = 1.0
    lr_scheduler_type: str = "linear"
    lr_scheduler_kwargs: dict[str, Any] | None = None
    warmup_steps: float = 0
    warmup_ratio: float = 0.0
    logging_strategy: str = "steps"
    logging_steps: float = 500
    logging_first_step: bool = False
    logging_nan_inf_filter: bool = True
    stop_on_nan_inf: bool = False
    eval_strategy: str = "no"
    eval_steps: float | None = None
    eval_delay: float = 0
    eval_on_start: bool = False
    prediction_loss_only: bool = False
    save_strategy: str = "steps"
    save_steps: float = 500
    save_total_limit: int | None = None
    save_only_model: bool = False
    load_best_model_at_end: bool = False
    metric_for_best_model: str | None = None
    greater_is_better: bool | None = None
    seed: int = 42
    data_seed: int | None = None
    dataloader_num_workers: int = 0
    dataloader_drop_last: bool = False
    dataloader_pin_memory: bool = True
    remove_unused_columns: bool = True
    label_names: list[str] | None = None
    label_smoothing_factor: float = 0.0
    report_to: str | list[str] | None = "none"
    run_name: str | None = None
    disable_tqdm: bool | None = None
    bf16: bool = False
    fp16: bool = False
    use_cpu: bool = False
    gradient_checkpointing: bool = False
    gradient_checkpointing_kwargs: dict[str, Any] | None = None
    torch_compile: bool = False
    resume_from_checkpoint: str | None = None
    ignore_data_skip: bool = False
    optim: str = "adamw_torch_fused"
    optim_args: str | None = None
    full_determinism: bool = False
    neftune_noise_alpha: float | None = None
    log_level: str = "passive"
    log_level_replica: str = "warning"
    log_on_each_node: bool = True
    debug: str | list[str] = ""
    fsdp: bool | str | list[str] | None = None
    fsdp_config: dict[str, Any] | str | None = None
    deepspeed: dict[str, Any] | str | None = None  # refused: see __attrs_post_init__

    def __attrs_post_init__(self) -> None:
        if self.output_dir is None:
            self.output_dir = "trainer_output"
        self.output_dir = os.fspath(self.output_dir)
        if os.path.isfile(self.output_dir):
            raise ConfigError(f"TrainingArguments(output_dir={self.output_dir!r}): that is a file; name a folder")
        _check_types(self)
        self.logging_strategy = _choice("logging_strategy", self.logging_strategy, INTERVALS)
        self.eval_strategy = _choice("eval_strategy", self.eval_strategy, INTERVALS)
        self.save_strategy = _choice("save_strategy", self.save_strategy, (*INTERVALS, "best"))
        self.optim = _choice("optim", self.optim, OPTIMIZERS)
        self.lr_scheduler_type = scheduler_type(self.lr_scheduler_type).value
        from .integrations import check_report_to

        self.report_to = check_report_to(_listify(self.report_to))
        self.log_level = _choice("log_level", self.log_level, tuple(LOG_LEVELS))
        self.log_level_replica = _choice("log_level_replica", self.log_level_replica, tuple(LOG_LEVELS))
        debug = self.debug.split() if isinstance(self.debug, str) else list(self.debug or [])
        self.debug = [getattr(d, "value", d) for d in debug]
        for option in self.debug:
            if option not in DEBUG_OPTIONS:
                raise ConfigError(
                    f"TrainingArguments(debug={option!r}): use 'underflow_overflow' (tpu_metrics_debug needs a TPU, "
                    "which this Trainer does not drive)"
                )
        if self.neftune_noise_alpha is not None and not (
            isinstance(self.neftune_noise_alpha, (int, float)) and self.neftune_noise_alpha > 0
        ):
            raise ConfigError(
                f"TrainingArguments(neftune_noise_alpha={self.neftune_noise_alpha!r}): use a positive number "
                "(the paper uses 5) or None"
            )
        if self.disable_tqdm is None:  # as the reference: bars unless logging is quieter than warnings
            from microformers import logging

            self.disable_tqdm = not logging.is_progress_bar_enabled() or logging.get_verbosity() > logging.WARNING
        for name in ("per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps"):
            if int(getattr(self, name)) < 1:
                raise ConfigError(f"TrainingArguments({name}={getattr(self, name)}): must be at least 1")
        if self.fp16 and self.bf16:
            raise ConfigError("TrainingArguments(fp16=True, bf16=True): pick one mixed-precision dtype")
        if self.fp16 and self.device.type != "cuda":
            raise ConfigError("TrainingArguments(fp16=True): float16 mixed precision needs CUDA; use bf16=True on CPU")
        if self.warmup_steps < 0 or self.warmup_ratio < 0 or self.warmup_ratio > 1:
            raise ConfigError("TrainingArguments: warmup_steps must be >= 0 and warmup_ratio within [0, 1]")
        if self.eval_strategy == "steps" and self.eval_steps is None:
            self.eval_steps = self.logging_steps
        for name in ("logging_steps", "eval_steps", "save_steps"):
            value = getattr(self, name)
            if value is not None and (value <= 0 or (value > 1 and value != int(value))):
                raise ConfigError(f"TrainingArguments({name}={value}): use an integer >= 1 or a ratio in (0, 1]")
        if self.load_best_model_at_end:
            if self.save_strategy != "best":
                if self.eval_strategy != self.save_strategy:
                    raise ConfigError(
                        "load_best_model_at_end=True needs save_strategy and eval_strategy to match; got "
                        f"save_strategy={self.save_strategy!r}, eval_strategy={self.eval_strategy!r}"
                    )
                if self.eval_strategy == "steps" and self.save_steps % self.eval_steps != 0:
                    raise ConfigError(
                        f"load_best_model_at_end=True needs save_steps ({self.save_steps}) to be a multiple of "
                        f"eval_steps ({self.eval_steps})"
                    )
            if self.metric_for_best_model is None:
                self.metric_for_best_model = "loss"
        if self.lr_scheduler_type in ("reduce_lr_on_plateau", "greedy"):
            if self.eval_strategy == "no":
                raise ConfigError(
                    f"TrainingArguments(lr_scheduler_type={self.lr_scheduler_type!r}) steps with an evaluation metric "
                    "and needs an eval_strategy ('steps' or 'epoch')"
                )
            if self.metric_for_best_model is None:
                self.metric_for_best_model = "loss"
        if self.save_strategy == "best" and self.metric_for_best_model is None:
            self.metric_for_best_model = "loss"
        if self.greater_is_better is None and self.metric_for_best_model is not None:
            self.greater_is_better = self.metric_for_best_model not in ("loss", "eval_loss")
        if self.optim_args is not None:
            raise ConfigError("TrainingArguments(optim_args=...) is not supported; configure the optimizer directly")
        if self.deepspeed is not None:
            raise ConfigError(
                f"TrainingArguments(deepspeed={self.deepspeed!r:.80}): the DeepSpeed engine is not supported: this "
                "Trainer runs on torch's own engines and would otherwise ignore the DeepSpeed config; shard with "
                "FSDP2 instead, launched with torchrun: fsdp='full_shard' (like ZeRO stage 3: parameters, gradients "
                "and optimizer state sharded) or fsdp='shard_grad_op' (like ZeRO stage 2), see docs/training.md"
            )
        self.fsdp, self.fsdp_config = _check_fsdp(self.fsdp, self.fsdp_config)
        if self.fsdp and self.load_best_model_at_end:
            raise ConfigError(
                "TrainingArguments(fsdp=..., load_best_model_at_end=True): loading the best checkpoint back into a "
                "sharded model is not implemented; load it afterwards with from_pretrained(<best checkpoint>)"
            )

    # -- derived values ----------------------------------------------------------------------------
    @property
    def train_batch_size(self) -> int:
        return self.per_device_train_batch_size

    @property
    def eval_batch_size(self) -> int:
        return self.per_device_eval_batch_size

    @property
    def world_size(self) -> int:
        return int(os.environ.get("WORLD_SIZE", "1"))

    @property
    def process_index(self) -> int:
        return int(os.environ.get("RANK", "0"))

    @property
    def local_process_index(self) -> int:
        return int(os.environ.get("LOCAL_RANK", "0"))

    @property
    def should_log(self) -> bool:
        """This process logs: the first of each node (``log_on_each_node``) or of the whole run."""
        return self.local_process_index == 0 if self.log_on_each_node else self.process_index == 0

    def get_process_log_level(self) -> int:
        """``log_level`` on processes that log, ``log_level_replica`` on the others (``"passive"``: the current
        ``microformers.logging`` verbosity)."""
        from microformers import logging

        level = LOG_LEVELS[self.log_level if self.should_log else self.log_level_replica]
        return logging.get_verbosity() if level == -1 else level

    @property
    def should_save(self) -> bool:
        return self.process_index == 0

    @property
    def device(self) -> Any:
        import torch

        if not self.use_cpu and torch.cuda.is_available():
            return torch.device("cuda", self.local_process_index)
        return torch.device("cpu")

    def get_warmup_steps(self, num_training_steps: int) -> int:
        """``warmup_steps`` (a ratio of the run when below 1), else ``warmup_ratio`` of the run."""
        if self.warmup_steps >= 1:
            return int(self.warmup_steps)
        if self.warmup_steps > 0:
            return math.ceil(num_training_steps * self.warmup_steps)
        return math.ceil(num_training_steps * self.warmup_ratio)

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self, recurse=False)

    def to_json_string(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True, default=str)


@attrs.define(kw_only=True, slots=False)
class Seq2SeqTrainingArguments(TrainingArguments):
    """:class:`TrainingArguments` plus what ``Seq2SeqTrainer`` needs to evaluate by generating.

    ``predict_with_generate``: ``evaluate``/``predict`` run ``model.generate`` and return the generated ids as
    predictions (for ROUGE/BLEU-style metrics); ``generation_max_length`` / ``generation_num_beams``: the
    ``max_length`` / ``num_beams`` of those calls (default: the model's generation config);
    ``generation_config``: a ``GenerationConfig``, or a folder / ``generation_config.json`` file to read one
    from, that replaces the model's. ``sortish_sampler`` is refused: it is not implemented.
    """

    sortish_sampler: bool = False
    predict_with_generate: bool = False
    generation_max_length: int | None = None
    generation_num_beams: int | None = None
    generation_config: Any = None

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        if self.sortish_sampler:
            raise ConfigError(
                "Seq2SeqTrainingArguments(sortish_sampler=True): the sortish sampler is not implemented (the reference "
                "applies it only to its legacy Seq2SeqDataset); leave it False"
            )
        for name in ("generation_max_length", "generation_num_beams"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigError(f"Seq2SeqTrainingArguments({name}={value!r}): use a positive integer or None")
        if self.generation_config is not None and not isinstance(self.generation_config, (str, os.PathLike)):
            if not hasattr(self.generation_config, "to_dict"):
                raise ConfigError(
                    "Seq2SeqTrainingArguments(generation_config=...): pass a GenerationConfig, or a folder or "
                    f"generation_config.json file to read one from; got {type(self.generation_config).__name__}"
                )

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        config = out.get("generation_config")
        if config is not None and hasattr(config, "to_dict"):
            out["generation_config"] = config.to_dict()
        elif isinstance(config, os.PathLike):
            out["generation_config"] = os.fspath(config)
        return out
