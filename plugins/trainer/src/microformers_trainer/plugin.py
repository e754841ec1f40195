"""Entry point ``trainer``: the Trainer's public names and its reporting integrations.

Registers ``"module:Name"`` strings only, so discovery imports neither torch nor the trainer.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1

_PKG = "microformers_trainer"

EXPORTS: dict[str, str] = {
    **{n: "trainer" for n in ("Trainer", "EvalPrediction", "TrainOutput", "PredictionOutput", "TrainingError")},
    "TrainingArguments": "training_args",
    "Seq2SeqTrainingArguments": "training_args",
    "Seq2SeqTrainer": "trainer_seq2seq",
    **{
        n: "trainer_callback"
        for n in (
            "TrainerCallback",
            "TrainerState",
            "TrainerControl",
            "CallbackHandler",
            "DefaultFlowCallback",
            "ProgressCallback",
            "PrinterCallback",
            "EarlyStoppingCallback",
        )
    },
    **{
        n: "integrations"
        for n in (
            "JsonLinesCallback",
            "TensorBoardCallback",
            "MLflowCallback",
            "WandbCallback",
            "DVCLiveCallback",
            "CodeCarbonCallback",
            "CometCallback",
            "ClearMLCallback",
        )
    },
    "HfArgumentParser": "hf_argparser",
    "HfArg": "hf_argparser",
    **{
        n: "trainer_utils"
        for n in (
            "enable_full_determinism",
            "BestRun",
            "default_compute_objective",
            "default_hp_space_optuna",
            "torch_distributed_zero_first",
        )
    },
    **{n: "debug_utils" for n in ("DebugUnderflowOverflow", "DebugOption")},
    **{
        n: "data_collator"
        for n in (
            "DefaultDataCollator",
            "default_data_collator",
            "DataCollatorWithPadding",
            "DataCollatorForLanguageModeling",
            "DataCollatorForTokenClassification",
            "DataCollatorForSeq2Seq",
            "DataCollatorForWholeWordMask",
            "DataCollatorForPermutationLanguageModeling",
        )
    },
    **{
        n: "optimization"
        for n in (
            "Adafactor",
            "SchedulerType",
            "get_scheduler",
            "get_constant_schedule",
            "get_constant_schedule_with_warmup",
            "get_linear_schedule_with_warmup",
            "get_cosine_schedule_with_warmup",
            "get_cosine_with_hard_restarts_schedule_with_warmup",
            "get_cosine_with_min_lr_schedule_with_warmup",
            "get_polynomial_decay_schedule_with_warmup",
            "get_inverse_sqrt_schedule",
            "get_cosine_with_min_lr_schedule_with_warmup_lr_rate",
            "get_wsd_schedule",
            "get_reduce_on_plateau_schedule",
            "get_greedy_schedule",
            "GreedyLR",
        )
    },
}


@hookimpl
def register_exports(register: Any) -> None:
    for name, module in EXPORTS.items():
        register(name, f"{_PKG}.{module}:{name}")


@hookimpl
def register_callbacks(register: Any) -> None:
    register("jsonl", f"{_PKG}.integrations:JsonLinesCallback")
    if importlib.util.find_spec("tensorboard") is not None:
        register("tensorboard", f"{_PKG}.integrations:TensorBoardCallback")
    if importlib.util.find_spec("mlflow") is not None:
        register("mlflow", f"{_PKG}.integrations:MLflowCallback")
    if importlib.util.find_spec("wandb") is not None:
        register("wandb", f"{_PKG}.integrations:WandbCallback")
    for name, module, cls in (
        ("dvclive", "dvclive", "DVCLiveCallback"),
        ("codecarbon", "codecarbon", "CodeCarbonCallback"),
        ("comet_ml", "comet_ml", "CometCallback"),
        ("clearml", "clearml", "ClearMLCallback"),
    ):
        if importlib.util.find_spec(module) is not None:
            register(name, f"{_PKG}.integrations:{cls}")
