"""Model folders with their own code: consent, isolation, pinning, requirements, clean failures, generation."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import microformers
from microformers import RemoteCodeError

CONFIG_CODE = """
from microformers import PretrainedConfig


class ShinyConfig(PretrainedConfig):
    model_type = "shiny"

    def __init__(self, vocab_size=50, hidden_size=16, **kwargs):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        super().__init__(**kwargs)
"""

MODELING_CODE = """
import torch
from torch import nn

from microformers import PreTrainedModel
from microformers_sdk.outputs import BaseModelOutput, CausalLMOutput

from .configuration_shiny import ShinyConfig
from .helpers_shiny import SCALE


class ShinyModel(PreTrainedModel):
    config_class = ShinyConfig
    base_model_prefix = "model"

    def __init__(self, config):
        super().__init__(config)
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.mix = nn.Linear(config.hidden_size, config.hidden_size)
        self.post_init()

    def forward(self, input_ids, **kwargs):
        hidden = torch.tanh(self.mix(self.embed(input_ids))) * SCALE
        return BaseModelOutput(last_hidden_state=hidden.cumsum(1))


class ShinyForCausalLM(PreTrainedModel):
    config_class = ShinyConfig
    base_model_prefix = "model"

    def __init__(self, config):
        super().__init__(config)
        self.model = ShinyModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def forward(self, input_ids, **kwargs):
        return CausalLMOutput(logits=self.lm_head(self.model(input_ids).last_hidden_state))
"""


def make_custom_folder(root: Path, name: str = "shiny", scale: float = 2.0) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "configuration_shiny.py").write_text(CONFIG_CODE)
    (folder / "modeling_shiny.py").write_text(MODELING_CODE)
    (folder / "helpers_shiny.py").write_text(f"SCALE = {scale}\n")
    (folder / "unrelated.py").write_text("raise RuntimeError('never imported')\n")
    config = {
        "model_type": "shiny",
        "vocab_size": 50,
        "hidden_size": 16,
        "auto_map": {
            "AutoConfig": "configuration_shiny.ShinyConfig",
            "AutoModel": "modeling_shiny.ShinyModel",
            "AutoModelForCausalLM": "modeling_shiny.ShinyForCausalLM",
        },
    }
    (folder / "config.json").write_text(json.dumps(config))
    # weights: built once through the remote classes themselves
    config_obj = microformers.AutoConfig.from_pretrained(folder, trust_remote_code=True)
    torch.manual_seed(0)
    model = microformers.AutoModelForCausalLM.from_config(config_obj, trust_remote_code=True)
    from safetensors.torch import save_file

    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


def test_refused_without_consent_lists_every_file(tmp_path):
    folder = make_custom_folder(tmp_path)
    for call in (microformers.AutoConfig.from_pretrained, microformers.AutoModelForCausalLM.from_pretrained):
        with pytest.raises(RemoteCodeError) as info:
            call(folder)
        message = str(info.value)
        assert "trust_remote_code=True" in message
        assert "unrelated.py" not in message
    with pytest.raises(RemoteCodeError) as info:
        microformers.AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=False)
    for file_name in ("modeling_shiny.py", "configuration_shiny.py", "helpers_shiny.py"):
        assert file_name in str(info.value)


def test_loads_with_consent_isolated_and_round_trips(tmp_path):
    folder = make_custom_folder(tmp_path)
    config = microformers.AutoConfig.from_pretrained(folder, trust_remote_code=True)
    assert type(config).__name__ == "ShinyConfig"
    model = microformers.AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)
    base = microformers.AutoModel.from_pretrained(folder, trust_remote_code=True)
    assert type(model).__name__ == "ShinyForCausalLM" and type(base).__name__ == "ShinyModel"
    assert type(model).__module__.startswith("microformers_remote_code.")
    assert "modeling_shiny" not in sys.modules and "configuration_shiny" not in sys.modules
    ids = torch.tensor([[1, 2, 3, 4]])
    logits = model(ids).logits

    # it generates (greedy, through the installed strategies), token for token like a hand-written argmax loop
    generated = model.generate(ids, max_new_tokens=5, do_sample=False, use_cache=False)
    expected = ids
    for _ in range(5):
        next_token = model(expected).logits[:, -1].argmax(-1, keepdim=True)
        expected = torch.cat([expected, next_token], dim=1)
    # exact: use_cache=False runs the same full forward on the same sequences as the loop above
    assert torch.equal(generated, expected)
    # exact: the same code on the same input, with the same bytes loaded from the same folder
    assert torch.equal(model.model(ids).last_hidden_state, base(ids).last_hidden_state)

    digests = type(model)._microformers_code_sha256
    expected = hashlib.sha256((folder / "modeling_shiny.py").read_bytes()).hexdigest()
    assert digests["modeling_shiny.py"] == expected
    assert microformers.remote.CODE_DIGESTS[str(folder / "modeling_shiny.py")] == expected

    # save with register_for_auto_class, reload the copy in a fresh process
    type(config).register_for_auto_class()
    type(model).register_for_auto_class("AutoModelForCausalLM")
    saved = tmp_path / "saved"
    model.save_pretrained(saved)
    saved_config = json.loads((saved / "config.json").read_text())
    assert saved_config["auto_map"]["AutoModelForCausalLM"] == "modeling_shiny.ShinyForCausalLM"
    assert saved_config["auto_map"]["AutoConfig"] == "configuration_shiny.ShinyConfig"
    assert {"modeling_shiny.py", "configuration_shiny.py", "helpers_shiny.py"} <= {p.name for p in saved.iterdir()}
    assert not (saved / "unrelated.py").exists()
    script = textwrap.dedent(
        f"""
        import torch, microformers
        m = microformers.AutoModelForCausalLM.from_pretrained({str(saved)!r}, trust_remote_code=True)
        print(m(torch.tensor([[1, 2, 3, 4]])).logits.sum().item())
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert abs(float(out.stdout) - logits.sum().item()) < 1e-4


def test_two_folders_with_same_module_names_do_not_collide(tmp_path):
    one = make_custom_folder(tmp_path, "one", scale=1.0)
    two = make_custom_folder(tmp_path, "two", scale=3.0)
    a = microformers.AutoModel.from_pretrained(one, trust_remote_code=True)
    b = microformers.AutoModel.from_pretrained(two, trust_remote_code=True)
    assert type(a) is not type(b)
    assert sys.modules[type(a).__module__].__file__ != sys.modules[type(b).__module__].__file__


def test_digest_pinning(tmp_path):
    folder = make_custom_folder(tmp_path)
    digests = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.glob("*_shiny.py")}
    model = microformers.AutoModel.from_pretrained(folder, trust_remote_code=True, code_sha256=digests)
    assert type(model).__name__ == "ShinyModel"
    tampered = dict(digests, **{"helpers_shiny.py": "0" * 64})
    with pytest.raises(RemoteCodeError, match=r"helpers_shiny\.py has SHA-256"):
        microformers.AutoModel.from_pretrained(folder, trust_remote_code=True, code_sha256=tampered)
    partial = {"modeling_shiny.py": digests["modeling_shiny.py"]}
    with pytest.raises(RemoteCodeError, match="not pinned"):
        microformers.AutoConfig.from_pretrained(folder, trust_remote_code=True, code_sha256=partial)


def test_missing_requirement_reported_before_running(tmp_path):
    folder = make_custom_folder(tmp_path)
    (folder / "requirements.txt").write_text("torch>=1.0\nsurely-not-installed-pkg>=1.0\nnumpy<0.1\n")
    with pytest.raises(RemoteCodeError) as info:
        microformers.AutoModel.from_pretrained(folder, trust_remote_code=True)
    message = str(info.value)
    assert "surely-not-installed-pkg" in message and "numpy<0.1" in message and "requirements.txt" in message
    assert "torch" not in message.split("not met:")[1].split(";")[0] or "installed" in message


def test_syntax_error_and_missing_class_leave_nothing_behind(tmp_path):
    folder = make_custom_folder(tmp_path)
    good = (folder / "helpers_shiny.py").read_text()
    (folder / "helpers_shiny.py").write_text("SCALE = = 2\n")
    config = microformers.AutoConfig.from_pretrained(folder, trust_remote_code=True)
    before = set(sys.modules)
    with pytest.raises(RemoteCodeError, match=r"helpers_shiny\.py has a syntax error at line 1"):
        microformers.AutoModel.from_pretrained(folder, config=config, trust_remote_code=True)
    assert set(sys.modules) - before == set()
    (folder / "helpers_shiny.py").write_text(good)

    config = json.loads((folder / "config.json").read_text())
    config["auto_map"]["AutoModel"] = "modeling_shiny.NoSuchModel"
    (folder / "config.json").write_text(json.dumps(config))
    before = set(sys.modules)
    with pytest.raises(RemoteCodeError, match=r"modeling_shiny\.py defines no class NoSuchModel.*ShinyModel"):
        microformers.AutoModel.from_pretrained(folder, trust_remote_code=True)
    assert not [m for m in set(sys.modules) - before if "modeling_shiny" in m]
    config["auto_map"]["AutoModel"] = "modeling_shiny.ShinyModel"
    (folder / "config.json").write_text(json.dumps(config))
    assert type(microformers.AutoModel.from_pretrained(folder, trust_remote_code=True)).__name__ == "ShinyModel"


def test_registered_plugin_wins_unless_remote_code_is_asked_for(tmp_path):
    folder = make_custom_folder(tmp_path)
    config = json.loads((folder / "config.json").read_text())
    config["model_type"] = "toy"
    config["num_layers"] = 1
    (folder / "config.json").write_text(json.dumps(config))
    assert type(microformers.AutoConfig.from_pretrained(folder)).__name__ == "ToyConfig"
    assert type(microformers.AutoConfig.from_pretrained(folder, trust_remote_code=True)).__name__ == "ShinyConfig"


NESTED_MODELING = """
from .configuration_shiny import ShinyConfig
from .pkg.impl import FACTOR
from .modeling_shiny import ShinyModel as _Base


class NestedModel(_Base):
    factor = FACTOR
"""


def make_nested_folder(root: Path) -> Path:
    """A folder whose model module reaches code through a nested package (``from .pkg.impl import ...``)."""
    folder = make_custom_folder(root)
    (folder / "pkg").mkdir()
    (folder / "pkg" / "__init__.py").write_text("")
    (folder / "pkg" / "impl.py").write_text("FACTOR = 3\n")
    (folder / "modeling_nested.py").write_text(NESTED_MODELING)
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"]["AutoModel"] = "modeling_nested.NestedModel"
    (folder / "config.json").write_text(json.dumps(config))
    return folder


TAMPERED_IMPL = (
    "from pathlib import Path\nPath(__file__).with_name('RAN').write_text('tampered code ran')\nFACTOR = 4\n"
)


def test_nested_package_is_listed_hashed_and_pinned(tmp_path):
    folder = make_nested_folder(tmp_path)
    with pytest.raises(RemoteCodeError) as info:
        microformers.AutoModel.from_pretrained(folder)
    assert str(folder / "pkg" / "impl.py") in str(info.value) and str(folder / "pkg" / "__init__.py") in str(info.value)

    model = microformers.AutoModel.from_pretrained(folder, trust_remote_code=True)
    assert type(model).factor == 3
    pins = dict(type(model)._microformers_code_sha256)
    assert pins["pkg/impl.py"] == hashlib.sha256(b"FACTOR = 3\n").hexdigest() and "pkg/__init__.py" in pins
    pins.update(
        microformers.AutoConfig.from_pretrained(folder, trust_remote_code=True).__class__._microformers_code_sha256
    )

    (folder / "pkg" / "impl.py").write_text(TAMPERED_IMPL)
    with pytest.raises(RemoteCodeError, match=r"impl\.py has SHA-256 .* It was not run") as info:
        microformers.AutoModel.from_pretrained(folder, trust_remote_code=True, code_sha256=pins)
    assert "Nothing was run" not in str(info.value)
    assert not (folder / "pkg" / "RAN").exists()
    # pins made before nested files were hashed (no entry for pkg/impl.py) are refused, not trusted
    old_pins = {k: v for k, v in pins.items() if not k.startswith("pkg/")}
    with pytest.raises(RemoteCodeError, match=r"pkg/impl\.py would run but is not pinned"):
        microformers.AutoModel.from_pretrained(folder, trust_remote_code=True, code_sha256=old_pins)
    assert not (folder / "pkg" / "RAN").exists()


def test_tampered_model_file_is_refused_before_the_config_code_runs(tmp_path):
    folder = make_custom_folder(tmp_path / "a")
    pins = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.glob("*_shiny.py")}
    marker = folder / "CONFIG_RAN"
    config_file = folder / "configuration_shiny.py"
    config_file.write_text(config_file.read_text() + f"\nfrom pathlib import Path\nPath({str(marker)!r}).touch()\n")
    pins["configuration_shiny.py"] = hashlib.sha256(config_file.read_bytes()).hexdigest()
    (folder / "modeling_shiny.py").write_text((folder / "modeling_shiny.py").read_text() + "\n# changed\n")
    # a fresh copy of the folder, so no earlier load in this process ran its configuration module
    fresh = tmp_path / "b"
    import shutil

    shutil.copytree(folder, fresh)
    marker.unlink(missing_ok=True)
    with pytest.raises(RemoteCodeError, match=r"modeling_shiny\.py has SHA-256") as info:
        microformers.AutoModel.from_pretrained(fresh, trust_remote_code=True, code_sha256=pins)
    assert not marker.exists(), "the configuration module ran although the model file's pin did not match"
    assert "No code from this folder has run" in str(info.value)


def test_dynamic_import_of_an_unhashed_module_is_blocked(tmp_path):
    folder = make_custom_folder(tmp_path)
    (folder / "sneaky.py").write_text("from pathlib import Path\nPath(__file__).with_name('RAN').touch()\nX = 1\n")
    (folder / "helpers_shiny.py").write_text(
        "import importlib\nSCALE = 2.0\nimportlib.import_module('.sneaky', __package__)\n"
    )
    with pytest.raises(RemoteCodeError, match=r"sneaky.*blocked"):
        microformers.AutoModel.from_pretrained(folder, trust_remote_code=True)
    assert not (folder / "RAN").exists()


def test_stale_bytecode_beside_the_source_is_never_run(tmp_path):
    """The default import machinery would run __pycache__/*.pyc if its recorded mtime and size match the
    source; the code that runs must be the code that was hashed."""
    import os
    import py_compile
    import shutil
    from importlib.util import cache_from_source

    folder = tmp_path / "never_loaded"  # a copy no earlier import in this process has seen
    shutil.copytree(make_custom_folder(tmp_path), folder)
    helpers = folder / "helpers_shiny.py"
    stat = helpers.stat()
    helpers.write_text("SCALE = 9.0\n")  # same size as "SCALE = 2.0\n"
    os.utime(helpers, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    py_compile.compile(str(helpers), cfile=cache_from_source(str(helpers)))
    helpers.write_text("SCALE = 2.0\n")
    os.utime(helpers, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    model = microformers.AutoModel.from_pretrained(folder, trust_remote_code=True)
    assert sys.modules[type(model).__module__.rpartition(".")[0] + ".helpers_shiny"].SCALE == 2.0


@pytest.mark.parametrize(
    "pins",
    [{"modeling_shiny.py": 5}, {"modeling_shiny.py": "abc"}, ["modeling_shiny.py"], "deadbeef", {3: "0" * 64}],
)
def test_malformed_code_sha256_is_a_clear_error(tmp_path, pins):
    folder = make_custom_folder(tmp_path)
    with pytest.raises(RemoteCodeError, match=r"code_sha256 must be a dict \{file name: 64-character hex"):
        microformers.AutoModel.from_pretrained(folder, trust_remote_code=True, code_sha256=pins)


def test_consent_is_never_implied(tmp_path, monkeypatch):
    folder = make_custom_folder(tmp_path)
    assert microformers.AutoModel.from_pretrained(folder, trust_remote_code=True) is not None
    # not by an earlier consent in the same process, an environment variable, or a truthy non-True value
    for name in ("TRUST_REMOTE_CODE", "HF_TRUST_REMOTE_CODE", "MICROFORMERS_TRUST_REMOTE_CODE"):
        monkeypatch.setenv(name, "1")
    for value in (None, False, 1, "yes", "True"):
        kwargs = {} if value is None else {"trust_remote_code": value}
        with pytest.raises(RemoteCodeError, match="trust_remote_code=True"):
            microformers.AutoModel.from_pretrained(folder, **kwargs)
    # and the files are not run in a fresh process either
    marker = folder / "RAN"
    (folder / "helpers_shiny.py").write_text(f"from pathlib import Path\nPath({str(marker)!r}).touch()\nSCALE = 2.0\n")
    script = f"import microformers\nmicroformers.AutoModel.from_pretrained({str(folder)!r})\n"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode != 0 and "RemoteCodeError" in out.stderr and not marker.exists()
