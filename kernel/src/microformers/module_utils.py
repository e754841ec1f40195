"""``ModuleUtilsMixin``: the module helpers the reference documented on every model before version 5 and that
model code written against it (remote code included) still calls: attention-mask expansion, head masks,
token and FLOP estimates, per-module memory hooks. ``PreTrainedModel`` inherits it; ``device``, ``dtype`` and
``num_parameters`` (the helpers the reference keeps) are ``PreTrainedModel``'s own.

- ``get_extended_attention_mask(mask, input_shape, dtype=None)``: a ``(batch, seq)`` or ``(batch, q, k)`` mask of
  1 (attend) / 0 (ignore) as the additive ``(batch, 1, q|1, k)`` mask (0 kept, the dtype's minimum masked),
  causal as well when ``config.is_decoder``; ``invert_attention_mask`` is the same for encoder masks.
- ``get_head_mask(head_mask, num_hidden_layers)``: ``None`` -> one ``None`` per layer; ``(heads,)`` or
  ``(layers, heads)`` -> ``(layers, 1, heads, 1, 1)`` in the model's dtype.
- ``estimate_tokens(inputs)`` (elements of ``inputs[main_input_name]``) and ``floating_point_ops(inputs)``
  (``6 * tokens * parameters``, embeddings excluded by default: a forward and backward pass).
- ``add_memory_hooks()`` / ``reset_memory_hooks_state()``: each module's ``mem_rss_diff`` (resident memory
  change over its forward, needs ``psutil``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from .errors import InputError, PluginError

logger = logging.getLogger("microformers")

__all__ = ["ModuleUtilsMixin", "causal_extended_attention_mask"]


def _check_mask(mask: Any, argument: str, where: str) -> torch.Tensor:
    if not isinstance(mask, torch.Tensor) or mask.dim() not in (2, 3):
        shape = tuple(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise InputError(
            f"{where}({argument}=...): expected a tensor of shape (batch, seq) or (batch, query, key) holding "
            f"1 for positions to attend to and 0 for the others; got {shape}"
        )
    return mask


def causal_extended_attention_mask(input_shape: Sequence[int], attention_mask: torch.Tensor) -> torch.Tensor:
    """A ``(batch, seq)`` padding mask combined with the causal mask as ``(batch, 1, seq, seq + prefix)`` (a mask
    longer than ``seq``, as with a cache, keeps its leading ``prefix`` positions visible to every query)."""
    batch, length = int(input_shape[0]), int(input_shape[1])
    keys = attention_mask.shape[1]
    if keys < length:
        raise InputError(
            f"create_extended_attention_mask_for_decoder: attention_mask covers {keys} positions, fewer than the "
            f"{length} of input_shape; pass a mask of at least {length} columns"
        )
    positions = torch.arange(length, device=attention_mask.device)
    causal = (positions[None, :] <= positions[:, None]).to(attention_mask.dtype)  # (query, key)
    prefix = torch.ones(length, keys - length, dtype=attention_mask.dtype, device=attention_mask.device)
    causal = torch.cat([prefix, causal], dim=-1).expand(batch, length, keys)
    return causal[:, None, :, :] * attention_mask[:, None, None, :]


def _memory_pre_hook(module: nn.Module, *_: Any) -> None:
    import psutil

    module.mem_rss_pre_forward = psutil.Process(os.getpid()).memory_info().rss


def _memory_post_hook(module: nn.Module, *_: Any) -> None:
    import psutil

    module.mem_rss_post_forward = psutil.Process(os.getpid()).memory_info().rss
    module.mem_rss_diff = module.mem_rss_post_forward - module.mem_rss_pre_forward


class ModuleUtilsMixin:
    """The reference's (version 4) ``ModuleUtilsMixin`` helpers, for ``PreTrainedModel``."""

    def _helper_dtype(self, dtype: torch.dtype | None) -> torch.dtype:
        if dtype is None:
            dtype = self.dtype  # type: ignore[attr-defined]
        if not dtype.is_floating_point:
            raise InputError(f"{type(self).__name__}: an additive attention mask needs a floating dtype, got {dtype}")
        return dtype

    @staticmethod
    def create_extended_attention_mask_for_decoder(
        input_shape: Sequence[int], attention_mask: torch.Tensor, device: torch.device | None = None
    ) -> torch.Tensor:
        """The padding mask times the causal mask, ``(batch, 1, seq, keys)`` of 1/0 (``device``: where to put it)."""
        mask = causal_extended_attention_mask(input_shape, attention_mask)
        return mask if device is None else mask.to(device)

    def get_extended_attention_mask(
        self,
        attention_mask: torch.Tensor,
        input_shape: Sequence[int],
        device: torch.device | None = None,
        dtype: torch.dtype | None = None,
    ) -> torch.Tensor:
        """``attention_mask`` (1 attend, 0 ignore) as an additive mask broadcastable over heads: 0 where attended,
        ``torch.finfo(dtype).min`` elsewhere; causal too when ``config.is_decoder`` and the mask is 2-D."""
        mask = _check_mask(attention_mask, "attention_mask", "get_extended_attention_mask")
        dtype = self._helper_dtype(dtype)
        if mask.dim() == 3:
            extended = mask[:, None, :, :]
        elif getattr(getattr(self, "config", None), "is_decoder", False):
            extended = self.create_extended_attention_mask_for_decoder(input_shape, mask)
        else:
            extended = mask[:, None, None, :]
        extended = extended.to(dtype)
        if device is not None:
            extended = extended.to(device)
        return (1.0 - extended) * torch.finfo(dtype).min

    def invert_attention_mask(self, encoder_attention_mask: torch.Tensor) -> torch.Tensor:
        """An encoder's 1/0 mask as the additive ``(batch, 1, 1|q, k)`` mask in the model's dtype."""
        mask = _check_mask(encoder_attention_mask, "encoder_attention_mask", "invert_attention_mask")
        dtype = self._helper_dtype(None)
        extended = (mask[:, None, :, :] if mask.dim() == 3 else mask[:, None, None, :]).to(dtype)
        return (1.0 - extended) * torch.finfo(dtype).min

    def get_head_mask(
        self, head_mask: torch.Tensor | None, num_hidden_layers: int, is_attention_chunked: bool = False
    ) -> torch.Tensor | list[None]:
        """``None``: ``[None] * num_hidden_layers``; ``(heads,)`` (every layer) or ``(layers, heads)``: a
        ``(layers, 1, heads, 1, 1)`` tensor in the model's dtype (one more trailing axis if
        ``is_attention_chunked``)."""
        if head_mask is None:
            return [None] * num_hidden_layers
        if not isinstance(head_mask, torch.Tensor) or head_mask.dim() not in (1, 2, 5):
            shape = tuple(head_mask.shape) if isinstance(head_mask, torch.Tensor) else type(head_mask).__name__
            raise InputError(
                f"get_head_mask(head_mask=...): expected a tensor of shape (heads,) or (layers, heads) of 1 (keep) "
                f"and 0 (silence), or an already expanded (layers, batch, heads, query, key); got {shape}"
            )
        if head_mask.dim() == 1:
            head_mask = head_mask[None, None, :, None, None].expand(num_hidden_layers, -1, -1, -1, -1)
        elif head_mask.dim() == 2:
            head_mask = head_mask[:, None, :, None, None]
        if head_mask.shape[0] != num_hidden_layers:
            raise InputError(
                f"get_head_mask(head_mask=...): {head_mask.shape[0]} rows of layers for num_hidden_layers="
                f"{num_hidden_layers}; give one row per layer or a single (heads,) row for all"
            )
        head_mask = head_mask.to(self._helper_dtype(None))
        return head_mask.unsqueeze(-1) if is_attention_chunked else head_mask

    def estimate_tokens(self, input_dict: Mapping[str, Any]) -> int:
        """The number of elements of ``input_dict[main_input_name]`` (0, with a warning once, when it is absent)."""
        name = getattr(self, "main_input_name", "input_ids")
        value = input_dict.get(name) if isinstance(input_dict, Mapping) else None
        if isinstance(value, torch.Tensor):
            return value.numel()
        if not getattr(self, "_warned_estimate_tokens", False):
            logger.warning(
                "%s.estimate_tokens: the inputs hold no %r tensor, so the token count (and floating_point_ops) is 0",
                type(self).__name__,
                name,
            )
            self._warned_estimate_tokens = True
        return 0

    def floating_point_ops(self, input_dict: Mapping[str, Any], exclude_embeddings: bool = True) -> int:
        """``6 * tokens * parameters``: the operations of a forward and a backward pass over ``input_dict``
        (the Kaplan et al. estimate; embedding parameters left out unless ``exclude_embeddings=False``)."""
        tokens = self.estimate_tokens(input_dict)
        return 6 * tokens * self.num_parameters(exclude_embeddings=exclude_embeddings)  # type: ignore[attr-defined]

    def add_memory_hooks(self) -> None:
        """After each forward, every module has ``mem_rss_diff``: the change of this process's resident memory
        over its forward (``reset_memory_hooks_state`` sets it back to 0). Needs ``psutil``."""
        try:
            import psutil  # noqa: F401
        except ImportError as exc:
            raise PluginError(
                f"{type(self).__name__}.add_memory_hooks needs psutil to read memory use ({exc}); pip install psutil"
            ) from exc
        for module in self.modules():  # type: ignore[attr-defined]
            module.register_forward_pre_hook(_memory_pre_hook)
            module.register_forward_hook(_memory_post_hook)
        self.reset_memory_hooks_state()

    def reset_memory_hooks_state(self) -> None:
        """Sets every module's ``mem_rss_diff``, ``mem_rss_pre_forward`` and ``mem_rss_post_forward`` to 0."""
        for module in self.modules():  # type: ignore[attr-defined]
            module.mem_rss_diff = 0
            module.mem_rss_pre_forward = 0
            module.mem_rss_post_forward = 0
