"""Build every distribution of this repository into dist/ and write a PEP 503 index over it.

    scripts/dist.py                      wheels and sdists of the kernel, the SDK and every plugin, then dist/simple/
    scripts/dist.py --only NAME ...      just these distributions (folder names: kernel, sdk, llama, ...)
    scripts/dist.py --out DIR            somewhere else than dist/
    scripts/dist.py --no-sdist           wheels only (sdists need the `build` package)

Then, offline: ``pip install --index-url file://$PWD/dist/simple --find-links <wheelhouse of torch etc.>
"microformers[chat]"``. Nothing is published from here: .github/workflows/release.yml does that.
"""

from __future__ import annotations

import argparse
import hashlib
import html
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def distribution_folders() -> dict[str, Path]:
    """Folder name -> folder of every distribution (kernel, sdk, plugins/*), in build order."""
    folders = {"kernel": ROOT / "kernel", "sdk": ROOT / "sdk"}
    for pyproject in sorted((ROOT / "plugins").glob("*/pyproject.toml")):
        folders[pyproject.parent.name] = pyproject.parent
    return folders


def normalized(name: str) -> str:
    """PEP 503's project name normalization."""
    return re.sub(r"[-_.]+", "-", name).lower()


def project_of(filename: str) -> str:
    """The normalized project name of a wheel or sdist file name (``microformers_qwen2_moe-0.1.0-...``)."""
    stem = filename.removesuffix(".tar.gz")
    return normalized(stem.split("-")[0])


def build(folder: Path, out: Path, sdist: bool) -> None:
    # --no-build-isolation: setuptools from this environment, no network
    command = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out)]
    subprocess.run([*command, str(folder)], check=True)
    if sdist:
        subprocess.run(
            [sys.executable, "-m", "build", "-q", "--sdist", "--no-isolation", "--outdir", str(out), str(folder)],
            check=True,
        )


def write_index(out: Path) -> Path:
    """dist/simple/index.html and one page per project, linking the files in ``out`` with their sha256."""
    simple = out / "simple"
    staging = out / ".simple.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    projects: dict[str, list[Path]] = {}
    for path in sorted(out.iterdir()):
        if path.is_file() and path.name.endswith((".whl", ".tar.gz")):
            projects.setdefault(project_of(path.name), []).append(path)
    links = []
    for project, files in sorted(projects.items()):
        page = staging / project
        page.mkdir()
        rows = []
        for path in files:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            rows.append(f'<a href="../../{html.escape(path.name)}#sha256={digest}">{html.escape(path.name)}</a><br>')
        page.joinpath("index.html").write_text(_page(project, rows))
        links.append(f'<a href="{project}/">{project}</a><br>')
    staging.joinpath("index.html").write_text(_page("microformers", links))
    # swapped in whole: a reader sees the old index or the new one
    if simple.exists():
        old = out / ".simple.old"
        shutil.rmtree(old, ignore_errors=True)
        simple.rename(old)
        staging.rename(simple)
        shutil.rmtree(old)
    else:
        staging.rename(simple)
    return simple


def _page(title: str, rows: list[str]) -> str:
    body = "\n".join(rows)
    return f"<!DOCTYPE html>\n<html><head><title>{html.escape(title)}</title></head><body>\n{body}\n</body></html>\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", metavar="NAME", help="folder names of the distributions to build")
    parser.add_argument("--out", type=Path, default=ROOT / "dist", help="output folder (default: dist/)")
    parser.add_argument("--no-sdist", action="store_true", help="wheels only")
    args = parser.parse_args(argv)
    folders = distribution_folders()
    chosen = args.only or list(folders)
    unknown = sorted(set(chosen) - set(folders))
    if unknown:
        parser.error(f"unknown distribution folder(s) {', '.join(unknown)}; known: {', '.join(folders)}")
    sdist = not args.no_sdist
    if sdist and subprocess.run([sys.executable, "-c", "import build"], capture_output=True).returncode != 0:
        parser.error("sdists need the 'build' package: pip install build (or pass --no-sdist)")
    args.out.mkdir(parents=True, exist_ok=True)
    for name in chosen:
        print(f"building {name}", flush=True)
        build(folders[name], args.out, sdist)
    simple = write_index(args.out)
    print(f"{len(chosen)} distribution(s) in {args.out}; index: {simple} (pip install --index-url file://{simple} ...)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
