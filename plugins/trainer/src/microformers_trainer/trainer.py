"""``Trainer``: the training / evaluation / prediction loop, with the reference Trainer's semantics.

One optimizer step = ``gradient_accumulation_steps`` micro-batches; the loss of each is divided by the number
of micro-batches (or, for models whose ``forward`` takes ``**kwargs``, the summed token loss is divided by the
number of label tokens of the whole step, ``num_items_in_batch``). Under ``torchrun`` the model runs in
``DistributedDataParallel`` (gloo on CPU, nccl on CUDA), each process reads its shard of every epoch's
permutation, and only rank 0 logs and saves.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import math
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import attrs
import torch
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, IterableDataset

from microformers import ConfigError, InputError, MicroformersError, PluginError, registry, set_seed
from microformers.hub import staged_folder

from . import checkpointing as ckpt
from . import fsdp as fsdp_utils
from .data_collator import DataCollatorWithPadding, default_data_collator
from .optimization import METRIC_SCHEDULES, Adafactor, get_scheduler
from .trainer_callback import (
    CallbackHandler,
    DefaultFlowCallback,
    PrinterCallback,
    ProgressCallback,
    TrainerCallback,
    TrainerControl,
    TrainerState,
)
from .trainer_utils import (
    BestRun,
    default_compute_objective,
    default_hp_space_optuna,
    enable_full_determinism,
    neftune_post_forward_hook,
)
from .training_args import TrainingArguments

logger = logging.getLogger("microformers.trainer")

IGNORE_INDEX = -100
_NO_DECAY = [re.compile(p) for p in (r"bias", r"layernorm", r"rmsnorm", r"(?:^|\.)norm(?:$|\.)", r"_norm(?:$|\.)")]


class TrainingError(MicroformersError, RuntimeError):
    """Training cannot go on (a NaN/inf loss with ``stop_on_nan_inf=True``)."""


class EvalPrediction:
    """What ``compute_metrics`` receives: ``predictions`` and ``label_ids`` (numpy), unpackable as a pair."""

    def __init__(self, predictions: Any, label_ids: Any, inputs: Any = None) -> None:
        self.predictions = predictions
        self.label_ids = label_ids
        self.inputs = inputs

    def __iter__(self) -> Iterator[Any]:
        yield from (
            (self.predictions, self.label_ids)
            if self.inputs is None
            else (
                self.predictions,
                self.label_ids,
                self.inputs,
            )
        )

    def __getitem__(self, idx: int) -> Any:
        return tuple(self)[idx]


class TrainOutput(NamedTuple):
    global_step: int
    training_loss: float
    metrics: dict[str, float]


class PredictionOutput(NamedTuple):
    predictions: Any
    label_ids: Any
    metrics: dict[str, float] | None


class _EpochSampler(DistributedSampler):
    """A ``DistributedSampler`` (also used with one process) whose order depends only on seed and epoch,
    and that can start part-way through an epoch, so a resumed run reads exactly the batches it would have."""

    def __init__(self, dataset: Any, num_replicas: int, rank: int, shuffle: bool, seed: int, drop_last: bool):
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed, drop_last=drop_last)
        self.skip = 0

    def __iter__(self) -> Iterator[int]:
        indices = list(super().__iter__())
        return iter(indices[self.skip :])

    def __len__(self) -> int:
        return self.num_samples - self.skip


def _is_sized(dataset: Any) -> bool:
    try:
        len(dataset)
    except TypeError:
        return False
    return not isinstance(dataset, IterableDataset)


def _to_numpy(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.float().numpy() if value.dtype == torch.bfloat16 else value.numpy()
    if isinstance(value, (tuple, list)):
        return type(value)(_to_numpy(v) for v in value)
    return value


def _concat(a: Any, b: Any) -> Any:
    """Concatenate batches along dim 0, padding later dims with -100 when sequence lengths differ."""
    if a is None:
        return b
    if isinstance(a, (tuple, list)):
        return type(a)(_concat(x, y) for x, y in zip(a, b))
    if a.dim() < 2 or a.shape[1:] == b.shape[1:]:
        return torch.cat([a, b], dim=0)
    shape = [a.shape[0] + b.shape[0], *(max(x, y) for x, y in zip(a.shape[1:], b.shape[1:]))]
    out = a.new_full(shape, IGNORE_INDEX)
    out[(slice(0, a.shape[0]), *(slice(0, s) for s in a.shape[1:]))] = a
    out[(slice(a.shape[0], None), *(slice(0, s) for s in b.shape[1:]))] = b
    return out


def _detach(value: Any) -> Any:
    if isinstance(value, (tuple, list)):
        return type(value)(_detach(v) for v in value)
    return value.detach().cpu() if isinstance(value, torch.Tensor) else value


def _check_trainer_arguments(
    args: Any,
    data_collator: Any,
    model_init: Any,
    compute_loss_func: Any,
    compute_metrics: Any,
    optimizers: Any,
    preprocess_logits_for_metrics: Any,
) -> None:
    """``Trainer(...)`` arguments of the wrong kind, refused when the Trainer is made (not at the first step or
    evaluation, minutes later, as an AttributeError or TypeError)."""
    if not isinstance(args, TrainingArguments):
        raise ConfigError(
            f"Trainer(args={args!r:.60}): pass a TrainingArguments (TrainingArguments(**settings) for a dict)"
        )
    functions = {
        "data_collator": data_collator,
        "model_init": model_init,
        "compute_loss_func": compute_loss_func,
        "compute_metrics": compute_metrics,
        "preprocess_logits_for_metrics": preprocess_logits_for_metrics,
    }
    for name, value in functions.items():
        if value is not None and not callable(value):
            raise ConfigError(f"Trainer({name}={value!r:.60}): pass a function (or None)")
    if not isinstance(optimizers, (tuple, list)) or len(optimizers) != 2:
        raise ConfigError(
            f"Trainer(optimizers={optimizers!r:.60}): pass a pair (optimizer, lr_scheduler); None in either place "
            "lets the Trainer build it"
        )
    optimizer, scheduler = optimizers
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise ConfigError(
            f"Trainer(optimizers=({optimizer!r:.60}, ...)): the optimizer must be a torch.optim.Optimizer"
        )
    if scheduler is not None and not callable(getattr(scheduler, "step", None)):
        raise ConfigError(
            f"Trainer(optimizers=(..., {scheduler!r:.60})): the scheduler needs a step() method "
            "(a torch.optim.lr_scheduler object)"
        )


class Trainer:
    """Train, evaluate and predict with a model (see docs/training.md)."""

    def __init__(
        self,
        model: nn.Module | None = None,
        args: TrainingArguments | None = None,
        data_collator: Callable[[list[Any]], dict[str, Any]] | None = None,
        train_dataset: Any = None,
        eval_dataset: Any = None,
        processing_class: Any = None,
        model_init: Callable[[], nn.Module] | None = None,
        compute_loss_func: Callable[..., torch.Tensor] | None = None,
        compute_metrics: Callable[[EvalPrediction], dict[str, float]] | None = None,
        callbacks: list[TrainerCallback] | None = None,
        optimizers: tuple[torch.optim.Optimizer | None, Any] = (None, None),
        preprocess_logits_for_metrics: Callable[[Any, Any], Any] | None = None,
    ) -> None:
        self.args = args if args is not None else TrainingArguments(output_dir="trainer_output")
        _check_trainer_arguments(
            self.args,
            data_collator,
            model_init,
            compute_loss_func,
            compute_metrics,
            optimizers,
            preprocess_logits_for_metrics,
        )
        self._seed_everything()
        from microformers import logging as mf_logging

        mf_logging.set_verbosity(self.args.get_process_log_level())
        self.model_init = model_init
        given = "Trainer(model=...) is"
        if model is None:
            if model_init is None:
                raise ConfigError("Trainer needs a model (or model_init, a function that builds one)")
            model, given = model_init(), "model_init() returned"
        if not isinstance(model, nn.Module):
            raise ConfigError(
                f"{given} {model!r:.60}, not a torch module; load the model first, e.g. "
                "AutoModelForCausalLM.from_pretrained(name), and pass that"
            )
        self._setup_distributed()
        self.model = model.to(self.args.device)
        self.model_wrapped: nn.Module = self.model
        self.processing_class = processing_class
        if data_collator is None:
            data_collator = (
                DataCollatorWithPadding(processing_class) if hasattr(processing_class, "pad") else default_data_collator
            )
        self.data_collator = data_collator
        self.train_dataset = train_dataset
        self.eval_dataset = eval_dataset
        if self.args.eval_strategy != "no" and eval_dataset is None:
            raise ConfigError(
                f"TrainingArguments(eval_strategy={self.args.eval_strategy!r}) needs an eval_dataset; pass "
                "Trainer(eval_dataset=...) or set eval_strategy='no'"
            )
        self.compute_loss_func = compute_loss_func
        self.compute_metrics = compute_metrics
        self.preprocess_logits_for_metrics = preprocess_logits_for_metrics
        self.optimizer, self.lr_scheduler = optimizers
        if self.args.fsdp and self.optimizer is not None:
            raise ConfigError(
                "Trainer(optimizers=...) with TrainingArguments(fsdp=...): sharding replaces the model's parameters, "
                "so an optimizer built beforehand would not step them; leave optimizers unset (the Trainer builds "
                "them after sharding from optim/learning_rate/...)"
            )
        forward = inspect.signature(self.model.forward).parameters
        self._forward_params = list(forward)
        self.model_accepts_loss_kwargs = getattr(
            self.model, "accepts_loss_kwargs", any(p.kind is inspect.Parameter.VAR_KEYWORD for p in forward.values())
        )
        default_labels = [n for n in forward if "label" in n or n in ("start_positions", "end_positions")]
        self.label_names = self.args.label_names if self.args.label_names is not None else default_labels
        self.can_return_loss = "return_loss" in forward
        self._is_causal_lm = self._detect_causal_lm()
        # Label tokens counted for ``num_items_in_batch``: position 0 is no target of a shifted causal-LM loss.
        # Like the reference, the shift is assumed for ``*ForCausalLM`` classes (or ``loss_type="ForCausalLM"``)
        # only, so GPT2LMHeadModel counts every label and its logged loss matches the reference's.
        loss_type = getattr(self.model, "loss_type", None) or type(self.model).__name__
        self._loss_shifts_labels = "ForCausalLM" in loss_type and not getattr(
            getattr(self.model, "config", None), "is_encoder_decoder", False
        )

        integrations = self._report_to_callbacks()
        progress = PrinterCallback if self.args.disable_tqdm else ProgressCallback
        self.callback_handler = CallbackHandler(
            [DefaultFlowCallback, *integrations, *(callbacks or [])],
            self.model,
            processing_class,
            self.optimizer,
            self.lr_scheduler,
        )
        self.add_callback(progress)
        self.state = TrainerState(
            is_local_process_zero=self.args.local_process_index == 0, is_world_process_zero=self.args.process_index == 0
        )
        self.control = TrainerControl()
        self.control = self.callback_handler.on_init_end(self.args, self.state, self.control)

    # -- setup -------------------------------------------------------------------------------------
    def _seed_everything(self) -> None:
        if self.args.full_determinism:
            enable_full_determinism(self.args.seed)
        else:
            set_seed(self.args.seed)

    def _setup_distributed(self) -> None:
        self.is_distributed = self.args.world_size > 1
        if self.args.fsdp and not self.is_distributed and "MASTER_ADDR" not in os.environ:
            raise ConfigError(
                "TrainingArguments(fsdp=...) shards the model over the processes of a torchrun launch: run "
                "`torchrun --nproc_per_node N your_script.py` (gloo on CPU, nccl on GPUs), or drop fsdp"
            )
        needs_group = self.is_distributed or bool(self.args.fsdp)
        if needs_group and not torch.distributed.is_initialized():
            backend = "nccl" if self.args.device.type == "cuda" else "gloo"
            torch.distributed.init_process_group(backend=backend)

    def _detect_causal_lm(self) -> bool:
        model_type = getattr(getattr(self.model, "config", None), "model_type", None)
        reg = registry.get("models", (model_type, "AutoModelForCausalLM")) if model_type else None
        if reg is not None and isinstance(reg.ref, str):
            return reg.ref.rpartition(":")[2] == type(self.model).__name__
        return reg is not None and reg.ref is type(self.model)

    def _report_to_callbacks(self) -> list[TrainerCallback]:
        wanted = self.args.report_to
        installed = registry.names("callbacks")
        if wanted == ["none"]:
            return []
        if "all" in wanted:
            wanted = sorted(installed)
        out = []
        for name in wanted:
            reg = registry.get("callbacks", name)
            if reg is None:
                raise ConfigError(
                    f"TrainingArguments(report_to={name!r}): no installed plugin provides this integration; "
                    f"installed: {', '.join(map(repr, installed)) or 'none'} (or 'all' / 'none')"
                )
            out.append(reg.load()())
        return out

    def add_callback(self, callback: type[TrainerCallback] | TrainerCallback) -> None:
        self.callback_handler.add_callback(callback)

    def pop_callback(self, callback: type[TrainerCallback] | TrainerCallback) -> TrainerCallback | None:
        return self.callback_handler.pop_callback(callback)

    def remove_callback(self, callback: type[TrainerCallback] | TrainerCallback) -> None:
        self.callback_handler.remove_callback(callback)

    # -- data --------------------------------------------------------------------------------------
    def _signature_columns(self) -> set[str]:
        return {*self._forward_params, *self.label_names, "label", "label_ids"}

    def _prepare_dataset(self, dataset: Any) -> Any:
        columns = getattr(dataset, "column_names", None)
        if self.args.remove_unused_columns and isinstance(columns, list) and hasattr(dataset, "remove_columns"):
            unused = [c for c in columns if c not in self._signature_columns()]
            if unused and len(unused) == len(columns):
                raise InputError(
                    f"remove_unused_columns=True would drop every column {columns} of the dataset: none is an "
                    f"argument of {type(self.model).__name__}.forward; rename them or pass remove_unused_columns=False"
                )
            if unused:
                dataset = dataset.remove_columns(unused)
        return dataset

    def _collate(self, features: list[Any]) -> dict[str, Any]:
        if self.args.remove_unused_columns and features and isinstance(features[0], Mapping):
            keep = self._signature_columns()
            features = [{k: v for k, v in f.items() if k in keep} for f in features]
        return self.data_collator(features)

    def _get_train_sampler(self, dataset: Any) -> Any:
        """Each epoch a fresh permutation from ``data_seed`` (or ``seed``) and the epoch; under torchrun,
        this process's shard of it. Override to change the order (``None`` for the dataset's own)."""
        if not _is_sized(dataset):
            return None
        return _EpochSampler(
            dataset,
            num_replicas=self.args.world_size,
            rank=self.args.process_index,
            shuffle=True,
            seed=self.args.data_seed if self.args.data_seed is not None else self.args.seed,
            drop_last=self.args.dataloader_drop_last,
        )

    def _loader(self, dataset: Any, batch_size: int, train: bool) -> DataLoader:
        dataset = self._prepare_dataset(dataset)
        sampler = self._get_train_sampler(dataset) if train else None
        return DataLoader(
            dataset,
            batch_size=batch_size,
            sampler=sampler,
            collate_fn=self._collate,
            num_workers=self.args.dataloader_num_workers,
            drop_last=self.args.dataloader_drop_last,
            pin_memory=self.args.dataloader_pin_memory and self.args.device.type == "cuda",
            generator=torch.Generator().manual_seed(self.args.seed),
        )

    def get_train_dataloader(self) -> DataLoader:
        if self.train_dataset is None:
            raise ConfigError("Trainer.train() needs a train_dataset; pass Trainer(train_dataset=...)")
        return self._loader(self.train_dataset, self.args.train_batch_size, train=True)

    def get_eval_dataloader(self, eval_dataset: Any = None) -> DataLoader:
        dataset = eval_dataset if eval_dataset is not None else self.eval_dataset
        if dataset is None:
            raise ConfigError("Trainer.evaluate() needs an eval_dataset (Trainer(eval_dataset=...) or evaluate(ds))")
        return self._loader(dataset, self.args.eval_batch_size, train=False)

    def get_test_dataloader(self, test_dataset: Any) -> DataLoader:
        return self._loader(test_dataset, self.args.eval_batch_size, train=False)

    def _prepare_inputs(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(inputs, Mapping):
            raise InputError(
                f"a training batch must be a dict of tensors; the collator returned a {type(inputs).__name__}"
            )
        device = self.args.device
        return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}

    # -- optimizer and schedule ----------------------------------------------------------------------
    def get_decay_parameter_names(self, model: nn.Module) -> list[str]:
        """Parameters weight decay applies to: not biases, not norm weights (LayerNorm / RMSNorm / ``*norm``)."""
        names = []
        for module_name, module in model.named_modules():
            is_norm = isinstance(module, nn.LayerNorm) or "RMSNorm" in type(module).__name__
            for pname, _ in module.named_parameters(recurse=False):
                full = f"{module_name}.{pname}" if module_name else pname
                if not is_norm and not any(p.search(full.lower()) for p in _NO_DECAY):
                    names.append(full)
        return names

    def create_optimizer(self) -> torch.optim.Optimizer:
        if self.optimizer is None:
            decay = set(self.get_decay_parameter_names(self.model))
            params = [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]
            groups = [
                {"params": [p for n, p in params if n in decay], "weight_decay": self.args.weight_decay},
                {"params": [p for n, p in params if n not in decay], "weight_decay": 0.0},
            ]
            args = self.args
            if args.optim in ("adamw_torch", "adamw_torch_fused"):
                self.optimizer = torch.optim.AdamW(
                    groups,
                    lr=args.learning_rate,
                    betas=(args.adam_beta1, args.adam_beta2),
                    eps=args.adam_epsilon,
                    fused=args.optim == "adamw_torch_fused",
                )
            elif args.optim == "sgd":
                self.optimizer = torch.optim.SGD(groups, lr=args.learning_rate)
            else:
                self.optimizer = Adafactor(groups, lr=args.learning_rate, scale_parameter=False, relative_step=False)
        return self.optimizer

    def create_scheduler(self, num_training_steps: int, optimizer: torch.optim.Optimizer | None = None) -> Any:
        if self.lr_scheduler is None:
            self._created_scheduler = True
            self.lr_scheduler = get_scheduler(
                self.args.lr_scheduler_type,
                optimizer or self.optimizer,
                num_warmup_steps=self.args.get_warmup_steps(num_training_steps),
                num_training_steps=num_training_steps,
                scheduler_specific_kwargs=self.args.lr_scheduler_kwargs,
            )
        return self.lr_scheduler

    def create_optimizer_and_scheduler(self, num_training_steps: int) -> None:
        self.create_optimizer()
        self.create_scheduler(num_training_steps)

    def _get_learning_rate(self) -> float:
        if isinstance(self.lr_scheduler, METRIC_SCHEDULES):
            lr = self.optimizer.param_groups[0]["lr"]
            return lr.item() if isinstance(lr, torch.Tensor) else lr
        lr = self.lr_scheduler.get_last_lr()[0]
        return lr.item() if isinstance(lr, torch.Tensor) else lr

    # -- loss ----------------------------------------------------------------------------------------
    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.args.bf16:
            return torch.autocast(device_type=self.args.device.type, dtype=torch.bfloat16)
        if self.args.fp16:
            return torch.autocast(device_type=self.args.device.type, dtype=torch.float16)
        return contextlib.nullcontext()

    @property
    def _grad_scaler(self) -> torch.amp.GradScaler | None:
        """fp16 training's loss scaler (float16 gradients underflow without it), made on first use."""
        if not self.args.fp16:
            return None
        scaler = self.__dict__.get("_fp16_scaler")
        if scaler is None:
            scaler = self.__dict__["_fp16_scaler"] = torch.amp.GradScaler(self.args.device.type)
        return scaler

    def _smoothed_loss(self, outputs: Any, labels: torch.Tensor, num_items: Any) -> torch.Tensor:
        logits = outputs["logits"] if isinstance(outputs, Mapping) else outputs[0]
        if self._is_causal_lm:
            logits, labels = logits[..., :-1, :], labels[..., 1:]
        log_probs = -torch.log_softmax(logits.float(), dim=-1)
        if labels.dim() == log_probs.dim() - 1:
            labels = labels.unsqueeze(-1)
        padding = labels.eq(IGNORE_INDEX)
        nll = log_probs.gather(-1, labels.clamp(min=0)).masked_fill(padding, 0.0)
        smooth = log_probs.sum(dim=-1, keepdim=True).masked_fill(padding, 0.0)
        active = num_items if num_items is not None else padding.numel() - padding.long().sum()
        eps = self.args.label_smoothing_factor
        return (1 - eps) * nll.sum() / active + eps * smooth.sum() / (active * log_probs.shape[-1])

    def compute_loss(
        self,
        model: nn.Module,
        inputs: dict[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: Any = None,
    ) -> Any:
        """The model's loss on ``inputs`` (label smoothing or ``compute_loss_func`` when configured)."""
        custom = self.args.label_smoothing_factor != 0 or self.compute_loss_func is not None
        labels = inputs.pop("labels") if custom and "labels" in inputs else None
        if self.model_accepts_loss_kwargs and num_items_in_batch is not None:
            inputs = {**inputs, "num_items_in_batch": num_items_in_batch}
        outputs = model(**inputs)
        if self.compute_loss_func is not None:
            loss = self.compute_loss_func(outputs, labels, num_items_in_batch=num_items_in_batch)
        elif labels is not None:
            loss = self._smoothed_loss(outputs, labels, num_items_in_batch)
        else:
            loss = outputs.get("loss") if isinstance(outputs, Mapping) else (outputs[0] if outputs else None)
            if loss is None or (isinstance(loss, torch.Tensor) and loss.dim() > 0 and loss.numel() > 1):
                keys = sorted(k for k in inputs if k != "num_items_in_batch")
                raise InputError(
                    f"{type(self.model).__name__} returned no loss for a batch with keys {keys}; the batch needs "
                    f"labels (the model's label arguments are {self.label_names or 'none'}; set "
                    "TrainingArguments(label_names=[...]) if yours are named differently), or pass "
                    "Trainer(compute_loss_func=...)"
                )
        return (loss, outputs) if return_outputs else loss

    def _num_items(self, batches: list[dict[str, Any]], across_processes: bool = True) -> Any:
        if not batches or "labels" not in batches[0]:
            return None
        if not (self.model_accepts_loss_kwargs or self.compute_loss_func is not None):
            return None
        count = 0
        for batch in batches:
            labels = batch["labels"]
            if self._loss_shifts_labels:
                labels = labels[..., 1:]
            count += int(labels.ne(IGNORE_INDEX).sum())
        total = torch.tensor(count, device=self.args.device)
        if self.is_distributed and across_processes:
            torch.distributed.all_reduce(total)
        return total

    def training_step(self, model: nn.Module, inputs: dict[str, Any], num_items_in_batch: Any = None) -> torch.Tensor:
        """Forward and backward on one micro-batch; returns the detached (scaled) loss."""
        model.train()
        inputs = self._prepare_inputs(inputs)
        with self._autocast():
            loss = self.compute_loss(model, inputs, num_items_in_batch=num_items_in_batch)
        scaled = (self.model_accepts_loss_kwargs and num_items_in_batch is not None) or self.compute_loss_func
        if not scaled:
            loss = loss / self._current_accumulation
        elif num_items_in_batch is not None and self.is_distributed:
            loss = loss * self.args.world_size
        scaler = self._grad_scaler
        (loss if scaler is None else scaler.scale(loss)).backward()
        return loss.detach()

    # -- training loop -------------------------------------------------------------------------------
    def train(self, resume_from_checkpoint: str | bool | None = None, trial: Any = None, **kwargs: Any) -> TrainOutput:
        """Train; ``resume_from_checkpoint`` (a folder, or ``True`` for the latest in ``output_dir``) continues a run.
        ``trial`` (an optuna trial, or a dict of argument values) sets the hyperparameters of a search run."""
        if kwargs:
            raise ConfigError(f"Trainer.train() got unexpected arguments {sorted(kwargs)}")
        self._trial = trial
        if trial is not None:
            self._apply_trial(trial)
        args = self.args
        if resume_from_checkpoint is None:
            resume_from_checkpoint = args.resume_from_checkpoint
        if resume_from_checkpoint is False:
            resume_from_checkpoint = None
        if resume_from_checkpoint is not None and not isinstance(resume_from_checkpoint, (bool, str, os.PathLike)):
            raise ConfigError(
                f"train(resume_from_checkpoint={resume_from_checkpoint!r:.60}): pass a checkpoint folder, True (the "
                "latest checkpoint in output_dir) or None"
            )
        if resume_from_checkpoint is True:
            resume_from_checkpoint = ckpt.get_last_checkpoint(args.output_dir)
            if resume_from_checkpoint is None:
                raise ckpt.CheckpointError(
                    f"resume_from_checkpoint=True: no complete checkpoint-<step> folder in {args.output_dir}"
                )
        resume = None
        if resume_from_checkpoint is not None:
            resume = ckpt.require_checkpoint(resume_from_checkpoint, need_optimizer=not args.save_only_model)
        if self.model_init is not None:  # a fresh model for every train() call, as the reference does
            self._seed_everything()
            self.model = self.model_init().to(args.device)
            self.model_wrapped = self.model
            self.optimizer, self.lr_scheduler = None, None
        if args.gradient_checkpointing:
            enable = getattr(self.model, "gradient_checkpointing_enable", None)
            if enable is None or not getattr(self.model, "supports_gradient_checkpointing", False):
                raise ConfigError(
                    f"TrainingArguments(gradient_checkpointing=True): {type(self.model).__name__} does not support "
                    "gradient checkpointing"
                )
            enable(gradient_checkpointing_kwargs=args.gradient_checkpointing_kwargs)
        if resume is not None:
            if args.fsdp and fsdp_utils.is_sharded(self.model):
                raise ConfigError(
                    "train(resume_from_checkpoint=...) with fsdp: this Trainer's model is already sharded by an earlier "
                    "train() call; build a new Trainer (with an unsharded model) to resume"
                )
            if ckpt.is_sharded(resume):
                if not args.fsdp:
                    raise ckpt.CheckpointError(
                        f"resume_from_checkpoint={str(resume)!r} is a sharded FSDP checkpoint "
                        f"({ckpt.SHARDED_MODEL_DIR}/); resume it with TrainingArguments(fsdp=...) under torchrun "
                        "(any number of processes)"
                    )
                # read once the model is sharded, each process its own part (in _training_loop)
            else:
                ckpt.load_model_weights(self.model, resume)
        neftune = self._activate_neftune() if args.neftune_noise_alpha is not None else None
        debug = None
        if "underflow_overflow" in args.debug:
            from .debug_utils import DebugUnderflowOverflow

            debug = DebugUnderflowOverflow(self.model)
        try:
            return self._training_loop(resume)
        finally:
            if neftune is not None:
                neftune.remove()
                del self.model.get_input_embeddings().neftune_noise_alpha
            if debug is not None:
                debug.remove()

    def _activate_neftune(self) -> Any:
        """NEFTune: noise on the input embeddings' output while training (removed when ``train`` returns)."""
        get = getattr(self.model, "get_input_embeddings", None)
        embeddings = get() if get is not None else None
        if not isinstance(embeddings, nn.Module):
            raise ConfigError(
                f"TrainingArguments(neftune_noise_alpha={self.args.neftune_noise_alpha}): "
                f"{type(self.model).__name__} has no get_input_embeddings() module to add the noise to"
            )
        embeddings.neftune_noise_alpha = self.args.neftune_noise_alpha
        return embeddings.register_forward_hook(neftune_post_forward_hook)

    def _load_optimizer_and_scheduler(self, folder: Path) -> None:
        """Both files checked against this optimizer and schedule before either is loaded."""
        optimizer_file, scheduler_file = folder / ckpt.OPTIMIZER_NAME, folder / ckpt.SCHEDULER_NAME
        if ckpt.is_sharded(folder):  # each process reads its shards, which torch.distributed.checkpoint checks
            scheduler_state = ckpt.load_torch_file(scheduler_file)
            ckpt.check_scheduler_state(scheduler_state, self.lr_scheduler, scheduler_file)
            fsdp_utils.load_sharded(self.model, self.optimizer, folder)
            self.lr_scheduler.load_state_dict(scheduler_state)
            return
        optimizer_state = ckpt.load_torch_file(optimizer_file)
        if not self.args.fsdp:  # an fsdp checkpoint's state is keyed by parameter name, checked as it loads
            ckpt.check_optimizer_state(optimizer_state, self.optimizer, optimizer_file)
        scheduler_state = ckpt.load_torch_file(scheduler_file)
        ckpt.check_scheduler_state(scheduler_state, self.lr_scheduler, scheduler_file)
        for target, state, path in (
            (self.optimizer, optimizer_state, optimizer_file),
            (self.lr_scheduler, scheduler_state, scheduler_file),
        ):
            try:
                if self.args.fsdp and target is self.optimizer:
                    fsdp_utils.load_full_optimizer_state_dict(self.model, self.optimizer, state)
                else:
                    target.load_state_dict(state)
            except (KeyError, TypeError, ValueError, RuntimeError) as exc:
                raise ckpt.CheckpointError(
                    f"{path} could not be loaded into the {type(target).__name__} ({type(exc).__name__}: {exc}); "
                    "resume from an earlier checkpoint-<step> folder"
                ) from exc

    # -- hyperparameter search -------------------------------------------------------------------------
    def _apply_trial(self, trial: Any) -> None:
        """The trial's hyperparameters as this run's TrainingArguments (checked again as a whole); a search run
        writes under ``<output_dir>/run-<trial number>`` (or ``hp_name(trial)``)."""
        if isinstance(trial, Mapping):
            params, run = dict(trial), None
        else:
            params = (getattr(self, "hp_space", None) or default_hp_space_optuna)(trial)
            name_run = getattr(self, "hp_name", None)
            run = name_run(trial) if name_run is not None else f"run-{trial.number}"
        if not isinstance(params, Mapping):
            raise ConfigError(f"hp_space must return a dict of TrainingArguments values; it returned {params!r:.100}")
        fields = {a.name for a in attrs.fields(type(self.args))}
        unknown = sorted(set(params) - fields)
        if unknown:
            raise ConfigError(
                f"hyperparameter search: {unknown} are not TrainingArguments fields; the search space may only set "
                "training arguments (build other choices into model_init(trial))"
            )
        base = getattr(self, "_search_args", None) or self.args
        changes = {k: (type(getattr(base, k))(v) if getattr(base, k) is not None else v) for k, v in params.items()}
        if run is not None:
            changes["output_dir"] = str(Path(base.output_dir) / run)
        self.args = attrs.evolve(base, **changes)

    def hyperparameter_search(
        self,
        hp_space: Callable[[Any], dict[str, Any]] | None = None,
        compute_objective: Callable[[dict[str, float]], float] | None = None,
        n_trials: int = 20,
        direction: str | list[str] = "minimize",
        backend: str | None = None,
        hp_name: Callable[[Any], str] | None = None,
        **kwargs: Any,
    ) -> BestRun | list[BestRun]:
        """Search training arguments with optuna: ``n_trials`` runs, each training a fresh ``model_init()``
        model with the values ``hp_space(trial)`` suggests (default: learning rate, epochs, seed, batch size),
        scored by ``compute_objective(metrics)`` of a final ``evaluate()`` (default: ``eval_loss``, or the sum of
        the ``compute_metrics`` values). Evaluations during training are reported to optuna, so its pruner can
        stop a trial early. ``direction``: ``"minimize"``/``"maximize"``, or a list of them for several
        objectives (then a list of the best runs comes back). ``kwargs``: ``sampler``, ``pruner``, ``storage``,
        ``study_name``, ``load_if_exists`` (the study) and ``timeout``, ``callbacks``, ``catch``,
        ``gc_after_trial`` (its ``optimize``)."""
        backend = getattr(backend, "value", backend)
        if backend is None:
            backend = "optuna"
        if backend != "optuna":
            known = ("ray", "sigopt", "wandb")
            raise ConfigError(
                f"hyperparameter_search(backend={backend!r}): "
                + ("this Trainer runs searches with optuna only" if backend in known else "unknown backend")
                + "; use backend='optuna' (pip install optuna)"
            )
        try:
            import optuna
        except ImportError as exc:
            raise PluginError(
                f"hyperparameter_search(backend='optuna') needs optuna ({exc}): pip install optuna"
            ) from exc
        if self.model_init is None:
            raise ConfigError(
                "hyperparameter_search needs Trainer(model_init=...): every trial trains a fresh model from it"
            )
        directions = [direction] if isinstance(direction, str) else list(direction)
        if not directions or any(getattr(d, "value", d) not in ("minimize", "maximize") for d in directions):
            raise ConfigError(
                f"hyperparameter_search(direction={direction!r}): use 'minimize' or 'maximize' (or a list)"
            )
        if isinstance(n_trials, bool) or not isinstance(n_trials, int) or n_trials < 1:
            raise ConfigError(f"hyperparameter_search(n_trials={n_trials!r}): use a positive integer")
        study_keys = {"sampler", "pruner", "storage", "study_name", "load_if_exists"}
        optimize_keys = {"timeout", "callbacks", "catch", "gc_after_trial", "n_jobs"}
        unknown = sorted(set(kwargs) - study_keys - optimize_keys)
        if unknown:
            raise ConfigError(
                f"hyperparameter_search got unknown arguments {unknown}; it takes "
                f"{sorted(study_keys | optimize_keys)} besides its named ones"
            )
        if kwargs.get("n_jobs", 1) != 1:
            raise ConfigError(
                "hyperparameter_search(n_jobs=...): trials share this Trainer and run one at a time; use 1"
            )
        self.hp_space = hp_space or default_hp_space_optuna
        self.compute_objective = compute_objective or default_compute_objective
        self.hp_name = hp_name
        self._search_args = self.args
        multi = len(directions) > 1

        def objective(trial: Any) -> Any:
            self.train(trial=trial)
            value = self.compute_objective(dict(self.evaluate()))
            if multi and (not isinstance(value, (list, tuple)) or len(value) != len(directions)):
                raise ConfigError(
                    f"compute_objective returned {value!r:.100}; {len(directions)} directions need as many values"
                )
            return list(value) if multi else value

        study_kwargs = {k: v for k, v in kwargs.items() if k in study_keys}
        optimize_kwargs = {k: v for k, v in kwargs.items() if k in optimize_keys - {"n_jobs"}}
        if multi:
            study = optuna.create_study(directions=directions, **study_kwargs)
        else:
            study = optuna.create_study(direction=directions[0], **study_kwargs)
        try:
            study.optimize(objective, n_trials=n_trials, **optimize_kwargs)
        finally:
            self.args, self._search_args, self._trial = self._search_args, None, None
        if multi:
            return [BestRun(str(t.number), list(t.values), dict(t.params)) for t in study.best_trials]
        best = study.best_trial
        return BestRun(str(best.number), best.value, dict(best.params))

    def _wrap_model(self) -> nn.Module:
        model: nn.Module = self.model
        if self.args.fsdp:
            if not fsdp_utils.is_sharded(model):
                fsdp_utils.shard_model(model, self.args.fsdp_config, self.args.device, self.args.world_size)
        elif self.is_distributed and not isinstance(self.model_wrapped, nn.parallel.DistributedDataParallel):
            device_ids = [self.args.device.index] if self.args.device.type == "cuda" else None
            model = nn.parallel.DistributedDataParallel(model, device_ids=device_ids)
        elif isinstance(self.model_wrapped, nn.parallel.DistributedDataParallel):
            model = self.model_wrapped
        if self.args.torch_compile:
            self._compile_layers()
        return model

    def _compile_layers(self) -> None:
        """``torch_compile=True``: compile each repeated layer (the model's ``_no_split_modules``) in place,
        or the whole model when it names none; one graph serves every layer of a kind."""
        kinds = set(getattr(self.model, "_no_split_modules", None) or ())
        if self.args.fsdp:
            kinds = set(fsdp_utils.layer_class_names(self.model, self.args.fsdp_config))
        layers = [m for m in self.model.modules() if fsdp_utils.class_name(m) in kinds]
        for layer in layers or [self.model]:
            if not getattr(layer, "_compiled_call_impl", None):
                layer.compile()

    def _training_loop(self, resume: Path | None) -> TrainOutput:
        args = self.args
        loader = self.get_train_dataloader()
        sized = _is_sized(loader.dataset)
        ga = args.gradient_accumulation_steps
        if sized:
            batches_per_epoch = len(loader)
            if batches_per_epoch == 0:
                raise InputError("the train_dataset is empty (or smaller than one batch with dataloader_drop_last)")
            updates_per_epoch = max(batches_per_epoch // ga + int(batches_per_epoch % ga > 0), 1)
            if args.max_steps > 0:
                max_steps = args.max_steps
                num_epochs = max_steps // updates_per_epoch + int(max_steps % updates_per_epoch > 0)
            else:
                max_steps = math.ceil(args.num_train_epochs * updates_per_epoch)
                num_epochs = math.ceil(args.num_train_epochs)
        else:
            if args.max_steps <= 0:
                raise ConfigError(
                    "a train_dataset without a length (IterableDataset) needs TrainingArguments(max_steps=N)"
                )
            max_steps, num_epochs = args.max_steps, 2**31
            updates_per_epoch, batches_per_epoch = max_steps, max_steps * ga

        self.state = TrainerState(
            is_local_process_zero=args.local_process_index == 0, is_world_process_zero=args.process_index == 0
        )
        self.state.train_batch_size = args.train_batch_size
        self.state.compute_steps(args, max_steps)
        self.state.max_steps, self.state.num_train_epochs = max_steps, num_epochs
        # samples the whole schedule covers, as the reference counts them for train_samples_per_second
        total_batch = args.train_batch_size * ga * args.world_size
        if sized and args.max_steps <= 0:
            self._num_train_samples = len(loader.dataset) * args.num_train_epochs
        else:
            self._num_train_samples = max_steps * total_batch
        first_epoch, skip_batches = 0, 0
        if resume is not None:
            saved = ckpt.load_trainer_state(resume / ckpt.STATE_NAME)
            self.state.global_step, self.state.epoch = saved.global_step, saved.epoch
            self.state.log_history, self.state.best_metric = saved.log_history, saved.best_metric
            self.state.best_global_step, self.state.best_model_checkpoint = (
                saved.best_global_step,
                saved.best_model_checkpoint,
            )
            self.state.num_input_tokens_seen, self.state.total_flos = saved.num_input_tokens_seen, saved.total_flos
            first_epoch = saved.global_step // updates_per_epoch
            if not args.ignore_data_skip:
                skip_batches = (saved.global_step % updates_per_epoch) * ga

        if getattr(self, "_created_scheduler", False):  # a new run gets a schedule for its own length
            self.lr_scheduler, self._created_scheduler = None, False
        if args.fsdp:  # the optimizer must hold the sharded parameters
            model = self._wrap_model()
            self.create_optimizer()
        else:
            self.create_optimizer()
            model = self._wrap_model()
        self.model_wrapped = model
        self.create_scheduler(max_steps)
        restore_rng = None
        if resume is not None:
            if ckpt.is_sharded(resume) and not (resume / ckpt.SHARDED_OPTIMIZER_DIR).is_dir():
                fsdp_utils.load_sharded(self.model, None, resume)  # saved with save_only_model
            elif (resume / ckpt.OPTIMIZER_NAME).is_file() or ckpt.is_sharded(resume):
                self._load_optimizer_and_scheduler(resume)
            rng_file = resume / ckpt.rng_file_name(args.process_index, args.world_size)
            if rng_file.is_file():  # each process its own generators, as saved
                restore_rng = ckpt.load_rng_file(rng_file)
                ckpt.check_rng_state(restore_rng, rng_file)
            elif any(resume.glob("rng_state*.pth")):
                logger.warning(
                    "%s has no %s (saved with another number of processes): the generators are not restored, "
                    "so dropout and sampling will not repeat the interrupted run",
                    resume,
                    rng_file.name,
                )
        for name in ("model", "optimizer", "lr_scheduler"):
            setattr(self.callback_handler, name, getattr(self, name))
        self.callback_handler.train_dataloader = loader

        start = time.time()
        self._initial_step = self.state.global_step
        self._tr_loss = torch.tensor(0.0, device=args.device)
        self._total_loss = 0.0
        self._last_logged = self.state.global_step
        self._epochs_run = first_epoch
        grad_norm: Any = None
        model.zero_grad()
        self.control = self.callback_handler.on_train_begin(args, self.state, self.control)
        if args.eval_on_start:
            self._evaluate_during_training()

        for epoch in range(first_epoch, num_epochs):
            sampler = loader.sampler
            if isinstance(sampler, _EpochSampler):
                sampler.set_epoch(epoch)
                sampler.skip = skip_batches * args.train_batch_size if epoch == first_epoch else 0
            done_updates = skip_batches // ga if epoch == first_epoch else 0
            step = (skip_batches - 1) if epoch == first_epoch else -1
            self.control = self.callback_handler.on_epoch_begin(args, self.state, self.control)
            iterator = iter(loader)
            remainder = batches_per_epoch % ga or ga
            for update in range(done_updates, updates_per_epoch):
                if restore_rng is not None:
                    ckpt.set_rng_state(restore_rng)
                    restore_rng = None
                wanted = ga if update != updates_per_epoch - 1 else remainder
                batches = [b for _, b in zip(range(wanted), iterator)]
                if not batches:
                    break
                num_items = self._num_items(batches)
                self._current_accumulation = len(batches)
                for i, inputs in enumerate(batches):
                    step += 1
                    sync = (step + 1) % ga == 0 or step + 1 == batches_per_epoch or i == len(batches) - 1
                    if step % ga == 0:
                        self.control = self.callback_handler.on_step_begin(args, self.state, self.control)
                    last = i == len(batches) - 1
                    if args.fsdp:  # reduce-scatter the gradients once, after the last micro-batch
                        model.set_requires_gradient_sync(last)
                    no_sync = getattr(model, "no_sync", None)
                    context = no_sync() if no_sync is not None and not last else contextlib.nullcontext()
                    with context:
                        loss = self.training_step(model, inputs, num_items)
                    self._track_loss(loss)
                    if sync:
                        grad_norm = self._optimizer_step(model)
                        self.state.global_step += 1
                        self.state.epoch = epoch + (step + 1) / batches_per_epoch
                        self.control = self.callback_handler.on_step_end(args, self.state, self.control)
                        self._maybe_log_save_evaluate(grad_norm, start)
                    else:
                        self.control = self.callback_handler.on_substep_end(args, self.state, self.control)
                    if self.control.should_epoch_stop or self.control.should_training_stop:
                        break
                if self.control.should_epoch_stop or self.control.should_training_stop:
                    break
            self._epochs_run = epoch + 1
            self.control = self.callback_handler.on_epoch_end(args, self.state, self.control)
            self._maybe_log_save_evaluate(grad_norm, start)
            if self.control.should_training_stop:
                break
        return self._finish_training(start, sized and args.max_steps <= 0)

    def _track_loss(self, loss: torch.Tensor) -> None:
        value = float(loss)
        if math.isfinite(value):
            self._tr_loss += loss
            return
        step = self.state.global_step + 1
        message = f"loss is {value} at step {step} (epoch {self.state.epoch or 0:.2f})"
        if self.args.stop_on_nan_inf:
            raise TrainingError(
                f"{message}; training stopped (stop_on_nan_inf=True). Lower the learning_rate, enable "
                "max_grad_norm clipping, or check the data of this step"
            )
        logger.warning(
            "%s; %s",
            message,
            "it is replaced by the running mean of the logged losses"
            if self.args.logging_nan_inf_filter
            else "it is added to the logged loss",
        )
        self.state.log_history.append({"nan_inf_loss": value, "step": step})
        if self.args.logging_nan_inf_filter:
            self._tr_loss += self._tr_loss / (1 + self.state.global_step - self._last_logged)
        else:
            self._tr_loss += loss

    def _optimizer_step(self, model: nn.Module) -> float | None:
        args = self.args
        params = [p for p in model.parameters() if p.grad is not None]
        grad_norm = None
        scaler = self._grad_scaler
        if scaler is not None:
            scaler.unscale_(self.optimizer)  # clipping and the callbacks see the true gradients
        if args.max_grad_norm is not None and args.max_grad_norm > 0 and params:
            norm = torch.nn.utils.clip_grad_norm_(params, args.max_grad_norm)
            grad_norm = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
        self.control = self.callback_handler.on_pre_optimizer_step(args, self.state, self.control)
        if scaler is None:
            self.optimizer.step()
        else:  # skips the step when a gradient overflowed, and adapts the scale
            scaler.step(self.optimizer)
            scaler.update()
        self.control = self.callback_handler.on_optimizer_step(args, self.state, self.control)
        self._step_lr = self._get_learning_rate()
        if not isinstance(self.lr_scheduler, METRIC_SCHEDULES):  # those step with each evaluation's metric
            self.lr_scheduler.step()
        model.zero_grad()
        return grad_norm

    def _gathered_loss(self) -> float:
        loss = self._tr_loss.detach().clone()
        if self.is_distributed:
            torch.distributed.all_reduce(loss)
            loss /= self.args.world_size
        return float(loss)

    def _maybe_log_save_evaluate(self, grad_norm: float | None, start: float) -> None:
        if self.control.should_log and self.state.global_step > self._last_logged:
            total = self._gathered_loss()
            self._tr_loss.zero_()
            logs: dict[str, float] = {"loss": total / (self.state.global_step - self._last_logged)}
            if grad_norm is not None:
                logs["grad_norm"] = grad_norm
            logs["learning_rate"] = self._step_lr if hasattr(self, "_step_lr") else self._get_learning_rate()
            self._total_loss += total
            self._last_logged = self.state.global_step
            self.log(logs)
        is_new_best = False
        if self.control.should_evaluate:
            metrics = self._evaluate_during_training()
            is_new_best = self._update_best(metrics)
            if self.args.save_strategy == "best":
                self.control.should_save = is_new_best
        if self.control.should_save:
            self._save_checkpoint()
            self.control = self.callback_handler.on_save(self.args, self.state, self.control)

    def _evaluate_during_training(self) -> dict[str, float]:
        metrics = self.evaluate()
        trial = getattr(self, "_trial", None)
        if trial is not None and hasattr(trial, "report"):  # optuna: intermediate values, and pruning
            objective = self.compute_objective(dict(metrics))
            trial.report(objective, self.state.global_step)
            if trial.should_prune():
                import optuna

                self.callback_handler.on_train_end(self.args, self.state, self.control)
                raise optuna.TrialPruned()
        if isinstance(self.lr_scheduler, METRIC_SCHEDULES):
            name = self.args.metric_for_best_model or "loss"
            key = name if name.startswith("eval_") else f"eval_{name}"
            if key not in metrics:
                raise ConfigError(
                    f"lr_scheduler_type={self.args.lr_scheduler_type!r} steps with metric_for_best_model={name!r}, but "
                    f"the evaluation returned no {key!r}; metrics are {sorted(metrics)}"
                )
            self.lr_scheduler.step(metrics[key])
        return metrics

    def _update_best(self, metrics: dict[str, float]) -> bool:
        name = self.args.metric_for_best_model
        if name is None:
            return False
        key = name if name.startswith("eval_") else f"eval_{name}"
        if key not in metrics:
            raise ConfigError(
                f"metric_for_best_model={name!r}: the evaluation returned no {key!r}; metrics are {sorted(metrics)}"
            )
        value = metrics[key]
        best = self.state.best_metric
        if best is None or (value > best if self.args.greater_is_better else value < best):
            self.state.best_metric, self.state.best_global_step = value, self.state.global_step
            return True
        return False

    def _finish_training(self, start: float, by_epochs: bool) -> TrainOutput:
        args = self.args
        self._total_loss += self._gathered_loss()
        self._tr_loss.zero_()
        steps = self.state.global_step - self._initial_step
        train_loss = self._total_loss / max(steps, 0.001)
        runtime = time.time() - start
        samples = self._num_train_samples * steps / max(self.state.max_steps, 1)  # the share this call ran
        metrics = {
            "train_runtime": round(runtime, 4),
            "train_samples_per_second": round(samples / runtime, 3) if runtime > 0 else 0.0,
            "train_steps_per_second": round(steps / runtime, 3) if runtime > 0 else 0.0,
            "total_flos": float(self.state.total_flos),
            "train_loss": train_loss,
        }
        if args.load_best_model_at_end and self.state.best_model_checkpoint is not None:
            best = Path(self.state.best_model_checkpoint)
            if ckpt.is_complete(best):
                ckpt.load_model_weights(self.model, best)
        self.log(dict(metrics))
        if self.is_distributed:
            torch.distributed.barrier()
        self.control = self.callback_handler.on_train_end(args, self.state, self.control)
        return TrainOutput(self.state.global_step, train_loss, metrics)

    # -- checkpoints -----------------------------------------------------------------------------------
    def _save_checkpoint(self) -> None:
        args = self.args
        folder = Path(args.output_dir) / f"{ckpt.PREFIX}-{self.state.global_step}"
        if args.metric_for_best_model is not None and self.state.best_global_step:
            best = Path(args.output_dir) / f"{ckpt.PREFIX}-{self.state.best_global_step}"
            if best == folder or best.is_dir():
                self.state.best_model_checkpoint = str(best)
        rng_states = [] if args.save_only_model else [ckpt.rng_state()]
        if rng_states and self.is_distributed:  # every rank's generators, written by rank 0 in the same folder
            rng_states = [None] * args.world_size
            torch.distributed.all_gather_object(rng_states, ckpt.rng_state())
        sharded = bool(args.fsdp) and args.fsdp_config["state_dict_type"] == "SHARDED_STATE_DICT"
        state_dict = optimizer_state = None
        if args.fsdp and not sharded:  # gathered by every process, written by rank 0
            state_dict = fsdp_utils.full_state_dict(self.model)
            if not args.save_only_model:
                optimizer_state = fsdp_utils.full_optimizer_state_dict(self.model, self.optimizer)
        elif not args.fsdp and not args.save_only_model and args.should_save:
            optimizer_state = self.optimizer.state_dict()
        try:
            self._write_checkpoint(folder, sharded, state_dict, optimizer_state, rng_states)
        except BaseException:
            if args.should_save:  # the empty folder staged_folder created for a checkpoint that was not written
                with contextlib.suppress(OSError):
                    folder.rmdir()
            raise
        if args.should_save:
            ckpt.rotate(args.output_dir, args.save_total_limit, self.state.best_model_checkpoint)
        if self.is_distributed:
            torch.distributed.barrier()

    def _write_checkpoint(
        self,
        folder: Path,
        sharded: bool,
        state_dict: dict[str, torch.Tensor] | None,
        optimizer_state: Any,
        rng_states: list[Any],
    ) -> None:
        """Rank 0 stages ``folder`` and swaps it in whole; with ``sharded`` every process writes its shards
        into that staging folder first."""
        args = self.args
        with contextlib.ExitStack() as stack:
            staging = None
            if args.should_save:
                ckpt.remove_stale_staging(args.output_dir)
                try:
                    # replace="*": the new folder holds only what this save writes, never an earlier run's files
                    staging = stack.enter_context(staged_folder(folder, replace=("*",)))
                except BaseException:
                    if sharded:  # the other processes are waiting for the folder: tell them there is none
                        with contextlib.suppress(ckpt.CheckpointError):
                            fsdp_utils.shared_folder(None)
                    raise
            if sharded:  # every process writes its shards into rank 0's staging folder, swapped in as a whole
                staging = fsdp_utils.shared_folder(staging)
                fsdp_utils.save_sharded(self.model, None if args.save_only_model else self.optimizer, staging)
            if args.should_save:
                if sharded:
                    self._save_config(staging)
                elif state_dict is None:
                    self._save(staging)
                else:
                    self._save(staging, state_dict)
                if not args.save_only_model:
                    if not sharded:
                        torch.save(optimizer_state, staging / ckpt.OPTIMIZER_NAME)
                    torch.save(self.lr_scheduler.state_dict(), staging / ckpt.SCHEDULER_NAME)
                for rank, state in enumerate(rng_states):
                    torch.save(state, staging / ckpt.rng_file_name(rank, len(rng_states)))
                self.state.save_to_json(staging / ckpt.STATE_NAME)

    def _save_config(self, folder: Path) -> None:
        """What a sharded checkpoint holds beside the shards: the model's configuration (its own class in
        ``architectures``), the processing class and the training arguments."""
        config = getattr(self.model, "config", None)
        if config is not None and hasattr(config, "save_pretrained"):
            config.architectures = [fsdp_utils.class_name(self.model)]
            config.save_pretrained(folder)
        if self.processing_class is not None and hasattr(self.processing_class, "save_pretrained"):
            self.processing_class.save_pretrained(folder)
        (folder / ckpt.ARGS_NAME).write_text(self.args.to_json_string() + "\n", encoding="utf-8")

    def _save(self, folder: Path, state_dict: dict[str, torch.Tensor] | None = None) -> None:
        model = self.model
        if hasattr(model, "save_pretrained"):
            if state_dict is None:
                model.save_pretrained(folder)
            else:
                with fsdp_utils.unwrapped_class(model):
                    model.save_pretrained(folder, state_dict=state_dict)
        else:
            from safetensors.torch import save_file

            tensors = state_dict if state_dict is not None else model.state_dict()
            save_file({k: v.contiguous() for k, v in tensors.items()}, str(folder / "model.safetensors"))
        if self.processing_class is not None and hasattr(self.processing_class, "save_pretrained"):
            self.processing_class.save_pretrained(folder)
        (folder / ckpt.ARGS_NAME).write_text(self.args.to_json_string() + "\n", encoding="utf-8")

    def save_model(self, output_dir: str | None = None) -> None:
        """Save the model (and the processing class) to ``output_dir`` (default ``args.output_dir``), atomically.
        Under ``fsdp`` every process must call it: the full weights are gathered, rank 0 writes them, and the
        call returns on every process once the folder is complete."""
        gathered = self.args.fsdp and fsdp_utils.is_sharded(self.model)
        state_dict = fsdp_utils.full_state_dict(self.model) if gathered else None
        if self.args.should_save:
            target = Path(output_dir if output_dir is not None else self.args.output_dir)
            with staged_folder(target) as staging:
                self._save(staging) if state_dict is None else self._save(staging, state_dict)
        if gathered:
            torch.distributed.barrier()

    # -- logging -----------------------------------------------------------------------------------
    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """Record ``logs`` in ``state.log_history`` and pass them to every callback's ``on_log``."""
        if self.state.epoch is not None:
            logs["epoch"] = self.state.epoch
        self.state.log_history.append({**logs, "step": self.state.global_step})
        self.control = self.callback_handler.on_log(self.args, self.state, self.control, logs=logs)

    # -- evaluation and prediction ---------------------------------------------------------------------
    def evaluate(
        self, eval_dataset: Any = None, ignore_keys: list[str] | None = None, metric_key_prefix: str = "eval"
    ) -> dict[str, float]:
        """Loss (``eval_loss``) and ``compute_metrics`` results on the eval dataset. A dict of datasets (given here
        or as ``Trainer(eval_dataset={...})``) is evaluated one by one, each under ``<prefix>_<name>_``; a name
        given here picks that dataset of the Trainer's dict (under ``<prefix>_``), as in the reference."""
        datasets = self.eval_dataset if eval_dataset is None else eval_dataset
        if isinstance(eval_dataset, str) and isinstance(self.eval_dataset, dict):
            if eval_dataset not in self.eval_dataset:
                raise ConfigError(
                    f"evaluate({eval_dataset!r}): the Trainer's eval datasets are {', '.join(map(repr, self.eval_dataset))}"
                )
            return Trainer.evaluate(self, self.eval_dataset[eval_dataset], ignore_keys, metric_key_prefix)
        if isinstance(datasets, dict):
            metrics: dict[str, float] = {}
            for name, dataset in datasets.items():  # Trainer.evaluate: a subclass's evaluate already ran its setup
                metrics.update(Trainer.evaluate(self, dataset, ignore_keys, f"{metric_key_prefix}_{name}"))
            return metrics
        loader = self.get_eval_dataloader(eval_dataset)
        start = time.time()
        output = self.evaluation_loop(loader, "Evaluation", None, ignore_keys, metric_key_prefix)
        metrics = dict(output.metrics or {})
        metrics.update(self._speed(metric_key_prefix, start, output))
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics=metrics)
        return metrics

    def predict(
        self, test_dataset: Any, ignore_keys: list[str] | None = None, metric_key_prefix: str = "test"
    ) -> PredictionOutput:
        """Predictions (numpy), labels (when the dataset has them) and metrics on ``test_dataset``."""
        loader = self.get_test_dataloader(test_dataset)
        start = time.time()
        output = self.evaluation_loop(loader, "Prediction", False, ignore_keys, metric_key_prefix)
        metrics = dict(output.metrics or {})
        metrics.update(self._speed(metric_key_prefix, start, output))
        self.control = self.callback_handler.on_predict(self.args, self.state, self.control, metrics=metrics)
        return PredictionOutput(output.predictions, output.label_ids, metrics)

    def _speed(self, prefix: str, start: float, output: Any) -> dict[str, float]:
        runtime = time.time() - start
        out = {f"{prefix}_runtime": round(runtime, 4)}
        if self._num_samples and runtime > 0:
            out[f"{prefix}_samples_per_second"] = round(self._num_samples / runtime, 3)
            out[f"{prefix}_steps_per_second"] = round(self._num_batches / runtime, 3)
        return out

    def evaluation_loop(
        self,
        dataloader: DataLoader,
        description: str,
        prediction_loss_only: bool | None = None,
        ignore_keys: list[str] | None = None,
        metric_key_prefix: str = "eval",
    ) -> PredictionOutput:
        loss_only = prediction_loss_only if prediction_loss_only is not None else self.args.prediction_loss_only
        if self.compute_metrics is None and prediction_loss_only is None:
            loss_only = True
        model = self.model
        model.eval()
        self.callback_handler.eval_dataloader = dataloader
        losses: list[torch.Tensor] = []
        preds: Any = None
        labels: Any = None
        self._num_samples = self._num_batches = 0
        for inputs in dataloader:
            loss, logits, label = self.prediction_step(model, inputs, loss_only, ignore_keys)
            size = self._batch_size(inputs)
            self._num_samples += size
            self._num_batches += 1
            if loss is not None:
                losses.append(loss.float().repeat(size))
            if logits is not None and self.preprocess_logits_for_metrics is not None:
                logits = self.preprocess_logits_for_metrics(logits, label)
            if logits is not None:
                preds = _concat(preds, logits)
            if label is not None:
                labels = _concat(labels, label)
            self.control = self.callback_handler.on_prediction_step(self.args, self.state, self.control)
        preds, labels = _to_numpy(preds), _to_numpy(labels)
        metrics: dict[str, float] = {}
        if self.compute_metrics is not None and preds is not None and labels is not None:
            computed = self.compute_metrics(EvalPrediction(predictions=preds, label_ids=labels))
            if not isinstance(computed, Mapping):
                raise ConfigError(
                    f"compute_metrics returned {computed!r:.60}; it must return a dict of metric name -> value "
                    "(e.g. {'accuracy': 0.9})"
                )
            metrics = dict(computed)
        if losses:
            metrics["loss"] = float(torch.cat(losses).mean())
        metrics = {
            k if k.startswith(f"{metric_key_prefix}_") else f"{metric_key_prefix}_{k}": v for k, v in metrics.items()
        }
        return PredictionOutput(preds, labels, metrics)

    @staticmethod
    def _batch_size(inputs: Mapping[str, Any]) -> int:
        for value in inputs.values():
            if isinstance(value, torch.Tensor) and value.dim() > 0:
                return int(value.shape[0])
        return 1

    def prediction_step(
        self, model: nn.Module, inputs: dict[str, Any], prediction_loss_only: bool, ignore_keys: list[str] | None = None
    ) -> tuple[torch.Tensor | None, Any, Any]:
        """``(loss, logits, labels)`` for one batch, without gradients."""
        inputs = self._prepare_inputs(inputs)
        has_labels = bool(self.label_names) and all(inputs.get(k) is not None for k in self.label_names)
        return_loss = inputs.get("return_loss", self.can_return_loss)
        loss_without_labels = not self.label_names and bool(return_loss)
        label = None
        if has_labels:
            found = tuple(_detach(inputs[k]) for k in self.label_names)
            label = found[0] if len(found) == 1 else found
        if ignore_keys is None:
            ignore_keys = list(
                getattr(getattr(model, "config", None), "keys_to_ignore_at_inference", ["past_key_values"])
            )
        with torch.no_grad(), self._autocast():
            if has_labels or loss_without_labels:
                num_items = self._num_items([inputs], across_processes=False)
                loss, outputs = self.compute_loss(
                    model, dict(inputs), return_outputs=True, num_items_in_batch=num_items
                )
                loss = loss.detach().mean()
                skip = {*ignore_keys, "loss"}
            else:
                loss, outputs = None, model(**inputs)
                skip = set(ignore_keys)
        if prediction_loss_only:
            return loss, None, None
        if isinstance(outputs, Mapping):
            logits = tuple(v for k, v in outputs.items() if k not in skip)
        else:
            logits = tuple(outputs[1:] if loss is not None else outputs)
        logits = _detach(logits)
        return loss, (logits[0] if len(logits) == 1 else logits), label
