"""LoRA adapters: load time and the forward cost of an unmerged adapter, microformers vs ``peft``.

    .venv/bin/python bench/lora.py [--model random|smollm2] [--rank 16] [--repeats 3]

One process, float32, ``torch.set_num_threads(2)``, SmolLM2-135M shape (30 layers, hidden 576). The
adapter is made once by ``peft`` (``LoraConfig(r=16, lora_alpha=32, target_modules="all-linear")``,
210 adapted linear layers, random non-zero weights) and loaded by both sides. Rows:

* ``load_adapter``: adding the saved adapter to an already loaded base model (ours:
  ``model.load_adapter(folder)``; reference: ``peft.PeftModel.from_pretrained(base, folder)``);
* ``from_pretrained(adapter folder)``: base model and adapter in one call (``AutoModelForCausalLM``
  on the adapter folder; the reference does the same through its peft integration);
* ``prefill``: one forward over ``(1, 128)`` tokens, with the adapter unmerged and after
  ``merge_and_unload()``;
* ``decode``: greedy ``generate`` of 32 new tokens from a 16-token prompt, unmerged and merged.

``--cpu-time`` times with the process's CPU time instead of wall time: on a machine busy with other
work (more runnable threads than cores) wall times mostly measure waiting; run it with
``MICROFORMERS_BENCH_THREADS=1`` so that idle-spinning worker threads do not count.

Variants are interleaved and repeated; medians are printed. The unmerged/merged overhead of each
implementation is printed beside the microformers/reference ratios.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common


def make_adapter(folder: Path, rank: int) -> Path:
    """A peft-made all-linear LoRA adapter for the base in ``folder`` (made once, reused)."""
    import peft
    import torch

    adapter = common.BENCH_DIR / f"{folder.name}-lora-r{rank}"
    if (adapter / "adapter_model.safetensors").is_file():
        return adapter
    base = common.load_reference(folder)
    model = peft.get_peft_model(
        base, peft.LoraConfig(r=rank, lora_alpha=2 * rank, target_modules="all-linear", init_lora_weights=False)
    )
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.02)
    model.save_pretrained(str(adapter))
    return adapter


def _cpu_timed(fn: Any) -> tuple[float, Any]:
    """Like ``common.timed`` but in CPU seconds of this process (all its threads)."""
    start = time.process_time()
    result = fn()
    return time.process_time() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=["random", "smollm2"], default="random")
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--cpu-time",
        action="store_true",
        help="time with process CPU time instead of wall time (for a busy machine; use 1 thread)",
    )
    args = parser.parse_args()
    if args.cpu_time:
        common.timed = _cpu_timed
    common.set_threads()
    import peft
    import torch
    import transformers

    import microformers

    folder = common.model_folder(args.model)
    adapter = make_adapter(folder, args.rank)
    ours = common.load_ours(folder)
    reference = common.load_reference(folder)
    load = {"ours": [], "reference": []}
    wrapped: Any = None
    for _ in range(args.repeats):
        if wrapped is not None:
            reference = wrapped.unload()
            ours.delete_adapter("default")
        seconds, _ = common.timed(lambda: ours.load_adapter(adapter))
        load["ours"].append(seconds)
        seconds, wrapped = common.timed(
            lambda base=reference: peft.PeftModel.from_pretrained(base, str(adapter)).eval()
        )
        load["reference"].append(seconds)
    full = {
        "ours": common.timed(lambda: microformers.AutoModelForCausalLM.from_pretrained(adapter, dtype=torch.float32))[
            0
        ],
        "reference": common.timed(
            lambda: transformers.AutoModelForCausalLM.from_pretrained(str(adapter), dtype=torch.float32)
        )[0],
    }

    vocab = ours.config.vocab_size
    prefill_ids = torch.randint(3, vocab, (1, 128), generator=torch.Generator().manual_seed(1))
    prompt = prefill_ids[:, :16]
    settings = {"max_new_tokens": 32, "min_new_tokens": 32, "do_sample": False, "pad_token_id": 2}
    models = {"ours": ours.eval(), "reference": wrapped}
    times: dict[str, list[float]] = {}
    tokens: dict[str, Any] = {}

    def measure(state: str) -> None:
        for _ in range(args.repeats):
            for side, model in models.items():
                with torch.inference_mode():
                    seconds, _ = common.timed(lambda model=model: model(input_ids=prefill_ids))
                    times.setdefault(f"prefill {state} {side}", []).append(seconds)
                    seconds, out = common.timed(
                        lambda model=model: model.generate(
                            input_ids=prompt, attention_mask=torch.ones_like(prompt), **settings
                        )
                    )
                    times.setdefault(f"decode {state} {side}", []).append(seconds)
                    tokens[f"{state} {side}"] = out[0, 16:].tolist()

    with torch.inference_mode():
        models["ours"](input_ids=prompt)  # warm-up
        models["reference"](input_ids=prompt)
    measure("unmerged")
    models = {"ours": ours.merge_and_unload(), "reference": wrapped.merge_and_unload()}
    measure("merged")

    med = {key: common.median(values) for key, values in times.items()}
    rows = [
        ("load_adapter (s)", f"{common.median(load['ours']):.3f}", f"{common.median(load['reference']):.3f}",
         f"{common.median(load['reference']) / common.median(load['ours']):.1f}x faster"),
        ("from_pretrained(adapter folder) (s)", f"{full['ours']:.2f}", f"{full['reference']:.2f}",
         f"{full['reference'] / full['ours']:.1f}x faster"),
    ]  # fmt: skip
    for kind, unit in (("prefill", "ms"), ("decode", "tok/s")):
        for state in ("unmerged", "merged"):
            a, b = med[f"{kind} {state} ours"], med[f"{kind} {state} reference"]
            if unit == "ms":
                rows.append((f"{kind} 128 tok, {state} (ms)", f"{a * 1e3:.1f}", f"{b * 1e3:.1f}", f"{b / a:.2f}x"))
            else:
                rows.append((f"{kind} 32 tok, {state} (tok/s)", f"{32 / a:.1f}", f"{32 / b:.1f}", f"{b / a:.2f}x"))
        ours_cost = med[f"{kind} unmerged ours"] / med[f"{kind} merged ours"]
        ref_cost = med[f"{kind} unmerged reference"] / med[f"{kind} merged reference"]
        rows.append((f"{kind}: unmerged / merged time", f"{ours_cost:.2f}", f"{ref_cost:.2f}", ""))
    same = all(tokens[f"{s} ours"] == tokens[f"{s} reference"] for s in ("unmerged", "merged"))
    common.print_table(
        f"LoRA r={args.rank} all-linear on {args.model} (SmolLM2-135M shape), float32, {common.THREADS} threads",
        rows,
        f"ratio = reference time / microformers time (>1: microformers faster). greedy tokens identical: {same}. "
        f"{'CPU' if args.cpu_time else 'wall'} time. load average: {common.load_average()}",
    )
    common.write_json("lora", {"load": load, "from_pretrained": full, "times": times, "same_tokens": same})


if __name__ == "__main__":
    main()
