"""Tests written for mutants that survived the mutation run (docs/reliability.md, "Mutation testing").

Each test names the change it catches; together with the rest of the suite they make the kernel's
behaviour, not just its happy path, pinned down.
"""

from __future__ import annotations

import microformers


def test_config_equality_needs_same_values_not_just_same_type() -> None:
    """Caught mutant: ``isinstance(other, PretrainedConfig) and ...`` -> ``or`` in ``__eq__``."""
    from microformers_test_toy.modeling_toy import ToyConfig

    a = ToyConfig(vocab_size=40, hidden_size=24, num_layers=2)
    assert a == ToyConfig(vocab_size=40, hidden_size=24, num_layers=2)
    assert a != ToyConfig(vocab_size=40, hidden_size=16, num_layers=2)
    assert a != {"vocab_size": 40}
    assert isinstance(a, microformers.PretrainedConfig)


def test_missing_error_messages_are_exact(monkeypatch) -> None:
    """Caught mutants in ``Registry.missing_error``: how ``what`` is derived from the kind, how tuple names and
    the installed list are written, which plugins are listed as broken, and which error class is raised."""
    from microformers import PluginError, UnknownModelTypeError, registry

    registry.discover()
    broken = [p for p in registry.plugins.values() if p.broken]
    installed = ", ".join(registry.names("configs"))
    error = registry.missing_error("configs", "nope")
    failed = "; ".join(f"'{p.name}' ({p.distribution}): {p.error}" for p in broken)
    if broken:  # the test-only broken plugins are installed: they are offered as the possible provider
        assert isinstance(error, PluginError)
        assert str(error) == (
            f"No installed plugin provides config 'nope'. These plugins failed to load and may be the one you "
            f"need: {failed} Installed: {installed}."
        )
    monkeypatch.setattr(registry, "plugins", {k: p for k, p in registry.plugins.items() if not p.broken})
    error = registry.missing_error("configs", "nope")
    assert type(error) is UnknownModelTypeError
    assert str(error) == f"No installed plugin provides config 'nope'. Installed: {installed}."
    formats = registry.missing_error("checkpoint_formats", "nope")
    assert str(formats).startswith("No installed plugin provides checkpoint format 'nope'. Installed: ")
    heads = registry.missing_error("models", ("llama", "AutoModelForNothing"))
    listed = ", ".join(":".join(n) for n in registry.names("models"))
    assert str(heads).startswith("No installed plugin provides model 'llama:AutoModelForNothing'.")
    assert str(heads).endswith(f" Installed: {listed}.") and "bert:AutoModel" in listed


def test_distribution_names_compare_normalised() -> None:
    """Caught mutants in ``_same_dist``: '_' and '.' are the same as '-' in distribution names, case is ignored.
    (``lower()`` -> ``upper()`` is an equivalent mutant: both sides change alike.)"""
    from microformers.plugins import _same_dist

    assert _same_dist("microformers_llama", "microformers-llama")
    assert _same_dist("Microformers.Llama", "microformers-llama")
    assert _same_dist("microformers-llama", "MICROFORMERS_LLAMA")
    assert not _same_dist("microformers-llama", "microformers-llam")
    assert not _same_dist("microformers_llama", "microformersxllama")
