"""The hook specifications: every way a plugin can extend microformers.

A plugin is a module named by an entry point in the ``microformers`` group. It defines
``MICROFORMERS_API_VERSION = 1`` (the kernel API it targets) and implements any of the hooks
below with ``@microformers.hookimpl``. Each hook receives one argument, ``register``, a callable
that records what the plugin provides. Nothing is imported from the plugin beyond this module
until it is needed: wherever a hook takes a class or function, a ``"module.path:Name"`` string may
be given instead and is imported on first use (an import error then names the plugin). What the kernel
calls on a registered object is a ``typing.Protocol`` in :mod:`microformers.protocols`.

No hook supplies code the kernel cannot work without: building, loading, initialising, placing and
saving a model (safetensors and ``.bin`` included) are the kernel's own; hooks only add to them.

Conflicts: when two plugins register the same name of the same kind, the registration made
in-process (``AutoConfig.register`` and friends) wins; between plugins, the one whose entry-point
name sorts first wins, a ``PluginConflictWarning`` says so, and ``microformers.prefer(kind, name,
plugin)`` or the environment variable ``MICROFORMERS_PREFER="kind:name=plugin,..."`` chooses explicitly.
"""

from __future__ import annotations

import pluggy

hookspec = pluggy.HookspecMarker("microformers")


@hookspec
def register_models(register):
    """Provide model architectures.

    Call ``register(model_type, config, models)``: ``model_type`` is the ``config.json`` value
    (``"llama"``), ``config`` the ``PretrainedConfig`` subclass, ``models`` a mapping from Auto class
    name (``"AutoModel"``, ``"AutoModelForCausalLM"``, ``"AutoModelForMaskedLM"``,
    ``"AutoModelForSequenceClassification"``, ``"AutoModelForTokenClassification"``,
    ``"AutoModelForQuestionAnswering"``, ``"AutoModelForSeq2SeqLM"``, or any other head name) to the model class. The class names
    also resolve ``config.architectures`` entries.
    """


@hookspec
def register_tokenizers(register):
    """Provide tokenizer backends.

    Call ``register(name, cls, tokenizer_classes=(...), priority=0)``. ``cls`` has
    ``from_pretrained(path, **kwargs)`` (``path`` a local folder the kernel resolved) and
    ``from_files(files: dict[str, str | dict], **kwargs)`` building a tokenizer from in-memory
    ``tokenizer.json`` (a JSON string) / ``tokenizer_config.json`` (a dict) contents, which is how
    checkpoint formats such as GGUF hand over an embedded tokenizer. ``tokenizer_classes`` lists the
    ``tokenizer_config.json`` ``tokenizer_class`` values it serves; otherwise the highest-priority
    backend whose ``can_load(path) -> bool`` accepts the folder is used.
    """


@hookspec
def register_processors(register):
    """Provide preprocessors (image, audio, multimodal).

    Call ``register(name, cls, role="processor" | "feature_extractor", model_types=(...))``; ``name`` is the
    ``processor_class`` / ``feature_extractor_type`` / ``image_processor_type`` value of a
    ``processor_config.json`` or ``preprocessor_config.json``; ``model_types`` makes ``cls`` the
    fallback of ``AutoProcessor`` (role "processor") or ``AutoFeatureExtractor`` (role
    "feature_extractor") for checkpoints whose files name no class. ``cls.from_pretrained(path, **kw)``.
    """


@hookspec
def register_pipelines(register):
    """Provide pipeline tasks.

    Call ``register(task, cls, model_class="AutoModel...", default_model=None, aliases=())``.
    ``cls`` subclasses ``microformers.Pipeline``; ``model_class`` names the Auto class (head) used to
    load a model given by name, or a tuple of head names tried in order; ``default_model`` is a model id
    or source alias used when none is given; ``task_patterns`` (regular expressions) claim parameterised
    task names no registration names exactly (``r"translation_\\w+_to_\\w+"``), which the pipeline is built
    with as given.
    """


@hookspec
def register_callbacks(register):
    """Provide Trainer callbacks / integrations: ``register(name, cls)`` (``report_to=[name]``)."""


@hookspec
def register_quantizers(register):
    """Provide quantizers: ``register(quant_method, cls)``, keyed by ``quantization_config.quant_method``.

    ``cls(quantization_config_dict)`` is a ``protocols.Quantizer`` (``prepare``, ``finish``, ``to_dict``).
    """


@hookspec
def register_adapters(register):
    """Provide adapter types (LoRA ...): ``register(peft_type, cls)``, keyed by ``adapter_config.json`` ``peft_type``.

    ``cls(model)`` is created once per model, on its first ``add_adapter(config)`` (``config.peft_type``)
    or ``load_adapter(path)`` (the folder's ``adapter_config.json``), and kept on the model; from then
    on the model's methods ``add_adapter(config, adapter_name)``, ``load_adapter(path, adapter_name,
    **kwargs)``, ``set_adapter(names)``, ``disable_adapters()``, ``enable_adapters()``,
    ``active_adapters() -> list[str]``, ``delete_adapter(names)``, ``get_adapter_state_dict(adapter_name,
    state_dict)``, ``merge_adapter(names)``, ``unmerge_adapter()``, ``merge_and_unload(**kw) -> model``
    and ``print_trainable_parameters()`` call the same-named method of that instance, and the model's
    ``save_pretrained(folder, **kw)`` calls its ``save_pretrained`` instead of writing the full model
    (adapter files only). Removing the last adapter removes the instance: ``del
    model.__dict__["_adapter_manager"]``. See docs/adapters.md; ``microformers-peft`` implements LORA.
    """


@hookspec
def register_exports(register):
    """Contribute top-level names: ``register(name, "module.path:Name")``.

    ``from microformers import Name`` then resolves it lazily (nothing is imported until the name is
    used). Kernel names cannot be overridden; two plugins exporting one name follow the conflict rule.
    """


@hookspec
def register_generation_strategies(register):
    """Provide decoding strategies for ``model.generate``.

    Call ``register(name, strategy, priority=0)``. ``strategy(model, inputs, *, generation_config,
    logits_processor, stopping_criteria, streamer, model_kwargs)`` gets the merged config and the raw
    call (``inputs`` may be ``None``; ``model_kwargs`` holds the non-setting keywords), prepares it and
    runs the loop (``microformers_generation.Strategy`` does the preparation for subclasses). Without
    a name (``generation_config.strategy``, ``custom_generate="name"``) the highest-priority strategy
    whose ``applies(generation_config)`` is true runs.
    """


@hookspec
def register_generation_config_checks(register):
    """Contribute checks to ``GenerationConfig.validate`` (optional; validate works without any).

    Call ``register(name, check)``: ``check(config) -> None`` raises ``GenerationError`` naming the setting
    when a value the plugin's strategies read is invalid (contract: ``protocols.GenerationConfigCheck``).
    ``validate`` runs the kernel's own checks of the settings it reads itself (lengths, beams, cache,
    compile), then every registered check in name order, then the kernel's checks of token ids and of
    contradictions between settings. ``microformers-generation`` registers the checks of the standard
    strategies' settings (sampling, penalties, stop strings ...).
    """


@hookspec
def register_checkpoint_formats(register):
    """Provide weight file formats (the kernel's own safetensors and ``.bin`` formats are registered this way,
    by its built-in plugin ``core``; a plugin may add formats, or override them by name and priority).

    Call ``register(name, fmt, priority=0)``; ``fmt`` follows ``protocols.CheckpointFormat`` (and
    ``SavingFormat`` / ``ShapedFormat`` / ``CarryingFormat`` for the optional parts). One kernel function (``weights.open_checkpoint``) opens a
    checkpoint for ``AutoConfig``, ``AutoTokenizer`` and ``from_pretrained`` alike; ``fmt`` tells it:

    - ``arguments``: the keyword arguments the format reads (``("gguf_file",)``); they are routed to the
      formats, never to the config.
    - ``selected_by``: arguments that name this format explicitly. When one is given (not None/False),
      only the formats it names are tried, whatever the priorities; otherwise every format is tried by
      descending priority.
    - ``patterns(**arguments) -> list[str]``: the file patterns to fetch from a Hub repo for these arguments.
    - ``find(folder, **arguments) -> list[Path] | None``: the files it claims in the resolved folder, or
      ``None``; it may raise ``weights.FormatRefused`` (files there, but need an opt-in) or a clear error.
    - ``load(files, dtype=...) -> Mapping[str, Tensor]`` (lazily read where possible).
    - optional ``expected`` (what the files look like, for the "no weights found" error), ``save(state_dict,
      folder, max_shard_size, metadata)`` with ``replaces`` (names/globs of its old files; a save supersedes
      those of every format) and ``safe`` (default true; ``save_pretrained(safe_serialization=...)`` uses the
      highest-priority format that saves and whose ``safe`` matches), and, for a format whose file
      carries a config or tokenizer (GGUF), ``load_config(files) -> dict`` and ``load_tokenizer_files(files)``.
    """


@hookspec
def register_gguf_architectures(register):
    """Describe how llama.cpp GGUF files of an architecture map onto a model type.

    Call ``register(gguf_name, "module:VALUE")``: ``gguf_name`` is the file's ``general.architecture``,
    ``VALUE`` a ``microformers_sdk.gguf.GGUFArchitecture`` (config keys, tensor names and layout
    transforms, tokenizer flavour); ``microformers-gguf`` reads it when it loads such a file.
    """


@hookspec
def register_attention_implementations(register):
    """Provide attention kernels: ``register(name, fn)``; chosen by ``attn_implementation=name``.

    ``fn(query, key, value, attention_mask, *, scaling, dropout, is_causal, **kwargs) -> Tensor``
    with ``query`` ``(batch, heads, q_len, head_dim)`` and key/value ``(batch, kv_heads, kv_len, head_dim)``.
    """


@hookspec
def register_cli_commands(register):
    """Provide ``microformers <name>`` subcommands.

    Call ``register(name, command, help="...")``: ``command(subparsers_parser)`` is called with the
    command's ``argparse.ArgumentParser`` to add arguments and must return the function that runs
    it, ``run(args) -> int | None``.
    """


@hookspec
def register_model_sources(register):
    """Provide model aliases: ``register(alias, resolve)``.

    ``resolve() -> (path_or_repo_id, kwargs)`` turns a short name such as ``"smollm2-135m-instruct"``
    into a folder (or Hub id) plus loading arguments (e.g. ``{"gguf_file": "..."}``).
    """


@hookspec
def register_environment_reports(register):
    """Provide lines for ``microformers env``: ``register(name, report)``.

    ``report() -> list[str]`` describes the plugin's state on this machine (e.g. whether its native
    kernels are built and used). It must be cheap and side-effect free: it never builds, downloads or
    loads a model. A report that raises is shown as broken; the other reports still print.
    """
