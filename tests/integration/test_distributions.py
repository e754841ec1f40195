"""Releasing: the kernel's extras name every distribution at the version it carries, and `make dist`'s
PEP 503 index (scripts/dist.py) is one pip installs from, offline."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

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
