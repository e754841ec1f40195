"""The kernel owns its core: with no SDK and no plugin at all, a model builds, initialises, places, resizes,
saves atomically and loads back (safetensors and ``.bin``), and generation settings still validate.

Runs in a fresh interpreter where only the kernel's own entry point (``core``) is discovered and every
``microformers_*`` package (the SDK, the plugins) refuses to import.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent(
    r"""
    import importlib.abc, importlib.metadata, json, sys
    from pathlib import Path

    class NothingAboveTheKernel(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.startswith("microformers_"):
                raise ImportError(f"{name} is not available in this test")
            return None

    sys.meta_path.insert(0, NothingAboveTheKernel())
    real_entry_points = importlib.metadata.entry_points

    def kernel_entry_points(**kwargs):
        found = real_entry_points(**kwargs)
        if kwargs.get("group") == "microformers":
            return [ep for ep in found if ep.value.startswith("microformers.")]
        return found

    importlib.metadata.entry_points = kernel_entry_points

    import torch
    from torch import nn

    import microformers
    from microformers import (AutoConfig, AutoModel, AutoModelForCausalLM, GenerationConfig, GenerationError,
                              PretrainedConfig, PreTrainedModel)
    from microformers.plugins import HOOKS, registry

    class TinyConfig(PretrainedConfig):
        model_type = "tiny-alone"

        def __init__(self, vocab_size=11, hidden_size=6, initializer_range=0.02, tie_word_embeddings=True, **kw):
            self.vocab_size, self.hidden_size, self.initializer_range = vocab_size, hidden_size, initializer_range
            super().__init__(tie_word_embeddings=tie_word_embeddings, **kw)

    class TinyModel(PreTrainedModel):
        config_class = TinyConfig
        base_model_prefix = "tiny"

        def __init__(self, config):
            super().__init__(config)
            self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
            self.norm = nn.LayerNorm(config.hidden_size)
            self.post_init()

        def get_input_embeddings(self):
            return self.embed

        def set_input_embeddings(self, value):
            self.embed = value

        def forward(self, input_ids):
            return self.norm(self.embed(input_ids))

    class TinyForCausalLM(PreTrainedModel):
        config_class = TinyConfig
        base_model_prefix = "tiny"
        _tied_weights_keys = {"lm_head.weight": "tiny.embed.weight"}

        def __init__(self, config):
            super().__init__(config)
            self.tiny = TinyModel(config)
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
            self.post_init()

        def set_input_embeddings(self, value):
            self.tiny.set_input_embeddings(value)

        def get_output_embeddings(self):
            return self.lm_head

        def set_output_embeddings(self, value):
            self.lm_head = value

        def forward(self, input_ids):
            return self.lm_head(self.tiny(input_ids))

    AutoConfig.register("tiny-alone", TinyConfig)
    AutoModel.register(TinyConfig, TinyModel)
    AutoModelForCausalLM.register(TinyConfig, TinyForCausalLM)

    out = {}
    registry.discover()
    out["plugins"] = sorted(registry.plugins)
    out["broken"] = [p.name for p in registry.plugins.values() if p.broken]
    out["formats"] = {r.name: r.plugin for r in registry.all("checkpoint_formats")}
    out["implementations_kind"] = "implementations" in HOOKS.values() or bool(registry.names("implementations"))

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(TinyConfig())
    weight = model.tiny.embed.weight
    out["initialised"] = bool(0 < float(weight.detach().std()) < 0.05) and bool((model.tiny.norm.weight == 1).all())
    out["tied"] = model.lm_head.weight is weight

    folder = Path(sys.argv[1]) / "tiny"
    model.save_pretrained(folder)
    out["files"] = sorted(p.name for p in folder.iterdir())
    loaded = AutoModelForCausalLM.from_pretrained(folder, device_map="cpu")
    ids = torch.tensor([[1, 2, 3]])
    out["same_logits"] = bool(torch.equal(loaded(ids), model(ids)))
    out["device_map"] = loaded.hf_device_map
    out["base_loads"] = type(AutoModel.from_pretrained(folder)).__name__

    # a failed save leaves the previous checkpoint exactly as it was (the staged, atomic folder swap)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    def fail(*args, **kwargs):
        raise RuntimeError("disk full")
    loaded.config.save_pretrained = fail
    try:
        loaded.save_pretrained(folder)
    except RuntimeError:
        pass
    out["intact_after_failure"] = before == {p.name: p.read_bytes() for p in folder.iterdir()}
    out["leftovers"] = sorted(p.name for p in folder.parent.iterdir() if p.name != "tiny")

    # resize, require-grads, legacy .bin save and load
    loaded = AutoModelForCausalLM.from_pretrained(folder)
    loaded.resize_token_embeddings(13, pad_to_multiple_of=8)
    out["resized"] = [loaded.config.vocab_size, tuple(loaded.lm_head.weight.shape)]
    loaded.enable_input_require_grads()
    out["input_grads"] = loaded.tiny(ids).requires_grad
    loaded.disable_input_require_grads()
    loaded.save_pretrained(folder, safe_serialization=False)
    out["bin_files"] = sorted(p.name for p in folder.iterdir())
    reloaded = AutoModelForCausalLM.from_pretrained(folder, use_safetensors=False)
    out["bin_same"] = bool(torch.equal(reloaded(ids), loaded(ids)))

    # generation settings: the kernel's own checks without the generation plugin
    GenerationConfig(temperature=-1.0).validate()  # a strategy setting: checked by the generation plugin only
    try:
        GenerationConfig(max_new_tokens=0).validate()
        out["validate"] = "passed"
    except GenerationError as exc:
        out["validate"] = str(exc)
    scores = (torch.tensor([[0.0, 2.0]]), torch.tensor([[1.5, 0.0]]))
    out["transition_scores"] = model.compute_transition_scores(torch.tensor([[7, 1, 0]]), scores).tolist()
    out["sdk_imported"] = sorted(m for m in sys.modules if m.startswith("microformers_"))
    print(json.dumps(out))
    """
)


def test_the_kernel_alone_builds_loads_saves_and_reloads_a_model(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["plugins"] == ["core"] and out["broken"] == []
    assert out["formats"] == {"pytorch_bin": "core", "safetensors": "core"}
    assert out["implementations_kind"] is False
    assert out["initialised"] and out["tied"]
    assert out["files"] == ["config.json", "generation_config.json", "model.safetensors"]
    assert out["same_logits"] and out["device_map"] == {"": "cpu"} and out["base_loads"] == "TinyModel"
    assert out["intact_after_failure"] and out["leftovers"] == []
    assert out["resized"] == [16, [16, 6]]
    assert out["input_grads"] is True
    assert out["bin_files"] == ["config.json", "generation_config.json", "pytorch_model.bin"]
    assert out["bin_same"]
    assert out["validate"] == "max_new_tokens=0 must be an integer >= 1"
    assert out["transition_scores"] == [[2.0, 1.5]]
    assert out["sdk_imported"] == []
