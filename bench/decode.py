"""Greedy decode speed: microformers vs the reference, same weights, same prompts, in one process.

    .venv/bin/python bench/decode.py [--model smollm2|random] [--batch 1 8] [--new-tokens 128] [--repeats 3]
                                     [--prefill 512] [--cpu-time] [--no-compile]

Each measurement is ``model.generate(ids, attention_mask=mask, max_new_tokens=N, min_new_tokens=N,
do_sample=False)`` (eos ignored: exactly N new tokens per row), float32 (``--dtype``), ``torch.set_num_threads(2)``.
tokens/s = batch * N / wall time of the call (prompt included). Variants are interleaved and
repeated; medians are printed. Rows:

* reference: ``transformers`` ``generate`` (its defaults: dynamic cache, SDPA);
* microformers default: ``generate`` with its defaults; for a float32 model on the CPU that is the SDK's
  native float32 decoder step (``FloatDecoderStep``: every layer, the final norm and the head in one C++
  call per token) into a static cache (when the compiled variant is on, its compiled step is installed
  and the default decodes as the eager row does);
* microformers eager: ``generate(..., cache_implementation="dynamic")``, the layer-by-layer path
  (``--no-eager`` skips it);
* microformers compiled: ``model.compile_decode_step()`` and ``past_key_values=StaticCache(...)``;
  the first call's compile time is reported on its own line;
* microformers forward loop: a minimal greedy loop over ``model(...)`` (no ``generate``), which
  tells how much time the generation loop itself adds;
* reference compiled (on CUDA with the compiled rows, or ``--reference-compiled``):
  ``generate(..., cache_implementation="static")``, which on CUDA compiles the reference's forward
  with its default ``compile_config`` (CUDA graphs); the compiled row is set against it.

The new tokens of every microformers variant are compared with the reference's.

``--prefill N`` first adds a prefill row in the same process: one forward pass over an N-token
prompt at batch 1, ``model(ids, use_cache=True, logits_to_keep=1)`` under ``torch.inference_mode()``
(what generate runs for the prompt), interleaved the same way, last-position logits compared.
``--cpu-time`` times with the CPU time of the process instead of the wall clock: on a machine whose
cores other work shares, wall time mostly measures the scheduler; with
``MICROFORMERS_BENCH_THREADS=1`` the CPU time is the work done.

On the CPU at batch 1 the script also reports the share of the machine's memory bandwidth each batch-1
row uses: the weights one token streams (every parameter once, the embedding table only where it is
the tied head) times tokens/s, over the bandwidth of a large copy measured in the same process with
the same threads and clock (``dst.copy_(src)`` of 512 MiB, bytes read + written, best of 5; a
read-only pass, ``src.sum()``, is printed next to it). ``--no-bandwidth`` skips it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common


def reference_generate(model: Any, ids: Any, mask: Any, new_tokens: int, static: bool = False) -> Any:
    # On CUDA the reference compiles its forward by itself for a static cache (its default compile_config).
    extra = {"cache_implementation": "static"} if static else {}
    return model.generate(
        ids,
        attention_mask=mask,
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        pad_token_id=2,
        **extra,
    )


def our_generate(model: Any, ids: Any, mask: Any, new_tokens: int, static: bool = False, dynamic: bool = False) -> Any:
    from microformers_sdk.cache import StaticCache

    extra: dict[str, Any] = {"past_key_values": StaticCache(max_cache_len=ids.shape[1] + new_tokens)} if static else {}
    if dynamic:
        extra["cache_implementation"] = "dynamic"
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
        full_mask = torch.ones(batch, length + new_tokens, dtype=mask.dtype, device=mask.device)
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


def prefill_row(
    reference: Any, ours: Any, folder: Path, length: int, repeats: int, clock: Any
) -> tuple[tuple[str, str, str, str], dict[str, Any]]:
    """Prefill of a ``length``-token prompt at batch 1, both implementations interleaved."""
    import torch

    ids, _ = common.prompts(folder, 1, length=length)
    ids = ids.to(next(ours.parameters()).device)
    models = {"reference": reference, "microformers": ours}
    times: dict[str, list[float]] = {name: [] for name in models}
    logits: dict[str, Any] = {}
    with torch.inference_mode():
        for name, model in models.items():  # warm-up
            logits[name] = model(ids, use_cache=True, logits_to_keep=1).logits[:, -1]
        for _ in range(repeats):
            for name, model in models.items():
                seconds, _out = common.timed(lambda model=model: model(ids, use_cache=True, logits_to_keep=1), clock)
                times[name].append(seconds)
    speed = {name: length / common.median(t) for name, t in times.items()}
    difference = (logits["microformers"] - logits["reference"]).abs().max().item()
    same_top = bool(torch.equal(logits["microformers"].argmax(-1), logits["reference"].argmax(-1)))
    row = (
        f"prefill tokens/s, {length} tokens, batch 1",
        f"{speed['microformers']:.0f}",
        f"{speed['reference']:.0f}",
        f"{speed['microformers'] / speed['reference']:.2f}x" + ("" if same_top else " TOP-1 DIFFERS"),
    )
    return row, {"tokens_per_s": speed, "times": times, "max_logit_difference": difference}


def memory_bandwidth(clock: Any, size_mib: int = 512, repeats: int = 5) -> dict[str, float]:
    """GB/s of a large copy (bytes read + written) and of a read-only sum, best of ``repeats``, with ``clock``."""
    import torch

    source = torch.ones(size_mib * 2**20 // 4)
    target = torch.empty_like(source)
    target.copy_(source)  # fault both buffers in before timing
    copy = min(common.timed(lambda: target.copy_(source), clock)[0] for _ in range(repeats))
    read = min(common.timed(source.sum, clock)[0] for _ in range(repeats))
    return {"copy_gb_s": 2 * source.nbytes / copy / 1e9, "read_gb_s": source.nbytes / read / 1e9}


def streamed_bytes(model: Any) -> int:
    """Bytes of weights one decoding step reads: every parameter once; an untied embedding table only a row."""
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    embedding, head = model.get_input_embeddings().weight, model.get_output_embeddings()
    if head is None or head.weight.data_ptr() != embedding.data_ptr():
        total -= embedding.numel() * embedding.element_size()
    return total


def bandwidth_rows(
    speed: dict[str, float], weights: int, bandwidth: dict[str, float]
) -> list[tuple[str, str, str, str]]:
    """Per batch-1 variant: the weight bytes streamed per second as a share of the measured copy bandwidth."""
    copy = bandwidth["copy_gb_s"]
    rows = []
    for name, tokens_per_s in speed.items():
        if name == "reference":
            continue
        ours, theirs = weights * tokens_per_s / 1e9, weights * speed["reference"] / 1e9
        rows.append(
            (
                f"batch 1 ({name}): weights streamed, GB/s and share of copy bandwidth",
                f"{ours:.1f} ({ours / copy:.0%})",
                f"{theirs:.1f} ({theirs / copy:.0%})",
                f"{ours / theirs:.2f}x",
            )
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=["smollm2", "random"], default="smollm2")
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-compile", action="store_true", help="skip the compiled variant")
    parser.add_argument("--compile-mode", default=None, help="torch.compile mode, e.g. max-autotune-no-cudagraphs")
    parser.add_argument("--regional", action="store_true", help="compile_decode_step(regional=True)")
    parser.add_argument("--prefill", type=int, default=0, metavar="N", help="also time prefill of an N-token prompt")
    parser.add_argument("--cpu-time", action="store_true", help="time with process CPU time, not wall time")
    parser.add_argument("--device", default="cpu", help="where both models run: cpu, cuda, cuda:1 (default cpu)")
    parser.add_argument(
        "--no-loop", action="store_true", help="skip the forward-loop variant (generate and reference only)"
    )
    parser.add_argument("--no-eager", action="store_true", help="skip the eager (dynamic cache) generate variant")
    parser.add_argument("--no-bandwidth", action="store_true", help="skip the memory-bandwidth rows of batch 1")
    parser.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32")
    parser.add_argument(
        "--reference-compiled",
        action="store_true",
        help="add the reference's static cache + its own torch.compile (the default on CUDA with the compiled rows)",
    )
    parser.add_argument(
        "--cudagraphs",
        action="store_true",
        help="add a second compiled variant of ours with mode='reduce-overhead' (CUDA graphs; CUDA only)",
    )
    args = parser.parse_args()

    import time

    import torch

    clock = time.process_time if args.cpu_time else time.perf_counter
    common.set_threads()
    folder = common.model_folder(args.model)
    reference = common.load_reference(folder, args.dtype)
    ours = common.load_ours(folder, args.dtype)
    device = torch.device(args.device)
    reference.to(device)
    ours.to(device)
    if not args.no_compile:
        ours.compile_decode_step(regional=args.regional, **({"mode": args.compile_mode} if args.compile_mode else {}))
    n = args.new_tokens
    variants: dict[str, Any] = {
        "reference": lambda ids, mask: reference_generate(reference, ids, mask, n),
        "default": lambda ids, mask: our_generate(ours, ids, mask, n),
    }
    if not args.no_eager:
        variants["eager"] = lambda ids, mask: our_generate(ours, ids, mask, n, dynamic=True)
    if not args.no_loop:
        variants["forward loop"] = lambda ids, mask: forward_loop(ours, ids, mask, n)
    if not args.no_compile:
        variants["compiled"] = lambda ids, mask: our_generate(ours, ids, mask, n, static=True)
    if args.cudagraphs:
        graphed = common.load_ours(folder, args.dtype).to(device)
        graphed.compile_decode_step(mode="reduce-overhead")
        variants["compiled cudagraphs"] = lambda ids, mask: our_generate(graphed, ids, mask, n, static=True)
    if args.reference_compiled or (not args.no_compile and device.type == "cuda"):
        variants["reference compiled"] = lambda ids, mask: reference_generate(reference, ids, mask, n, static=True)

    if device.type == "cuda":  # the GPU runs asynchronously: a timed call ends when its work does

        def synchronised(run: Any) -> Any:
            def call(ids: Any, mask: Any) -> Any:
                out = run(ids, mask)
                torch.cuda.synchronize(device)
                return out

            return call

        variants = {name: synchronised(run) for name, run in variants.items()}
    payload: dict[str, Any] = {
        "model": args.model,
        "new_tokens": n,
        "threads": torch.get_num_threads(),
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "dtype": args.dtype,
    }
    rows: list[tuple[str, str, str, str]] = []
    notes: list[str] = [f"load average at start: {common.load_average()}"]
    if args.prefill:
        row, payload["prefill"] = prefill_row(reference, ours, folder, args.prefill, args.repeats, clock)
        rows.append(row)
    for batch in args.batch:
        ids, mask = common.prompts(folder, batch)
        ids, mask = ids.to(device), mask.to(device)
        outputs: dict[str, Any] = {}
        first: dict[str, float] = {}
        for name, run in list(variants.items()):  # warm-up (and, for the compiled variants, compilation)
            try:
                first[name], outputs[name] = common.timed(lambda run=run, ids=ids, mask=mask: run(ids, mask), clock)
            except Exception as error:  # a variant that cannot run here is reported, not fatal to the others
                if name == "reference":
                    raise
                notes.append(f"batch {batch}: {name} failed and was dropped: {type(error).__name__}: {error}"[:400])
                del variants[name]
        times: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(args.repeats):
            for name, run in variants.items():
                seconds, outputs[name] = common.timed(lambda run=run, ids=ids, mask=mask: run(ids, mask), clock)
                times[name].append(seconds)
        speed = {name: batch * n / common.median(t) for name, t in times.items()}
        reference_new = outputs["reference"][:, ids.shape[1] :]
        for name in variants:
            if name.startswith("reference"):
                continue
            # the compiled row is set against the reference's compiled path where it runs
            compiled = name.startswith("compiled")
            anchor = "reference compiled" if compiled and "reference compiled" in variants else "reference"
            same = torch.equal(outputs[name][:, ids.shape[1] :], outputs[anchor][:, ids.shape[1] :])
            rows.append(
                (
                    f"decode tokens/s, batch {batch} ({name} vs {anchor})",
                    f"{speed[name]:.1f}",
                    f"{speed[anchor]:.1f}",
                    f"{speed[name] / speed[anchor]:.2f}x" + ("" if same else " TOKENS DIFFER"),
                )
            )
        for name in ("compiled", "compiled cudagraphs", "reference compiled"):
            if name in variants:
                compile_seconds = first[name] - common.median(times[name])
                notes.append(f"batch {batch}: first {name} call {first[name]:.1f}s (compile ~{compile_seconds:.1f}s)")
        if batch == 1 and device.type == "cpu" and not args.no_bandwidth:
            bandwidth = memory_bandwidth(clock)
            weights = streamed_bytes(ours)
            rows.extend(bandwidth_rows(speed, weights, bandwidth))
            notes.append(
                f"memory bandwidth ({torch.get_num_threads()} threads, same clock): copy {bandwidth['copy_gb_s']:.1f} GB/s "
                f"(read + write), read-only sum {bandwidth['read_gb_s']:.1f} GB/s; weights per token {weights / 2**20:.0f} "
                "MiB; tokens/s include the prompt's prefill"
            )
            payload["bandwidth"] = {**bandwidth, "weight_bytes_per_token": weights}
        payload[f"batch{batch}"] = {
            "tokens_per_s": speed,
            "times": times,
            "first_call_s": first,
            "tokens_identical": {k: bool(torch.equal(v[:, ids.shape[1] :], reference_new)) for k, v in outputs.items()},
        }
    timing = "process CPU time" if args.cpu_time else "wall time"
    notes.append(
        f"load average at end: {common.load_average()}; medians of {args.repeats} interleaved runs "
        f"({timing}, {torch.get_num_threads()} threads)"
    )
    common.print_table(f"greedy decode, {args.model}, {args.dtype}, {device}, {n} new tokens", rows, "\n".join(notes))
    common.write_json("decode", payload)


if __name__ == "__main__":
    main()
