"""Releasing: the kernel's extras name every distribution at the version it carries, and `make dist`'s
PEP 503 index (scripts/dist.py) is one pip installs from, offline."""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]


def _projects() -> dict[str, dict]:
    files = [ROOT / "kernel/pyproject.toml", ROOT / "sdk/pyproject.toml", *ROOT.glob("plugins/*/pyproject.toml")]
    return {data["project"]["name"]: data["project"] for data in (tomllib.loads(f.read_text()) for f in files)}


def _expand(extras: dict[str, list[str]], name: str) -> set[str]:
    names: set[str] = set()
    for requirement in extras[name]:
        nested = re.fullmatch(r"microformers\[([a-z0-9,-]+)\]", requirement)
        if nested:
            for inner in nested.group(1).split(","):
                names |= _expand(extras, inner)
        else:
            names.add(requirement.split("==")[0])
    return names


def test_the_all_extra_installs_every_distribution_at_the_released_version() -> None:
    projects = _projects()
    kernel = projects["microformers"]
    extras = kernel["optional-dependencies"]
    assert _expand(extras, "all") == set(projects) - {"microformers"}
    versions = {project["version"] for project in projects.values()}
    assert versions == {kernel["version"]}  # released together (scripts/set-version.py)
    for requirements in extras.values():
        for requirement in requirements:
            if "==" in requirement:
                assert requirement.split("==")[1] == kernel["version"], requirement


def test_the_dist_index_serves_wheels_pip_installs_offline(tmp_path: Path) -> None:
    out = tmp_path / "dist"
    subprocess.run(
        [sys.executable, str(ROOT / "scripts/dist.py"), "--only", "sdk", "llama", "--no-sdist", "--out", str(out)],
        check=True, capture_output=True,
    )  # fmt: skip
    pages = sorted(p.name for p in (out / "simple").iterdir())
    assert pages == ["index.html", "microformers-llama", "microformers-sdk"]
    page = (out / "simple/microformers-llama/index.html").read_text()
    assert re.search(r'href="\.\./\.\./microformers_llama-[^"]+\.whl#sha256=[0-9a-f]{64}"', page)
    fetched = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "--index-url",
         (out / "simple").as_uri(), "microformers-llama", "-d", str(tmp_path / "got")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert fetched.returncode == 0, fetched.stderr  # pip checks each file against its sha256 fragment
    assert [p.name for p in (tmp_path / "got").iterdir()] == [p.name for p in out.glob("microformers_llama-*.whl")]


# -- each plugin's wheel alone in a fresh environment -----------------------------------------------------------------
# Building wheels and installing them is slow (about 5 s per plugin on 2 busy cores), so each run checks a
# deterministic sample: MICROFORMERS_DIST_SAMPLE plugins (default 4; 0 = every plugin), spread over the alphabet and
# rotating with the UTC day, so every plugin is checked within a week of CI runs. MICROFORMERS_DIST_ROUND=k picks
# round k instead of today's (to reproduce a failure).
DIST_SAMPLE = int(os.environ.get("MICROFORMERS_DIST_SAMPLE", "4"))
_CHECK_INSTALLED = r"""
import importlib, json, sys
import microformers
from microformers.plugins import iter_plugins

wanted = sys.argv[1]
norm = lambda name: (name or "").replace("_", "-").lower()
infos = [p for p in iter_plugins() if norm(p.distribution) == wanted]
loaded, failures = [], []
for info in infos:
    if info.broken:
        failures.append(f"entry point {info.name} failed to load: {info.error}")
    for registration in info.registrations:  # what the plugin registered by "module:Name": import it
        if isinstance(registration.ref, str) and ":" in registration.ref:
            try:
                registration.load()
                loaded.append(registration.ref)
            except Exception as exc:
                failures.append(f"{registration.kind} {registration.name!r}: {exc}")
print(json.dumps({"plugins": [p.name for p in infos], "loaded": len(loaded), "failures": failures}))
"""


def _plugin_folders() -> list[str]:
    return sorted(p.parent.name for p in ROOT.glob("plugins/*/pyproject.toml"))


def _sampled_plugins() -> list[str]:
    names = _plugin_folders()
    if DIST_SAMPLE <= 0 or DIST_SAMPLE >= len(names):
        return names
    rounds = -(-len(names) // DIST_SAMPLE)
    chosen = int(os.environ.get("MICROFORMERS_DIST_ROUND", datetime.date.today().toordinal())) % rounds
    return names[chosen::rounds]


def _folders_by_project() -> dict[str, Path]:
    folders = {"kernel": ROOT / "kernel", "sdk": ROOT / "sdk", **{n: ROOT / "plugins" / n for n in _plugin_folders()}}
    return {
        canonicalize_name(tomllib.loads((f / "pyproject.toml").read_text())["project"]["name"]): f
        for f in folders.values()
    }


def _requirements(folder: Path) -> list[Requirement]:
    project = tomllib.loads((folder / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in project.get("dependencies", [])]


def _closure(project: str, folders: dict[str, Path]) -> tuple[set[str], set[str]]:
    """(our distributions, third-party distributions) ``project`` needs, following declared dependencies."""
    ours: set[str] = set()
    third: set[str] = set()
    todo = [project]
    while todo:
        name = todo.pop()
        if name in ours:
            continue
        ours.add(name)
        for requirement in _requirements(folders[name]):
            if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
                continue
            dependency = canonicalize_name(requirement.name)
            (todo.append if dependency in folders else third.add)(dependency)
    todo, third = list(third), set()
    while todo:  # third-party: their own requirements, as installed in this environment
        name = todo.pop()
        if name in third:
            continue
        third.add(name)
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue  # pip names it when it resolves the plugin's requirements in the fresh environment
        for text in requires:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(requirement.name))
    return ours, third


def _link_installed(distributions: set[str], into: Path) -> None:
    """Make these distributions of this environment importable from ``into`` (symlinks to their top-level files and
    their .dist-info, so pip and importlib.metadata see them installed) — and nothing else of this environment."""
    into.mkdir(parents=True)
    for name in sorted(distributions):
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        base = Path(dist.locate_file(""))
        for top in {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}:
            source, target = base / top, into / top
            if source.exists() and not target.exists() and top != "__pycache__":
                target.symlink_to(source)


@pytest.fixture(scope="module")
def sampled_wheels(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path], list[str]]:
    """Wheels of the kernel, the SDK, the sampled plugins and what they declare, built once from clean copies
    (setuptools' build/ folder in a source tree can hold modules that no longer exist)."""
    folders = _folders_by_project()
    by_folder = {folder: project for project, folder in folders.items()}
    plugins = [by_folder[ROOT / "plugins" / name] for name in _sampled_plugins()]
    needed = set().union(*(_closure(p, folders)[0] for p in plugins))
    tmp = tmp_path_factory.mktemp("wheels")
    ignore = shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "tests", "*.so")
    copies = []
    for name in sorted(needed):
        copies.append(tmp / "src" / name)
        shutil.copytree(folders[name], copies[-1], ignore=ignore)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
         "--disable-pip-version-check", "-w", str(tmp / "wheels"), *map(str, copies)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    return tmp / "wheels", folders, plugins


@pytest.mark.slow
def test_each_sampled_plugin_installs_alone_from_its_wheel_and_loads(
    sampled_wheels: tuple[Path, dict[str, Path], list[str]], tmp_path: Path
) -> None:
    """Per plugin, a fresh venv (no system site-packages) gets only the third-party distributions its declared
    requirements reach (linked from this environment) and then ``pip install --no-index --find-links <wheels>
    <plugin>``: pip must resolve every microformers distribution it needs from its declared dependencies; then its
    entry points load in the kernel's discovery and everything it registers by reference imports."""
    wheels, folders, plugins = sampled_wheels
    problems = []
    for project in plugins:
        env = tmp_path / project
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
        python = env / "bin" / "python"
        site = Path(subprocess.run(
            [str(python), "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True, capture_output=True, text=True,
        ).stdout.strip())  # fmt: skip
        _ours, third = _closure(project, folders)
        _link_installed(third, tmp_path / f"{project}-deps")
        (site / "third_party_deps.pth").write_text(str(tmp_path / f"{project}-deps") + "\n")
        installed = subprocess.run(
            [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-index",
             "--disable-pip-version-check", "--no-warn-script-location", "--find-links", str(wheels), project],
            capture_output=True, text=True,
        )  # fmt: skip
        if installed.returncode != 0:
            problems.append(f"{project}: pip install failed: {installed.stderr.strip()[-1500:]}")
            continue
        checked = subprocess.run(
            [str(python), "-I", "-c", _CHECK_INSTALLED, project], capture_output=True, text=True, cwd=tmp_path
        )
        if checked.returncode != 0:
            problems.append(f"{project}: importing failed: {checked.stderr.strip()[-1500:]}")
            continue
        report = json.loads(checked.stdout.strip().splitlines()[-1])
        if not report["plugins"]:
            problems.append(f"{project}: no microformers entry point found after installing its wheel")
        problems += [f"{project}: {failure}" for failure in report["failures"]]
    assert not problems, "\n".join(problems)
