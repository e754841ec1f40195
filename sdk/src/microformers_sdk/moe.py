"""Mixture-of-experts building blocks: top-k routing, a sparse expert loop, the load-balancing loss.

A sparse MoE layer replaces a decoder layer's MLP. For every token a linear *router* (``gate``) scores
the experts; the ``top_k`` best by softmax probability run on that token and their outputs are summed,
weighted by those probabilities (renormalised to sum to 1 when ``normalize`` is set: Mixtral always,
Qwen2-MoE with ``norm_topk_prob``). Qwen2-MoE adds a *shared expert* every token goes through, scaled
by ``sigmoid(shared_expert_gate(x))``.

:func:`run_experts` runs each expert once, on exactly the tokens routed to it (``index_select`` in,
``index_add_`` out); experts no token chose cost nothing. :func:`load_balancing_loss` is the
Switch-Transformer auxiliary loss the reference adds to the language-modelling loss
(``router_aux_loss_coef`` times it) when ``output_router_logits`` is on.

Expert weights are per-expert modules (``experts.{e}.<proj>.weight``), the layout of the checkpoints on
the Hub and the one the reference writes when it saves. :class:`FusedExpertsSource` reads checkpoints
that store each layer's experts as two stacked 3-D tensors (``experts.gate_up_proj`` of shape
``(experts, 2 * intermediate, hidden)`` and ``experts.down_proj`` of ``(experts, hidden, intermediate)``,
the reference's in-memory layout) as if they were per-expert tensors.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from microformers.errors import ConfigError

from .layers import apply_linear
from .masks import exporting_graph

#: The most experts a config may declare: building each one's layers takes time and memory before any weight is read.
MAX_EXPERTS = 4096


def check_expert_counts(
    config: Any, experts_field: str, top_k_field: str = "num_experts_per_tok", *, allow_zero: bool = False
) -> None:
    """Refuse a config whose expert counts cannot route: ``top_k`` must be in ``1..num_experts``.

    The error names both fields; ``from_pretrained`` adds the file. ``allow_zero`` accepts
    ``num_experts == 0`` (a model with no sparse layers at all).
    """
    experts, top_k = getattr(config, experts_field), getattr(config, top_k_field)
    name = type(config).__name__
    for field, value in ((experts_field, experts), (top_k_field, top_k)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"{field}={value!r} in {name} must be a non-negative integer; fix config.json")
    if experts > MAX_EXPERTS:  # checked before a module is built: each expert is its own set of layers
        raise ConfigError(
            f"{experts_field}={experts} in {name} is more experts than any mixture-of-experts model has (at most "
            f"{MAX_EXPERTS} here; released ones route over a few hundred); the file is damaged. Fix config.json"
        )
    if experts == 0 and allow_zero:
        return
    if experts == 0 or top_k == 0:
        raise ConfigError(
            f"{experts_field}={experts} and {top_k_field}={top_k} in {name} must be positive; fix config.json"
        )
    if top_k > experts:
        raise ConfigError(
            f"{top_k_field}={top_k} in {name} is larger than {experts_field}={experts}: a token cannot be routed to "
            f"more experts than there are. Fix config.json ({top_k_field} <= {experts_field})"
        )


class TopKRouter(nn.Module):
    """``gate``: a bias-free linear scoring of the experts, softmax, then the ``top_k`` best per token.

    ``forward(hidden (tokens, hidden))`` returns ``(router_logits (tokens, experts), weights (tokens, top_k),
    experts (tokens, top_k))``. The softmax runs in float32; with ``normalize`` the chosen probabilities
    are divided by their sum. ``float32_weights`` keeps the weights in float32 (Mixtral); otherwise they
    are cast to the logits' dtype (Qwen2-MoE), as the reference does for each.
    """

    def __init__(
        self, hidden_size: int, num_experts: int, top_k: int, normalize: bool, float32_weights: bool = False
    ) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_experts, hidden_size))
        self.num_experts = num_experts
        self.top_k = top_k
        self.normalize = normalize
        self.float32_weights = float32_weights

    def forward(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        router_logits = F.linear(hidden_states, self.weight)
        probabilities = torch.softmax(router_logits, dim=-1, dtype=torch.float32)
        weights, experts = torch.topk(probabilities, self.top_k, dim=-1)
        if self.normalize:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        if not self.float32_weights:
            weights = weights.to(router_logits.dtype)
        return router_logits, weights, experts

    def extra_repr(self) -> str:
        return f"experts={self.num_experts}, top_k={self.top_k}, normalize={self.normalize}"


def run_experts(
    hidden_states: torch.Tensor, experts: Sequence[nn.Module], expert_index: torch.Tensor, weights: torch.Tensor
) -> torch.Tensor:
    """``sum_k weights[t, k] * experts[expert_index[t, k]](hidden_states[t])`` for every token ``t``.

    ``hidden_states`` is ``(tokens, hidden)``, ``expert_index`` and ``weights`` ``(tokens, top_k)``.
    The (token, slot) pairs are sorted by expert once; each expert then runs on its own tokens only,
    and its weighted output is added back in place. Experts run in ascending order, as in the reference.
    In a traced or exported graph every expert runs on every token, weighted by its share of each token's
    routing (zero where not chosen): which experts get tokens depends on the values, which a graph replayed on
    other inputs cannot fix in advance.
    """
    if exporting_graph():
        output = torch.zeros_like(hidden_states)
        for number, expert in enumerate(experts):
            share = (weights * (expert_index == number)).sum(-1, keepdim=True)
            output = output + (expert(hidden_states) * share).to(output.dtype)
        return output
    if hidden_states.shape[0] == 1:  # one token (batch-1 decoding): its experts in ascending order, no sorting
        output = None
        chosen = expert_index[0].tolist()
        for slot in sorted(range(len(chosen)), key=chosen.__getitem__):
            scaled = (experts[chosen[slot]](hidden_states) * weights[0, slot]).to(hidden_states.dtype)
            output = scaled if output is None else output + scaled
        return output
    output = torch.zeros_like(hidden_states)
    top_k = expert_index.shape[-1]
    flat = expert_index.reshape(-1)
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=len(experts)).tolist()  # the one host sync of the layer
    tokens = order // top_k
    sorted_weights = weights.reshape(-1)[order]
    start = 0
    for expert, count in zip(experts, counts):
        if count == 0:
            continue
        token_index = tokens[start : start + count]
        expert_out = expert(hidden_states.index_select(0, token_index))
        scaled = expert_out * sorted_weights[start : start + count, None]
        output.index_add_(0, token_index, scaled.to(output.dtype))
        start += count
    return output


class SparseMoeBlock(nn.Module):
    """Router + experts (+ optional gated shared expert): a drop-in replacement for a decoder MLP.

    ``forward(hidden (batch, seq, hidden))`` returns ``(output (batch, seq, hidden), router_logits
    (batch * seq, experts))``. ``jitter_noise`` (training only) multiplies the input by uniform noise in
    ``[1 - jitter, 1 + jitter]`` before routing, as Mixtral's ``router_jitter_noise`` does.
    """

    def __init__(
        self,
        hidden_size: int,
        experts: Sequence[nn.Module],
        top_k: int,
        *,
        normalize: bool,
        float32_weights: bool = False,
        shared_expert: nn.Module | None = None,
        jitter_noise: float = 0.0,
    ) -> None:
        super().__init__()
        self.gate = TopKRouter(hidden_size, len(experts), top_k, normalize, float32_weights)
        self.experts = nn.ModuleList(experts)
        self.jitter_noise = float(jitter_noise or 0.0)
        if shared_expert is not None:
            self.shared_expert = shared_expert
            self.shared_expert_gate = nn.Linear(hidden_size, 1, bias=False)

    def forward(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        batch, seq_len, hidden = hidden_states.shape
        if self.training and self.jitter_noise > 0:
            noise = torch.empty_like(hidden_states).uniform_(1.0 - self.jitter_noise, 1.0 + self.jitter_noise)
            hidden_states = hidden_states * noise
        flat = hidden_states.reshape(-1, hidden)
        router_logits, weights, expert_index = self.gate(flat)
        output = run_experts(flat, self.experts, expert_index, weights)
        if hasattr(self, "shared_expert"):
            gate = torch.sigmoid(apply_linear(self.shared_expert_gate, flat))
            output = output + gate * self.shared_expert(flat)
        return output.reshape(batch, seq_len, hidden), router_logits


def load_balancing_loss(
    router_logits: Sequence[torch.Tensor] | None,
    num_experts: int,
    top_k: int,
    attention_mask: torch.Tensor | None = None,
) -> torch.Tensor | None:
    """The auxiliary load-balancing loss (Switch Transformer, eqs. 4-6) over every MoE layer's router logits.

    ``num_experts * sum_e f_e * P_e``: ``f_e`` the share of top-k assignments that went to expert ``e``
    and ``P_e`` its mean router probability, both over all layers' tokens. With an ``attention_mask``
    (``(batch, seq)``; a longer mask's last ``seq`` columns) padding tokens are left out. ``None`` when
    there are no router logits.
    """
    if not router_logits:
        return None
    device = router_logits[0].device
    assignments = torch.zeros(num_experts, dtype=torch.float32, device=device)
    probability_sum = torch.zeros(num_experts, dtype=torch.float32, device=device)
    rows: torch.Tensor | float = 0.0
    weight = None
    if attention_mask is not None and attention_mask.dim() == 2:
        tokens = router_logits[0].shape[0]
        seq_len = tokens // attention_mask.shape[0]
        weight = attention_mask[:, -seq_len:].reshape(-1).to(device=device, dtype=torch.float32)
    for logits in router_logits:
        probabilities = torch.softmax(logits.to(device), dim=-1, dtype=torch.float32)
        _, chosen = torch.topk(probabilities, top_k, dim=-1)
        if weight is None:
            assignments = assignments + torch.bincount(chosen.reshape(-1), minlength=num_experts).float()
            probability_sum = probability_sum + probabilities.sum(dim=0)
            rows = rows + probabilities.shape[0]
        else:
            assignments = assignments.scatter_add(0, chosen.reshape(-1), weight.repeat_interleave(top_k))
            probability_sum = probability_sum + (probabilities * weight[:, None]).sum(dim=0)
            rows = rows + weight.sum()
    return num_experts * torch.sum((assignments / rows) * (probability_sum / rows))


class FusedExpertsSource(Mapping[str, torch.Tensor]):
    """A checkpoint mapping in which stacked expert tensors read as per-expert ones.

    ``<stem>.experts.gate_up_proj`` ``(E, 2I, H)`` becomes ``<stem>.experts.{e}.<gate>.weight`` (rows
    ``:I``) and ``<stem>.experts.{e}.<up>.weight`` (rows ``I:``); ``<stem>.experts.down_proj`` ``(E, H, I)``
    becomes ``<stem>.experts.{e}.<down>.weight``. ``renames`` (substring pairs, e.g. Mixtral's
    ``(".mlp.", ".block_sparse_moe.")``) are applied to every key of such a checkpoint. Checkpoints without
    stacked tensors should be used directly (see :meth:`wrap`). Each stacked tensor is read once and kept
    until all of its slices were taken.
    """

    _FUSED = re.compile(r"^(?P<stem>.*\.experts)\.(?P<kind>gate_up_proj|down_proj)$")

    def __init__(
        self,
        source: Mapping[str, torch.Tensor],
        gate: str,
        up: str,
        down: str,
        num_experts: int,
        renames: Sequence[tuple[str, str]] = (),
    ) -> None:
        self.source = source
        self._derived: dict[str, tuple[str, int, str]] = {}  # new key -> (source key, expert, part)
        self._plain: dict[str, str] = {}  # new key -> source key
        self._pending: dict[str, tuple[torch.Tensor, int]] = {}
        for key in source.keys():
            renamed = key
            for old, new in renames:
                renamed = renamed.replace(old, new)
            match = self._FUSED.match(renamed)
            if match is None:
                self._plain[renamed] = key
                continue
            stem = match.group("stem")
            parts = ((gate, "gate"), (up, "up")) if match.group("kind") == "gate_up_proj" else ((down, "down"),)
            for expert in range(num_experts):
                for name, part in parts:
                    self._derived[f"{stem}.{expert}.{name}.weight"] = (key, expert, part)

    @classmethod
    def wrap(cls, source: Mapping[str, torch.Tensor], *args: Any, **kwargs: Any) -> Mapping[str, torch.Tensor]:
        """``source`` itself unless it holds stacked expert tensors, else a :class:`FusedExpertsSource` over it."""
        if not any(cls._FUSED.match(key) for key in source.keys()):
            return source
        return cls(source, *args, **kwargs)

    def __iter__(self) -> Iterator[str]:
        yield from self._plain
        yield from self._derived

    def __len__(self) -> int:
        return len(self._plain) + len(self._derived)

    def __contains__(self, key: object) -> bool:
        return key in self._plain or key in self._derived

    def __getitem__(self, key: str) -> torch.Tensor:
        plain = self._plain.get(key)
        if plain is not None:
            return self.source[plain]
        source_key, expert, part = self._derived[key]
        stacked, remaining = self._pending.get(source_key, (None, 0))
        if stacked is None:
            stacked = self.source[source_key]
            remaining = sum(1 for value in self._derived.values() if value[0] == source_key)
        if remaining <= 1:
            self._pending.pop(source_key, None)
        else:
            self._pending[source_key] = (stacked, remaining - 1)
        matrix = stacked[expert]
        if part == "down":
            return matrix.contiguous()
        half = matrix.shape[0] // 2
        return (matrix[:half] if part == "gate" else matrix[half:]).contiguous()

    def file_of(self, key: str) -> Any:
        file_of = getattr(self.source, "file_of", None)
        if file_of is None:
            return None
        derived = self._derived.get(key)
        return file_of(derived[0] if derived else self._plain.get(key, key))
