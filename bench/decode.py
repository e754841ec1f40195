"""Greedy decode speed: microformers vs the reference, same weights, same prompts, in one process.

    .venv/bin/python bench/decode.py [--model smollm2|random] [--batch 1 8] [--new-tokens 128] [--repeats 3]

Each measurement is ``model.generate(ids, attention_mask=mask, max_new_tokens=N, min_new_tokens=N,
do_sample=False)`` (eos ignored: exactly N new tokens per row), float32, ``torch.set_num_threads(2)``.
tokens/s = batch * N / wall time of the call (prompt included). Variants are interleaved and
repeated; medians are printed. Rows:

* reference: ``transformers`` ``generate`` (its defaults: dynamic cache, SDPA);
* microformers eager: ``generate`` with its defaults (dynamic cache);
* microformers compiled: ``model.compile_decode_step()`` and ``past_key_values=StaticCache(...)``;
  the first call's compile time is reported on its own line;
* microformers forward loop: a minimal greedy loop over ``model(...)`` (no ``generate``), which
  tells how much time the generation loop itself adds.

The new tokens of every microformers variant are compared with the reference's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common


def reference_generate(model: Any, ids: Any, mask: Any, new_tokens: int) -> Any:
    return model.generate(
        ids,
        attention_mask=mask,
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        pad_token_id=2,
    )


def our_generate(model: Any, ids: Any, mask: Any, new_tokens: int, static: bool = False) -> Any:
    from microformers_sdk.cache import StaticCache

    extra = {"past_key_values": StaticCache(max_cache_len=ids.shape[1] + new_tokens)} if static else {}
    return model.generate(
        ids,
        attention_mask=mask,
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        pad_token_id=2,
        **extra,
    )


def forward_loop(model: Any, ids: Any, mask: Any, new_tokens: int) -> Any:
    """The least a greedy loop can do: prefill, then one ``model(...)`` call and an argmax per token."""
    import torch

    with torch.inference_mode():
        batch, length = ids.shape
        full_mask = torch.ones(batch, length + new_tokens, dtype=mask.dtype)
        full_mask[:, :length] = mask
        padded = not bool(mask.all())
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        out = model(
            ids, attention_mask=mask if padded else None, position_ids=positions, use_cache=True, logits_to_keep=1
        )
        cache = out.past_key_values
        tokens = [out.logits[:, -1].argmax(-1, keepdim=True)]
        position = positions[:, -1:] + 1
        for step in range(new_tokens - 1):
            out = model(
                tokens[-1],
                attention_mask=full_mask[:, : length + step + 1] if padded else None,
                position_ids=position,
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,
            )
            position = position + 1
            tokens.append(out.logits[:, -1].argmax(-1, keepdim=True))
        return torch.cat([ids, *tokens], dim=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=["smollm2", "random"], default="smollm2")
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-compile", action="store_true", help="skip the compiled variant")
    parser.add_argument("--compile-mode", default=None, help="torch.compile mode, e.g. max-autotune-no-cudagraphs")
    args = parser.parse_args()

    import torch

    common.set_threads()
    folder = common.model_folder(args.model)
    reference = common.load_reference(folder)
    ours = common.load_ours(folder)
    if not args.no_compile:
        ours.compile_decode_step(**({"mode": args.compile_mode} if args.compile_mode else {}))
    n = args.new_tokens
    variants: dict[str, Any] = {
        "reference": lambda ids, mask: reference_generate(reference, ids, mask, n),
        "eager": lambda ids, mask: our_generate(ours, ids, mask, n),
        "forward loop": lambda ids, mask: forward_loop(ours, ids, mask, n),
    }
    if not args.no_compile:
        variants["compiled"] = lambda ids, mask: our_generate(ours, ids, mask, n, static=True)

    payload: dict[str, Any] = {"model": args.model, "new_tokens": n, "threads": torch.get_num_threads()}
    rows: list[tuple[str, str, str, str]] = []
    notes: list[str] = [f"load average at start: {common.load_average()}"]
    for batch in args.batch:
        ids, mask = common.prompts(folder, batch)
        outputs: dict[str, Any] = {}
        first: dict[str, float] = {}
        for name, run in variants.items():  # warm-up (and, for the compiled variant, compilation)
            first[name], outputs[name] = common.timed(lambda run=run, ids=ids, mask=mask: run(ids, mask))
        times: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(args.repeats):
            for name, run in variants.items():
                seconds, outputs[name] = common.timed(lambda run=run, ids=ids, mask=mask: run(ids, mask))
                times[name].append(seconds)
        speed = {name: batch * n / common.median(t) for name, t in times.items()}
        reference_new = outputs["reference"][:, ids.shape[1] :]
        for name in variants:
            if name == "reference":
                continue
            same = torch.equal(outputs[name][:, ids.shape[1] :], reference_new)
            rows.append(
                (
                    f"decode tokens/s, batch {batch} ({name})",
                    f"{speed[name]:.1f}",
                    f"{speed['reference']:.1f}",
                    f"{speed[name] / speed['reference']:.2f}x" + ("" if same else " TOKENS DIFFER"),
                )
            )
        if "compiled" in variants:
            compile_seconds = first["compiled"] - common.median(times["compiled"])
            notes.append(
                f"batch {batch}: first compiled call {first['compiled']:.1f}s (compile ~{compile_seconds:.1f}s)"
            )
        payload[f"batch{batch}"] = {
            "tokens_per_s": speed,
            "times": times,
            "first_call_s": first,
            "tokens_identical": {k: bool(torch.equal(v[:, ids.shape[1] :], reference_new)) for k, v in outputs.items()},
        }
    notes.append(f"load average at end: {common.load_average()}; medians of {args.repeats} interleaved runs")
    common.print_table(f"greedy decode, {args.model}, float32, {n} new tokens", rows, "\n".join(notes))
    common.write_json("decode", payload)


if __name__ == "__main__":
    main()
