"""Seeding and determinism, NEFTune's embedding noise, and the hyperparameter-search values (``BestRun``)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any, NamedTuple

import torch
from torch import nn

from microformers import ConfigError, set_seed


def enable_full_determinism(seed: int, warn_only: bool = False) -> None:
    """:func:`set_seed`, then deterministic algorithms only (``warn_only``: warn instead of raising for ops
    without one), the CUDA environment settings they need, and cuDNN without autotuning (as the reference)."""
    set_seed(seed)
    os.environ["CUDA_LAUNCH_BLOCKING"] = "1"
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":16:8"  # cuBLAS is deterministic only with a fixed workspace
    os.environ["FLASH_ATTENTION_DETERMINISTIC"] = "1"
    os.environ["ASCEND_LAUNCH_BLOCKING"] = "1"
    os.environ["HCCL_DETERMINISTIC"] = "1"
    torch.use_deterministic_algorithms(True, warn_only=warn_only)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False


@contextlib.contextmanager
def torch_distributed_zero_first(local_rank: int) -> Iterator[None]:
    """Run the block on each node's first process (``local_rank`` 0) before the others of the node (which
    wait at a barrier), e.g. to download or preprocess once; ``-1`` (no distributed run) just runs it."""
    import torch.distributed as dist

    if local_rank not in (-1, 0) and not (dist.is_available() and dist.is_initialized()):
        raise ConfigError(
            f"torch_distributed_zero_first(local_rank={local_rank}): no process group is initialized; "
            "start with torchrun (or pass -1 when not distributed)"
        )
    if local_rank not in (-1, 0):
        dist.barrier()  # wait for the node's first process to finish the block
    yield
    if local_rank == 0 and dist.is_available() and dist.is_initialized():
        dist.barrier()  # release the others


def neftune_post_forward_hook(module: nn.Module, inputs: Any, output: torch.Tensor) -> torch.Tensor:
    """NEFTune (arXiv 2310.05914): in training mode only, add uniform noise of magnitude
    ``alpha / sqrt(sequence_length * hidden_size)`` to the input embeddings (``module.neftune_noise_alpha``)."""
    if not module.training:
        return output
    magnitude = module.neftune_noise_alpha / torch.sqrt(torch.tensor(output.size(1) * output.size(2)))
    return output + torch.zeros_like(output).uniform_(-magnitude, magnitude)


class BestRun(NamedTuple):
    """The best trial of ``Trainer.hyperparameter_search``: its id, objective and hyperparameters."""

    run_id: str
    objective: float | list[float]
    hyperparameters: dict[str, Any]
    run_summary: Any = None


def default_compute_objective(metrics: dict[str, float]) -> float:
    """The objective of a trial when none is given: the evaluation loss, or the sum of the other metrics when
    ``compute_metrics`` gives any (speed metrics and the epoch left out), as the reference."""
    metrics = dict(metrics)
    loss = metrics.pop("eval_loss", None)
    metrics.pop("epoch", None)
    for key in [k for k in metrics if k.endswith(("_runtime", "_per_second"))]:
        metrics.pop(key)
    return loss if not metrics else sum(metrics.values())


def default_hp_space_optuna(trial: Any) -> dict[str, Any]:
    """The reference's default search space: learning rate, epochs, seed and batch size."""
    return {
        "learning_rate": trial.suggest_float("learning_rate", 1e-6, 1e-4, log=True),
        "num_train_epochs": trial.suggest_int("num_train_epochs", 1, 5),
        "seed": trial.suggest_int("seed", 1, 40),
        "per_device_train_batch_size": trial.suggest_categorical("per_device_train_batch_size", [4, 8, 16, 32, 64]),
    }
