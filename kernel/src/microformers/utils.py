"""Small helpers users expect at the top level."""

from __future__ import annotations

import random


def set_seed(seed: int) -> None:
    """Seed Python, NumPy and torch RNGs for reproducible sampling."""
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
