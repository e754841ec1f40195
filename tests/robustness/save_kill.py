"""SIGKILL during saves: kill a forked child at its k-th file-system event (or after a random delay) while it
saves a new checkpoint over an old one, then check that the folder is, byte for byte, the complete old or the
complete new checkpoint, and that it loads as such (tensors / vocabulary compared).

Run by ``test_save_kill.py`` (a few kill points per scenario) and by hand for the long mode::

    python tests/robustness/save_kill.py --points 200 --random 50 [--json out.json]

The child installs ``sys.addaudithook``; every audited file-system event (open, rename, mkdir, chmod, scandir,
rmtree, ...) counts, and at the k-th one the child kills itself with SIGKILL before the operation runs.
Rust-side writes (safetensors) raise no events; the random-delay mode covers those instants.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

EVENTS = frozenset(
    {
        "open",
        "os.rename",
        "os.replace",
        "os.link",
        "os.symlink",
        "os.remove",
        "os.rmdir",
        "os.mkdir",
        "os.chmod",
        "os.scandir",
        "os.listdir",
        "os.walk",
        "shutil.rmtree",
        "shutil.copyfile",
        "tempfile.mkstemp",
        "tempfile.mkdtemp",
        "fcntl.flock",
        "ctypes.dlsym",
    }
)


def install_killer(k: int) -> None:
    """SIGKILL this process at the k-th audited file-system event (1-based)."""
    seen = [0]

    def hook(event: str, _args: Any) -> None:
        if event in EVENTS:
            seen[0] += 1
            if seen[0] == k:
                os.kill(os.getpid(), signal.SIGKILL)

    sys.addaudithook(hook)


def count_events(action: Callable[[], None]) -> int:
    """Run ``action`` in a forked child and return how many audited events it raised."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        seen = [0]
        sys.addaudithook(lambda event, _a: seen.__setitem__(0, seen[0] + (event in EVENTS)))
        action()
        os.write(write, str(seen[0]).encode())
        os._exit(0)
    os.close(write)
    data = os.read(read, 64)
    os.close(read)
    os.waitpid(pid, 0)
    return int(data)


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (relative path -> bytes); symlinks as their target."""
    out: dict[str, bytes] = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = Path(root) / name
            rel = str(path.relative_to(folder))
            out[rel] = os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
    return out


def file_modes(folder: Path) -> set[int]:
    return {(Path(r) / n).stat().st_mode & 0o777 for r, _, ns in os.walk(folder) for n in ns}


class Scenario:
    """Old state saved into ``target``; ``save_new`` writes the new one; ``load`` describes what loads."""

    name = ""

    def save_old(self, target: Path) -> None: ...
    def save_new(self, target: Path) -> None: ...
    def load(self, target: Path) -> Any: ...


class ModelScenario(Scenario):
    def __init__(self, name: str, old_shard: str, new_shard: str, new_safe: bool = True) -> None:
        import torch

        from microformers_llama import LlamaConfig, LlamaForCausalLM

        self.name = name
        self.old_shard, self.new_shard = old_shard, new_shard
        self.new_safe = new_safe  # False: the new save is legacy pytorch_model*.bin (safe_serialization=False)

        def build(seed: int, layers: int) -> Any:
            torch.manual_seed(seed)
            config = LlamaConfig(
                vocab_size=64,
                hidden_size=32,
                intermediate_size=48,
                num_hidden_layers=layers,
                num_attention_heads=4,
                num_key_value_heads=2,
                tie_word_embeddings=False,
            )
            return LlamaForCausalLM(config)

        # Different depth: mixing old and new files gives a model that fails to load or differs from both.
        self.old, self.new = build(0, 2), build(1, 3)

    def save_old(self, target: Path) -> None:
        self.old.save_pretrained(target, max_shard_size=self.old_shard)

    def save_new(self, target: Path) -> None:
        self.new.save_pretrained(target, max_shard_size=self.new_shard, safe_serialization=self.new_safe)

    def load(self, target: Path) -> Any:
        import microformers

        try:
            model = microformers.AutoModelForCausalLM.from_pretrained(target)
        except microformers.FileMissingError:  # only pickle weights there: they need the opt-in
            model = microformers.AutoModelForCausalLM.from_pretrained(target, use_safetensors=False)
        return {k: v.clone() for k, v in model.state_dict().items()}

    @staticmethod
    def same(a: Any, b: Any) -> bool:
        import torch

        return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


class TokenizerScenario(Scenario):
    name = "tokenizer"

    def __init__(self) -> None:
        from tokenizers import Tokenizer, models, pre_tokenizers

        from microformers_tokenizers import PreTrainedTokenizerFast

        def build(words: list[str], template: str) -> Any:
            vocab = {w: i for i, w in enumerate(["<unk>", "<s>", "</s>", *words])}
            backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
            backend.pre_tokenizer = pre_tokenizers.Whitespace()
            return PreTrainedTokenizerFast(
                tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>", chat_template=template
            )

        self.old = build(["a", "b", "c"], "{{ messages[0].content }}")
        self.new = build(["x", "y", "z", "w"], "NEW {{ messages[0].content }}")
        self.new.chat_template = {"default": "NEW {{ messages[0].content }}", "tool_use": "T {{ tools }}"}

    def save_old(self, target: Path) -> None:
        self.old.save_pretrained(target)

    def save_new(self, target: Path) -> None:
        self.new.save_pretrained(target)

    def load(self, target: Path) -> Any:
        import microformers

        tok = microformers.AutoTokenizer.from_pretrained(str(target))
        return (tok.get_vocab(), tok.chat_template, tok.bos_token, tok.eos_token)

    @staticmethod
    def same(a: Any, b: Any) -> bool:
        return bool(a == b)


def scenarios() -> list[Any]:
    return [
        ModelScenario("sharded->sharded", "6KB", "4KB"),
        ModelScenario("sharded->single", "6KB", "1GB"),
        ModelScenario("single->sharded", "1GB", "5KB"),
        ModelScenario("safetensors->bin", "6KB", "4KB", new_safe=False),
        TokenizerScenario(),
    ]


def run_scenario(scenario: Any, root: Path, points: int, delays: int, rng: random.Random) -> dict[str, Any]:
    base = root / scenario.name.replace(">", "").replace("-", "_")
    pristine, new_ref, target = base / "old", base / "new", base / "work" / "target"
    scenario.save_old(pristine)
    (pristine / "README.md").write_text("kept across saves\n")
    (pristine / "extra").mkdir()
    (pristine / "extra" / "notes.txt").write_text("a file in a subfolder\n")
    shutil.copytree(pristine, new_ref)
    scenario.save_new(new_ref)
    old_files, new_files = snapshot(pristine), snapshot(new_ref)
    old_state, new_state = scenario.load(pristine), scenario.load(new_ref)
    assert not scenario.same(old_state, new_state)

    def fresh_target() -> None:
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(pristine, target)

    fresh_target()
    total = count_events(lambda: scenario.save_new(target))
    ks = sorted({1 + round(i * (total - 1) / max(points - 1, 1)) for i in range(points)}) if points else []
    outcomes: dict[str, int] = {"old": 0, "new": 0}
    failures: list[str] = []
    killed = 0

    def check(label: str) -> None:
        files = snapshot(target)
        kind = "old" if files == old_files else "new" if files == new_files else None
        try:
            state = scenario.load(target)
        except Exception as exc:
            failures.append(f"{label}: folder {kind or 'neither old nor new'} fails to load: {exc!r}"[:400])
            return
        loaded = "old" if scenario.same(state, old_state) else "new" if scenario.same(state, new_state) else None
        if kind is None or loaded != kind:
            extra = sorted(set(files) ^ set(old_files if loaded == "old" else new_files))
            failures.append(f"{label}: files are {kind}, loads as {loaded}; differing names {extra[:6]}")
            return
        outcomes[kind] += 1

    def run_child(k: int | None, delay: float | None) -> None:
        nonlocal killed
        fresh_target()
        pid = os.fork()
        if pid == 0:
            if k is not None:
                install_killer(k)
            scenario.save_new(target)
            os._exit(0)
        if delay is not None:
            time.sleep(delay)
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        killed += os.WIFSIGNALED(status)
        check(f"{scenario.name} k={k} delay={delay}")

    for k in ks:
        run_child(k, None)
    if delays:
        start = time.perf_counter()
        fresh_target()
        scenario.save_new(target)
        duration = time.perf_counter() - start
        for _ in range(delays):
            run_child(None, rng.uniform(0, duration * 1.5))
    # Leftovers of the killed saves sit beside the target; the next completed save removes them.
    fresh_target()
    scenario.save_new(target)
    leftovers = sorted(p.name for p in target.parent.iterdir() if p.name != "target")
    check(f"{scenario.name} after clean save")
    return {
        "scenario": scenario.name,
        "events": total,
        "kill_points": len(ks),
        "random_delays": delays,
        "killed": killed,
        "outcomes": outcomes,
        "failures": failures,
        "leftovers": leftovers,
        "modes": sorted(oct(m) for m in file_modes(target)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=20, help="kill points per scenario (event counts)")
    parser.add_argument("--random", type=int, default=0, help="random-delay kills per scenario")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)  # fork-safe: no OpenMP pool in the parent
    os.umask(0o022)
    rng = random.Random(args.seed)
    results = []
    with tempfile.TemporaryDirectory(prefix="mf-save-kill-") as tmp:
        for scenario in scenarios():
            results.append(run_scenario(scenario, Path(tmp), args.points, args.random, rng))
    text = json.dumps(results, indent=2)
    if args.json:
        Path(args.json).write_text(text)
    print(text)
    return 1 if any(r["failures"] or r["leftovers"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
