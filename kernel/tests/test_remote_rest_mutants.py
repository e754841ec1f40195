"""``microformers.remote``: behaviour that the sixth mutation pass (the functions the fifth pass did not judge:
``_relative_imports``, ``_module_file``, ``collect_code_files``, ``check_requirements``, ``_ReviewedCode.find_spec``
and ``import_isolated``) found unasserted (docs/reliability.md, "Mutation testing").

Folders with their own code (``auto_map``) are built in ``tmp_path``; each test uses folders of its own, so the
private packages a load creates never collide between tests.
"""

from __future__ import annotations

import json
import locale
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from microformers import AutoConfig, RemoteCodeError
from microformers.remote import check_requirements, collect_code_files, import_isolated

CONFIG_SOURCE = (
    "from microformers import PretrainedConfig\n\n\n"
    "class RemoteConfig(PretrainedConfig):\n"
    "    model_type = 'remote_rest'\n\n"
    "    def __init__(self, width: int = 4, **kwargs):\n"
    "        self.width = width\n"
    "        super().__init__(**kwargs)\n"
)


def write_folder(folder: Path, files: dict[str, str], auto_map: dict[str, object] | None = None) -> Path:
    """A model folder holding ``files`` (relative names) and a ``config.json`` with ``auto_map``."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    config = {"model_type": "remote_rest", "auto_map": auto_map or {"AutoConfig": "conf.RemoteConfig"}}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def private_modules() -> set[str]:
    """The modules of every private package a load created."""
    return {name for name in sys.modules if name.startswith("microformers_remote_code.")}


@pytest.fixture
def ascii_locale() -> Iterator[None]:
    """A process whose locale says ASCII (``LC_CTYPE=C`` without Python's UTF-8 coercion)."""
    previous = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")
    try:
        yield
    finally:
        locale.setlocale(locale.LC_CTYPE, previous)


# -- which files would run ---------------------------------------------------------------------------
def test_files_no_import_can_reach_are_not_listed(tmp_path: Path) -> None:
    """A file named ``.py``, or ``*.py`` beside a star import, is no module of the folder: it is neither listed
    for consent nor hashed."""
    folder = write_folder(
        tmp_path / "m",
        {
            "conf.py": "from . import helper\nfrom .pkg import *\n",
            "helper.py": "H = 1\n",
            "pkg/__init__.py": "P = 1\n",
            ".py": "raise RuntimeError('not a module')\n",
            "pkg/*.py": "raise RuntimeError('not a module')\n",
        },
    )
    assert collect_code_files("conf", folder, {}) == {
        name: folder / name for name in ("conf.py", "helper.py", "pkg/__init__.py")
    }


def test_the_parent_packages_of_a_nested_module_are_listed_and_run(tmp_path: Path) -> None:
    """Importing ``pkg.sub.conf`` runs ``pkg/__init__.py`` and ``pkg/sub/__init__.py`` first: they are listed,
    hashed and run from the private package."""
    files = {
        "pkg/__init__.py": "MARK = 'pkg'\n",
        "pkg/sub/__init__.py": "MARK = 'sub'\n",
        "pkg/sub/conf.py": CONFIG_SOURCE,
    }
    folder = write_folder(tmp_path / "m", files, {"AutoConfig": "pkg.sub.conf.RemoteConfig"})
    assert collect_code_files("pkg.sub.conf", folder, {}) == {name: folder / name for name in files}
    config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
    assert sorted(type(config)._microformers_code_sha256) == sorted(files)
    sub = type(config).__module__.rpartition(".")[0]
    assert sys.modules[sub].MARK == "sub" and sys.modules[sub.rpartition(".")[0]].MARK == "pkg"


def test_modules_that_import_each_other_are_listed_once(tmp_path: Path) -> None:
    """An import cycle ends: each module is read once (in a daemon thread, so that a regression fails, not hangs)."""
    folder = write_folder(
        tmp_path / "m",
        {"conf.py": "from . import a\n", "a.py": "from . import b\n", "b.py": "from . import a, conf\n"},
    )
    found: list[dict[str, Path]] = []
    worker = threading.Thread(target=lambda: found.append(collect_code_files("conf", folder, {})), daemon=True)
    worker.start()
    worker.join(timeout=60)
    assert found == [{name: folder / name for name in ("conf.py", "a.py", "b.py")}]


def test_a_syntax_error_found_while_listing_keeps_the_file_name_for_tracebacks(tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "m", {"conf.py": "from .helper import H\n", "helper.py": "x = 1\ny = = 2\n"})
    with pytest.raises(RemoteCodeError) as info:
        collect_code_files("conf", folder, {})
    assert str(info.value).startswith(f"{folder / 'helper.py'} has a syntax error at line 2")
    cause = info.value.__cause__
    assert isinstance(cause, SyntaxError) and cause.filename == str(folder / "helper.py") and cause.lineno == 2


def test_a_file_with_a_nul_byte_is_refused_naming_it(tmp_path: Path) -> None:
    """Python 3.10's parser raises ValueError for it, later ones SyntaxError: the same refusal either way."""
    folder = write_folder(tmp_path / "m", {"conf.py": "from .helper import H\n", "helper.py": "H = 1\n\0\n"})
    with pytest.raises(RemoteCodeError) as info:
        collect_code_files("conf", folder, {})
    message = str(info.value)
    assert message.startswith(f"{folder / 'helper.py'} has a syntax error")
    assert "null bytes" in message and message.endswith(". It was not run; fix the file.")


# -- requirements.txt ----------------------------------------------------------------------------------
def test_requirements_are_read_as_utf8_whatever_the_locale(tmp_path: Path, ascii_locale: None) -> None:
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("# für die Übersetzung\npackaging\n", encoding="utf-8")
    check_requirements(requirements)  # no UnicodeDecodeError
    requirements.write_text("# café\nsurely-not-installed-pkg-rest\n", encoding="utf-8")
    with pytest.raises(RemoteCodeError, match=r"surely-not-installed-pkg-rest \(not installed\)"):
        check_requirements(requirements)


# -- the private package ---------------------------------------------------------------------------------
def test_a_compile_time_error_names_the_file_and_leaves_no_module(tmp_path: Path) -> None:
    # ast.parse accepts a top-level return; compiling it (while importing) fails
    source = "from .helper import H\n" + CONFIG_SOURCE + "return 1\n"
    folder = write_folder(tmp_path / "m", {"conf.py": source, "helper.py": "H = 1\n"})
    before = private_modules()
    with pytest.raises(RemoteCodeError) as info:
        AutoConfig.from_pretrained(folder, trust_remote_code=True)
    assert str(info.value) == f"{folder / 'conf.py'} has a syntax error at line 11: 'return' outside function"
    assert private_modules() - before == set()  # neither the package nor the helper that was imported first


def test_the_private_package_is_an_empty_package(tmp_path: Path) -> None:
    """No finder can list or import a file of the folder through the package (``__path__`` is empty)."""
    folder = write_folder(tmp_path / "m", {"conf.py": CONFIG_SOURCE})
    config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
    package_name = type(config).__module__.rpartition(".")[0]
    package = sys.modules[package_name]
    assert package.__path__ == [] and package.__package__ == package_name


def test_a_blocked_dynamic_import_lists_every_allowed_file(tmp_path: Path) -> None:
    source = (
        "from .helper import W\n"
        + CONFIG_SOURCE
        + "import importlib\nimportlib.import_module('.sneaky', __package__)\n"
    )
    folder = write_folder(tmp_path / "m", {"conf.py": source, "helper.py": "W = 1\n", "sneaky.py": "X = 1\n"})
    with pytest.raises(RemoteCodeError) as info:
        AutoConfig.from_pretrained(folder, trust_remote_code=True)
    assert f"consented to ({folder / 'conf.py'}, {folder / 'helper.py'}); a dynamic import" in str(info.value.__cause__)


def test_importing_a_module_that_was_not_listed_names_none_allowed(tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "m", {"conf.py": CONFIG_SOURCE})
    package = "microformers_remote_code.rest_unlisted_0"
    with pytest.raises(RemoteCodeError) as info:
        import_isolated(package, folder, "conf", {}, {})
    assert str(info.value) == (
        f"importing {folder} failed: ImportError: {package}.conf: {folder} may only import the code files that were "
        "listed, hashed and consented to (none); a dynamic import of any other module of the folder is blocked"
    )
    assert not [name for name in sys.modules if name == package or name.startswith(package + ".")]
