"""Quantized SmolLM2-135M: speed, memory and accuracy, side by side in one run.

    .venv/bin/python bench/quant.py [--scenario decode|prefill|batch8] [--new-tokens 64] [--rounds 3]
                                    [--repeats 2] [--compiled] [--cpu-time] [--only gguf int4 ...]
    MICROFORMERS_BENCH_THREADS=1 .venv/bin/python bench/quant.py --cpu-time \
        --only gguf gguf-dynamic fp32 reference llama.cpp     # what a user gets by default, against the anchors
    .venv/bin/python bench/quant.py --layers [--rows 1 8 16 512]     # per-layer kernel timings
    .venv/bin/python bench/quant.py --accuracy [--tokens 512]

Speed: every variant runs in its own subprocess (so peak RSS after load is its own), the list is
run ``--rounds`` times in turn and medians are printed, with ``MICROFORMERS_BENCH_THREADS``
threads (default 2) for torch and llama.cpp alike. Scenarios: ``decode``, greedy batch-1
``generate(ids, max_new_tokens=N, min_new_tokens=N, do_sample=False)`` on a 24-token corpus prompt
(tok/s = N / wall time, prompt included); ``prefill``, a 512-token prompt and one new token (tok/s =
512 / time); ``batch8``, greedy decoding of 8 left-padded prompts of 24-59 tokens (tok/s = 8 N /
time). Besides wall time each row reports tokens per CPU-second of its process, which a machine
loaded by other processes distorts less; ``--cpu-time`` makes that the measure the ratios are
taken on (use it, with ``MICROFORMERS_BENCH_THREADS=1``, on a busy machine). Generated tokens are
compared with the reference's (the float32 model; the first differing new token is shown).
Every run prints the CPU model and the thread count. Variants:

* ``fp32``: microformers, the float32 folder (``bench/_common.model_folder``; the reference
  de-quantised the GGUF once); ``fp32-packed``: the same with ``pack_linear_weights`` (opt-in:
  oneDNN's packed layout, for batched decoding); ``int8``/``int4``: that folder loaded with ``Int8Config()`` /
  ``Int4Config(group_size=32)``; ``gguf``: the Q4_1 file with ``GgufQuantConfig()`` (blocks kept);
  ``*-a8`` / ``*-a16`` / ``*-f32``: the same with ``activations="int8"`` / ``"int16"`` / ``"float32"``
  (activations quantized per 32 values; int8 is llama.cpp's way; ``gguf`` alone is int16, the default);
* ``gptq`` / ``awq``: GPTQ (v1 packing) and AutoAWQ GEMM 4-bit folders, group 32, written from the same float32
  weights by round-to-nearest with the tests' packing helpers (``plugins/quant/tests/gptq_packing.py``; no
  calibration, so their tokens are not a GPTQ run's) and loaded with no arguments: kept packed in the int4 format,
  so their layers decode like ``int4``'s, but their embedding/LM head stay float32 as the checkpoint has them
  (``int4`` makes the tied head int8), about 12% slower per token on SmolLM2; ``gptq-g128`` / ``awq-g128``: group 128, which does not divide SmolLM2's
  576 hidden inputs, so q/k/v/o/gate/up load de-quantised to float (a warning says so) and only down_proj is int4.
  Folders are made once under ``MICROFORMERS_BENCH_DIR``, outside the timings;
* ``reference``: ``transformers`` on the float32 folder;
* ``llama.cpp``: ``llama_cpp.Llama`` on the same Q4_1 file, same thread count, when llama-cpp-python
  is importable (a bench-only dependency, not in requirements-test.txt; no batch8 row); otherwise
  the run says it is not installed and goes on without that row;
* ``--compiled`` adds ``<variant>+compiled`` rows (``compile_decode_step()`` + a static cache; the
  first call's compile time is printed separately). For a quantized variant that is the native step
  (every layer, the final norm and the quantized head in one C++ call, nothing compiled); for ``fp32``
  it is torch.compile.

``--layers``: CPU time per call of float32 ``F.linear``, the register-blocked row kernels, the
de-quantised-tile GEMM path and the old torch de-quantise + ``F.linear``, at SmolLM2's MLP shapes, by
input rows: where ``kernels.GEMM_MIN_ROWS`` should sit.

Accuracy (``--accuracy``): for the first ``--tokens`` tokens of each corpus file, next-token top-1
agreement with the float32 model over every position and the perplexity of each variant;
``gguf`` is compared with the de-quantised float32 model (the same weights), including the max
abs difference of the last-position logits. Quantized layers run their row kernels for every
position here (``KERNEL_MAX_ROWS`` and ``GEMM_MIN_ROWS`` raised), so ``-a8``/``-a16`` variants are measured
as they decode.
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

VARIANTS = ["fp32", "fp32-packed", "int8", "int4", "gguf", "gguf-dynamic", "gguf-a16", "gguf-a8", "gguf-f32", "int4-a16", "int4-a8",
            "gptq", "awq", "reference", "llama.cpp"]  # fmt: skip
# GPTQ/AWQ folders written from the float32 folder: variant -> (writer, group)
PACKED_FOLDERS = {"gptq": ("gptq", 32), "awq": ("awq", 32), "gptq-g128": ("gptq", 128), "awq-g128": ("awq", 128)}
ACTIVATIONS = {"-a8": "int8", "-a16": "int16", "-f32": "float32"}


def cpu_model() -> str:
    """The CPU's model name as /proc/cpuinfo gives it, its core count and vector extensions (``unknown`` elsewhere)."""
    try:
        with open("/proc/cpuinfo") as info:
            lines = info.read().splitlines()
    except OSError:
        return "unknown"
    name = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "unknown")
    flags = set(next((line.split(":", 1)[1].split() for line in lines if line.startswith("flags")), []))
    cores = sum(line.startswith("processor") for line in lines)
    isa = "AVX-512" if "avx512f" in flags else "AVX2, no AVX-512" if "avx2" in flags else "no AVX2"
    return f"{name}, {cores} cores, {isa}"


def quant_config(variant: str) -> dict[str, Any] | None:
    variant = variant.removesuffix("-dynamic")
    suffix = next((s for s in ACTIVATIONS if variant.endswith(s)), "")
    base = variant.removesuffix(suffix) if suffix else variant
    config = {"int8": {"quant_method": "int8"}, "int4": {"quant_method": "int4", "group_size": 32},
              "gguf": {"quant_method": "gguf"}}.get(base)  # fmt: skip
    if config is not None and suffix:
        config = {**config, "activations": ACTIVATIONS[suffix]}
    return config


def packed_folder(variant: str) -> Path:
    """The GPTQ/AWQ folder of ``variant`` (made once from the float32 folder by the tests' packing helpers)."""
    kind, group = PACKED_FOLDERS[variant]
    folder = common.BENCH_DIR / f"smollm2-135m-{kind}-g{group}"
    if (folder / "config.json").is_file():
        return folder
    import importlib.util
    import shutil

    helpers = Path(__file__).resolve().parents[1] / "plugins" / "quant" / "tests" / "gptq_packing.py"
    spec = importlib.util.spec_from_file_location("gptq_packing", helpers)
    assert spec is not None and spec.loader is not None
    packing = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(packing)
    staging = folder.with_name(folder.name + ".staging")
    shutil.rmtree(staging, ignore_errors=True)
    source = common.model_folder("smollm2")
    if kind == "gptq":
        packing.write_gptq_folder(source, staging, bits=4, group=group, with_expected=False)
    else:
        packing.write_awq_folder(source, staging, group, with_expected=False)
    staging.rename(folder)  # whole: a folder under its final name is complete
    return folder


def load(variant: str) -> Any:
    import torch

    import microformers

    if variant == "reference":
        return common.load_reference(common.model_folder("smollm2"))
    if variant in PACKED_FOLDERS:
        return microformers.AutoModelForCausalLM.from_pretrained(packed_folder(variant), dtype=torch.float32)
    config = quant_config(variant)
    if variant.startswith("gguf"):
        return microformers.AutoModelForCausalLM.from_pretrained(
            common.gguf_folder(), gguf_file=common.GGUF_NAME, quantization_config=config
        )
    folder = common.model_folder("smollm2")
    kwargs = {"quantization_config": config} if config else {}
    model = microformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, **kwargs)
    if variant == "fp32-packed":  # opt-in: float32 weights in oneDNN's packed layout (batched decoding)
        from microformers_sdk import pack_linear_weights

        pack_linear_weights(model)
    return model


SCENARIOS = {
    "decode": "greedy batch-1 decode of a 24-token prompt; tok/s = new tokens / time",
    "prefill": "one forward over a 512-token prompt (generate with 1 new token); tok/s = prompt tokens / time",
    "batch8": "greedy batch-8 decode, left-padded prompts of 24-59 tokens; tok/s = 8 x new tokens / time",
}


def run_one(variant: str, new_tokens: int, repeats: int, scenario: str) -> dict[str, Any]:
    """In a subprocess: load one variant, time one scenario, report JSON."""
    import time

    common.set_threads()
    import torch

    folder = common.model_folder("smollm2")
    if scenario == "prefill":
        ids, mask = common.prompts(folder, 1, length=512)
        new_tokens, counted = 1, 512
    elif scenario == "batch8":
        ids, mask = common.prompts(folder, 8)
        counted = 8 * new_tokens
    else:
        ids, mask = common.prompts(folder, 1)
        counted = new_tokens
    baseline = common.peak_rss_mb()
    tokens: Any = None
    if variant == "llama.cpp":
        import llama_cpp

        if scenario == "batch8":
            raise SystemExit("llama.cpp: no batched generate in llama-cpp-python's high-level API")
        seconds, llm = common.timed(
            lambda: llama_cpp.Llama(
                str(common.gguf_folder() / common.GGUF_NAME),
                n_threads=common.THREADS,
                n_threads_batch=common.THREADS,
                n_ctx=1024,
                n_batch=512,
                verbose=False,
            )
        )
        rss = common.peak_rss_mb()
        prompt = ids[0].tolist()

        def decode() -> Any:
            llm.reset()
            if scenario == "prefill":
                llm.eval(prompt)
                return None
            out = []
            for token in llm.generate(prompt, top_k=1, temp=0.0, reset=True):
                out.append(token)
                if len(out) == new_tokens:
                    break
            return out
    else:
        base = variant.removesuffix("+compiled")
        seconds, model = common.timed(lambda: load(base.removesuffix("-dynamic")))
        rss = common.peak_rss_mb()
        settings: dict[str, Any] = {"max_new_tokens": new_tokens, "min_new_tokens": new_tokens, "do_sample": False}
        if variant.endswith("+compiled"):
            model.compile_decode_step()
            settings["cache_implementation"] = "static"
        if base.endswith("-dynamic"):
            settings["cache_implementation"] = "dynamic"  # the eager path: plain generate's before the native default

        def decode() -> Any:
            with torch.no_grad():
                return model.generate(ids, attention_mask=mask, **settings)[:, ids.shape[1] :].tolist()

    rss_now = common.current_rss_mb()
    path = "-"
    if variant not in ("llama.cpp", "reference"):  # which path the steps take: count the native ones once
        from microformers_quant import decoder_step

        native_steps: list[int] = []
        original = decoder_step.QuantDecoderStep.__call__
        decoder_step.QuantDecoderStep.__call__ = lambda self, *a: native_steps.append(1) or original(self, *a)
        first, tokens = common.timed(decode)
        decoder_step.QuantDecoderStep.__call__ = original
        path = "native" if native_steps else "eager"
    else:
        first, tokens = common.timed(decode)
    walls, cpus = [], []
    for _ in range(repeats):
        cpu_start = time.process_time()
        wall, _ = common.timed(decode)
        cpus.append(time.process_time() - cpu_start)
        walls.append(wall)
    return {
        "rss_now_after_load_mb": rss_now,
        "peak_rss_after_decode_mb": common.peak_rss_mb(),
        "variant": variant,
        "scenario": scenario,
        "load_s": seconds,
        "rss_after_load_mb": rss,
        "rss_before_load_mb": baseline,
        "first_call_s": first,
        "tok_s": counted / common.median(walls),
        "cpu_tok_s": counted / common.median(cpus),  # tokens per CPU-second of this process (all its threads)
        "tokens": tokens,
        "path": path,
        "load_average": common.load_average(),
    }


def speed(args: argparse.Namespace) -> None:
    variants = list(args.only or VARIANTS)
    if "llama.cpp" in variants:
        try:
            import llama_cpp  # noqa: F401
        except ImportError:
            variants.remove("llama.cpp")
            print(
                "llama.cpp: llama-cpp-python is not installed here (a bench-only extra: pip install "
                "llama-cpp-python); its row is skipped"
            )
        else:
            if args.scenario == "batch8":
                variants.remove("llama.cpp")
                print("llama.cpp: no batch-8 row (llama-cpp-python's high-level API decodes one sequence)")
    if args.compiled:
        variants += [f"{v}+compiled" for v in ("fp32", "int8", "gguf", "gguf-a16", "int4", "int4-a16") if v in variants]
    common.model_folder("smollm2")  # build the shared float32 folder once, outside the timings
    for variant in variants:
        if variant.removesuffix("+compiled") in PACKED_FOLDERS:
            packed_folder(variant.removesuffix("+compiled"))
    results: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    measure = "CPU time" if args.cpu_time else "wall time"
    print(f"{args.scenario}: {SCENARIOS[args.scenario]}; {common.THREADS} threads; ratios on {measure}")
    print(f"CPU: {cpu_model()}; load average at start: {common.load_average()}")
    for round_index in range(args.rounds):
        for variant in variants:
            command = [sys.executable, __file__, "--one", variant, "--new-tokens", str(args.new_tokens)]
            command += ["--repeats", str(args.repeats), "--scenario", args.scenario]
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
            if done.returncode or not lines:
                print(f"{variant}: failed\n{done.stderr[-2000:]}")
                continue
            result = json.loads(lines[-1])
            results[variant].append(result)
            print(
                f"round {round_index + 1} {variant}: {result['tok_s']:.1f} tok/s, {result['cpu_tok_s']:.1f} per CPU-s "
                f"(load avg {result['load_average']})"
            )
    key = "cpu_tok_s" if args.cpu_time else "tok_s"

    def rate(variant: str, field: str = key) -> float:
        return common.median([r[field] for r in results.get(variant, [])])

    fp32_runs, ref_runs = results.get("fp32", []), results.get("reference", [])
    fp32, ref, anchor = rate("fp32"), rate("reference"), rate("llama.cpp")
    fp32_rss = common.median([r["rss_after_load_mb"] for r in fp32_runs])
    fp32_end = common.median([r["peak_rss_after_decode_mb"] for r in fp32_runs])
    fp32_added = fp32_end - common.median([r["rss_before_load_mb"] for r in fp32_runs])
    expected = ref_runs[0]["tokens"] if ref_runs and args.scenario != "prefill" else None
    print(
        f"\n== {args.scenario}, {'512-token prompt' if args.scenario == 'prefill' else f'{args.new_tokens} new tokens'}, "
        f"{common.THREADS} threads, {measure} (medians of {args.rounds} rounds); CPU: {cpu_model()}"
    )
    print(
        f"{'variant':<18}{'tok/s':>8}{'cpu tok/s':>10}{'x fp32':>8}{'x ref':>7}{'x l.cpp':>8}{'load s':>8}"
        f"{'peak MB':>8}{'x fp32':>7}{'end MB':>8}{'x fp32':>7}{'model MB':>9}{'x fp32':>7}  {'path':<7} tokens"
    )
    for variant, runs in results.items():
        if not runs:
            continue
        tok, cpu, measured = rate(variant, "tok_s"), rate(variant, "cpu_tok_s"), rate(variant)
        rss = common.median([r["rss_after_load_mb"] for r in runs])
        end = common.median([r["peak_rss_after_decode_mb"] for r in runs])
        added = end - common.median([r["rss_before_load_mb"] for r in runs])
        print(
            f"{variant:<18}{tok:>8.1f}{cpu:>10.1f}{measured / fp32:>8.2f}{measured / ref:>7.2f}{measured / anchor:>8.2f}"
            f"{common.median([r['load_s'] for r in runs]):>8.2f}{rss:>8.0f}{rss / fp32_rss:>7.2f}"
            f"{end:>8.0f}{end / fp32_end:>7.2f}{added:>9.0f}{added / fp32_added:>7.2f}  {runs[0].get('path', '-'):<7} "
            f"{same_tokens(runs[0]['tokens'], expected, variant)}"
        )
    print(
        f"x fp32 / x ref / x l.cpp: ratios of {measure} tok/s to our float32, the reference and llama.cpp (nan: no row)"
    )
    print("cpu tok/s: tokens per CPU-second of the process (less distorted by a loaded machine than wall time)")
    print(
        "peak MB: VmHWM right after load; end MB: VmHWM after the timed calls; model MB: end MB less the RSS "
        "before loading (what the model and running it add to python + torch)"
    )
    before = common.median([r["rss_before_load_mb"] for runs in results.values() for r in runs])
    print(f"RSS before loading (python + torch + imports): {before:.0f} MB")
    print(f"load average at end: {common.load_average()}")
    common.write_json(f"quant-{args.scenario}", {"new_tokens": args.new_tokens, "results": results})


def same_tokens(tokens: Any, expected: Any, variant: str) -> str:
    """``= ref`` where the new tokens equal the reference's, else where they first differ."""
    if expected is None or tokens is None or variant in ("llama.cpp", "reference"):
        return "-"
    for row, (ours, theirs) in enumerate(zip(tokens, expected)):
        differ = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), None)
        if differ is not None:
            return f"differ (row {row}, new token {differ})"
    return "= ref"


def layers(args: argparse.Namespace) -> None:
    """Per-layer time of each kernel path by input rows, SmolLM2's shapes: where the GEMM path pays off."""
    common.set_threads()
    import time

    import torch

    from microformers_quant import kernels
    from microformers_quant.modules import QuantLinear

    assert kernels.native_available(), "the C++ kernels did not build"
    torch.manual_seed(0)
    print(
        f"load average at start: {common.load_average()}; {common.THREADS} threads; min CPU time of {args.repeats} calls"
    )
    print(f"{'shape':<11}{'bits':>5}{'rows':>6}{'fp32 us':>10}{'rows us':>10}{'gemm us':>10}{'old us':>10}")
    for out_features, in_features in ((1536, 576), (576, 1536)):
        weights = [torch.randn(out_features, in_features) for _ in range(4)]
        for bits in (4, 8):
            quantized = []
            for weight in weights:
                layer = QuantLinear(in_features, out_features, bias=False, bits=bits, group=32)
                for name, tensor in layer.quantize_weight(weight).items():
                    setattr(layer, name, tensor)
                quantized.append(layer)
            for rows in args.rows:
                x = torch.randn(rows, in_features)

                def best(fn: Any) -> float:
                    times = []  # CPU time of this process: less distorted by other processes than wall time
                    for i in range(args.repeats):
                        start = time.process_time()
                        fn(i % 4)
                        times.append(time.process_time() - start)
                    return min(times) * 1e6

                fp32 = best(lambda i, x=x, w=weights: torch.nn.functional.linear(x, w[i]))
                cells = []
                for gemm_rows in (1 << 30, 1):
                    kernels.GEMM_MIN_ROWS = gemm_rows
                    cells.append(best(lambda i, x=x, q=quantized: q[i].matmul(x)))
                old = best(lambda i, x=x, q=quantized: torch.nn.functional.linear(x, q[i].dequantize()))
                shape = f"{out_features}x{in_features}"
                print(f"{shape:<11}{bits:>5}{rows:>6}{fp32:>10.0f}{cells[0]:>10.0f}{cells[1]:>10.0f}{old:>10.0f}")
    print(
        "rows: register-blocked row kernels; gemm: de-quantised tiles + float GEMM; old: torch de-quantise + F.linear"
    )
    print(f"load average at end: {common.load_average()}")


def accuracy(args: argparse.Namespace) -> None:
    common.set_threads()
    import torch

    import microformers
    from microformers_quant import kernels, modules

    modules.KERNEL_MAX_ROWS = 1 << 30  # every position through the row kernels, as in decoding
    kernels.GEMM_MIN_ROWS = 1 << 30
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
    for variant in args.only or ("int8", "int8-a8", "int4", "int4-a16", "int4-a8", "gguf", "gguf-a16", "gguf-a8"):
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
    parser.add_argument("--cpu-time", action="store_true", help="take the ratios on CPU time (busy machines)")
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--accuracy", action="store_true")
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--layers", action="store_true", help="per-layer kernel timings by input rows")
    parser.add_argument("--rows", type=int, nargs="*", default=[1, 2, 4, 8, 12, 16, 32, 64, 512])
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), default="decode")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if common.THREADS < 1:
        raise SystemExit(
            f"MICROFORMERS_BENCH_THREADS={common.THREADS}: torch and llama.cpp need at least 1 thread; set it to 1 "
            "(CPU-time runs on a busy machine) or more"
        )
    if args.layers:
        layers(args)
    elif args.one:
        print(json.dumps(run_one(args.one, args.new_tokens, args.repeats, args.scenario)))
    elif args.accuracy:
        accuracy(args)
    else:
        speed(args)


if __name__ == "__main__":
    main()
