"""Small helpers users expect at the top level."""

from __future__ import annotations

import random


def set_seed(seed: int, deterministic: bool = False) -> None:
    """Seed Python, NumPy and torch (every CUDA device too) for reproducible sampling; ``deterministic=True``
    also makes torch use deterministic algorithms only (``torch.use_deterministic_algorithms(True)``: an op
    without one raises), as the reference's ``set_seed``."""
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)  # does nothing without CUDA
    if deterministic:
        torch.use_deterministic_algorithms(True)
