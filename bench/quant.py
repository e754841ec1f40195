"""Quantized decoding of SmolLM2-135M: speed, memory and accuracy, side by side in one run.

    .venv/bin/python bench/quant.py [--new-tokens 64] [--rounds 2] [--compiled] [--only gguf int4 ...]
    .venv/bin/python bench/quant.py --accuracy [--tokens 512]

Speed: every variant runs in its own subprocess (so peak RSS after load is its own), the list is
run ``--rounds`` times in turn and medians are printed. Each measurement is greedy batch-1
``generate(ids, max_new_tokens=N, min_new_tokens=N, do_sample=False)`` on a 24-token corpus
prompt, ``torch.set_num_threads(2)``; tok/s = N / wall time (prompt included). Variants:

* ``fp32``: microformers, the float32 folder (``bench/_common.model_folder``; the reference
  de-quantised the GGUF once); ``int8``/``int4``: that folder loaded with ``Int8Config()`` /
  ``Int4Config(group_size=32)``; ``gguf``: the Q4_1 file with ``GgufQuantConfig()`` (blocks kept);
  ``*-a8``: the same with ``activations="int8"`` (activations quantized per 32 values, llama.cpp's way);
* ``reference``: ``transformers`` on the float32 folder;
* ``llama.cpp``: ``llama_cpp.Llama`` on the same Q4_1 file, 2 threads, when llama-cpp-python is importable;
* ``--compiled`` adds ``<variant>+compiled`` rows (``compile_decode_step()`` + a static cache; the
  first call's compile time is printed separately).

Accuracy (``--accuracy``): for the first ``--tokens`` tokens of each corpus file, next-token top-1
agreement with the float32 model over every position and the perplexity of each variant;
``gguf`` is compared with the de-quantised float32 model (the same weights), including the max
abs difference of the last-position logits. Quantized layers run their row kernels for every
position here (``KERNEL_MAX_ROWS`` raised), so ``-a8`` variants are measured as they decode.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common

VARIANTS = ["fp32", "int8", "int4", "gguf", "gguf-a8", "int4-a8", "reference", "llama.cpp"]


def quant_config(variant: str) -> dict[str, Any] | None:
    base = variant.removesuffix("-a8")
    config = {"int8": {"quant_method": "int8"}, "int4": {"quant_method": "int4", "group_size": 32},
              "gguf": {"quant_method": "gguf"}}.get(base)  # fmt: skip
    if config is not None and variant.endswith("-a8"):
        config = {**config, "activations": "int8"}
    return config


def load(variant: str) -> Any:
    import torch

    import microformers

    if variant == "reference":
        return common.load_reference(common.model_folder("smollm2"))
    config = quant_config(variant)
    if variant.startswith("gguf"):
        return microformers.AutoModelForCausalLM.from_pretrained(
            common.gguf_folder(), gguf_file=common.GGUF_NAME, quantization_config=config
        )
    folder = common.model_folder("smollm2")
    kwargs = {"quantization_config": config} if config else {}
    return microformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, **kwargs)


def run_one(variant: str, new_tokens: int, repeats: int, compiled: bool) -> dict[str, Any]:
    """In a subprocess: load one variant, time its decoding, report JSON."""
    common.set_threads()
    import torch

    ids, _ = common.prompts(common.model_folder("smollm2"), 1)
    baseline = common.peak_rss_mb()
    if variant == "llama.cpp":
        import llama_cpp

        seconds, llm = common.timed(
            lambda: llama_cpp.Llama(
                str(common.gguf_folder() / common.GGUF_NAME), n_threads=common.THREADS, n_ctx=512, verbose=False
            )
        )
        rss = common.peak_rss_mb()
        prompt = ids[0].tolist()

        def decode() -> Any:
            llm.reset()
            out = []
            for token in llm.generate(prompt, top_k=1, temp=0.0):
                out.append(token)
                if len(out) == new_tokens:
                    break
            return out
    else:
        base = variant.removesuffix("+compiled")
        seconds, model = common.timed(lambda: load(base))
        rss = common.peak_rss_mb()
        settings = {"max_new_tokens": new_tokens, "min_new_tokens": new_tokens, "do_sample": False}
        if variant.endswith("+compiled"):
            model.compile_decode_step()
            settings["cache_implementation"] = "static"

        def decode() -> Any:
            with torch.no_grad():
                return model.generate(ids, **settings)

    rss_now = common.current_rss_mb()
    first, _ = common.timed(decode)
    times = [common.timed(decode)[0] for _ in range(repeats)]
    return {
        "rss_now_after_load_mb": rss_now,
        "peak_rss_after_decode_mb": common.peak_rss_mb(),
        "variant": variant,
        "load_s": seconds,
        "rss_after_load_mb": rss,
        "rss_before_load_mb": baseline,
        "first_call_s": first,
        "tok_s": new_tokens / common.median(times),
        "load_average": common.load_average(),
    }


def speed(args: argparse.Namespace) -> None:
    variants = list(args.only or VARIANTS)
    if "llama.cpp" in variants:
        try:
            import llama_cpp  # noqa: F401
        except ImportError:
            variants.remove("llama.cpp")
            print("llama.cpp: llama-cpp-python is not importable here; that row is skipped")
    if args.compiled:
        variants += [f"{v}+compiled" for v in ("fp32", "gguf", "int4") if v in variants]
    common.model_folder("smollm2")  # build the shared float32 folder once, outside the timings
    results: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    print(f"load average at start: {common.load_average()}")
    for round_index in range(args.rounds):
        for variant in variants:
            command = [sys.executable, __file__, "--one", variant, "--new-tokens", str(args.new_tokens)]
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
            if done.returncode or not lines:
                print(f"{variant}: failed\n{done.stderr[-2000:]}")
                continue
            result = json.loads(lines[-1])
            results[variant].append(result)
            print(f"round {round_index + 1} {variant}: {result['tok_s']:.1f} tok/s (load avg {result['load_average']})")
    fp32 = common.median([r["tok_s"] for r in results.get("fp32", [])])
    ref = common.median([r["tok_s"] for r in results.get("reference", [])])
    fp32_rss = common.median([r["rss_after_load_mb"] for r in results.get("fp32", [])])
    fp32_end = common.median([r["peak_rss_after_decode_mb"] for r in results.get("fp32", [])])
    print(f"\n== greedy batch-1 decode, {args.new_tokens} new tokens, {common.THREADS} threads (medians)")
    print(
        f"{'variant':<18}{'tok/s':>8}{'x fp32':>8}{'x ref':>8}{'load s':>8}{'peak MB':>8}{'x fp32':>8}"
        f"{'now MB':>8}{'end MB':>8}{'x fp32':>8}{'1st call s':>11}"
    )
    for variant, runs in results.items():
        if not runs:
            continue
        tok = common.median([r["tok_s"] for r in runs])
        rss = common.median([r["rss_after_load_mb"] for r in runs])
        end = common.median([r["peak_rss_after_decode_mb"] for r in runs])
        print(
            f"{variant:<18}{tok:>8.1f}{tok / fp32:>8.2f}{tok / ref:>8.2f}{common.median([r['load_s'] for r in runs]):>8.2f}"
            f"{rss:>8.0f}{rss / fp32_rss:>8.2f}{common.median([r['rss_now_after_load_mb'] for r in runs]):>8.0f}"
            f"{end:>8.0f}{end / fp32_end:>8.2f}{common.median([r['first_call_s'] for r in runs]):>11.1f}"
        )
    print("peak MB: ru_maxrss right after load (memory-mapped pages read so far count); now MB: resident then;")
    print("end MB: ru_maxrss after decoding (a float32 load faults its mapped weights in on the first forward)")
    print(
        f"RSS before loading (python + torch + imports): {common.median([r['rss_before_load_mb'] for runs in results.values() for r in runs]):.0f} MB"
    )
    print(f"load average at end: {common.load_average()}")
    common.write_json("quant", {"new_tokens": args.new_tokens, "results": results})


def accuracy(args: argparse.Namespace) -> None:
    common.set_threads()
    import torch

    import microformers
    from microformers_quant import modules

    modules.KERNEL_MAX_ROWS = 1 << 30  # every position through the row kernels, as in decoding
    folder = common.model_folder("smollm2")
    corpus = Path(__file__).resolve().parent.parent / "tests" / "corpus"
    tokenizer = microformers.AutoTokenizer.from_pretrained(folder)
    texts = [p.read_text(encoding="utf-8") for p in sorted(corpus.glob("*.md")) if p.name != "README.md"]
    batches = [tokenizer(t, return_tensors="pt").input_ids[:, : args.tokens] for t in texts]

    def run(model: Any) -> list[torch.Tensor]:
        with torch.no_grad():
            return [model(ids).logits[0] for ids in batches]

    def perplexity(logits: list[torch.Tensor]) -> float:
        nll = [
            torch.nn.functional.cross_entropy(lg[:-1], ids[0, 1:], reduction="sum") for lg, ids in zip(logits, batches)
        ]
        return float(torch.exp(sum(nll) / sum(ids.shape[1] - 1 for ids in batches)))

    fp32 = run(microformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32))
    print(f"positions: {sum(ids.shape[1] for ids in batches)} ({args.tokens} per corpus file)")
    print(f"{'variant':<10}{'top-1 agree':>12}{'ppl':>9}{'ppl change':>11}{'max |dlogit| last':>19}")
    print(f"{'fp32':<10}{1.0:>12.4f}{perplexity(fp32):>9.3f}{0.0:>+11.2%}")
    for variant in ("int8", "int8-a8", "int4", "int4-a8", "gguf", "gguf-a8"):
        logits = run(load(variant))
        agree = sum(int((a.argmax(-1) == b.argmax(-1)).sum()) for a, b in zip(logits, fp32))
        total = sum(a.shape[0] for a in logits)
        drift = max(float((a[-1] - b[-1]).abs().max()) for a, b in zip(logits, fp32))
        ppl = perplexity(logits)
        print(f"{variant:<10}{agree / total:>12.4f}{ppl:>9.3f}{ppl / perplexity(fp32) - 1:>+11.2%}{drift:>19.2e}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--compiled", action="store_true")
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--accuracy", action="store_true")
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one, args.new_tokens, args.repeats, False)))
    elif args.accuracy:
        accuracy(args)
    else:
        speed(args)


if __name__ == "__main__":
    main()
