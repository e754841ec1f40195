"""Move every distribution of this repository to one version (they are released together).

    scripts/set-version.py 0.2.0

Rewrites ``version = "..."`` in each pyproject.toml, the kernel's ``__version__``, and the ``==`` pins of the
kernel's extras on its own plugins; CHANGELOG.md gets an empty section for the version to fill in.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VERSION = re.compile(r"^\d+\.\d+\.\d+(?:(?:a|b|rc)\d+)?$")


def set_version(version: str) -> list[Path]:
    if not VERSION.match(version):
        raise SystemExit(f"set-version: {version!r} is not a version like 1.2.3 or 1.2.3rc1")
    changed = []
    pyprojects = [ROOT / "kernel/pyproject.toml", ROOT / "sdk/pyproject.toml", *sorted(ROOT.glob("plugins/*/pyproject.toml"))]
    for path in pyprojects:
        text = path.read_text()
        new = re.sub(r'(?m)^version = "[^"]+"$', f'version = "{version}"', text, count=1)
        new = re.sub(r'"(microformers-[a-z0-9-]+)==[^"]+"', rf'"\1=={version}"', new)
        if new != text:
            path.write_text(new)
            changed.append(path)
    init = ROOT / "kernel/src/microformers/_version.py"
    text = init.read_text()
    init.write_text(re.sub(r'(?m)^__version__ = "[^"]+"$', f'__version__ = "{version}"', text, count=1))
    changed.append(init)
    changelog = ROOT / "CHANGELOG.md"
    text = changelog.read_text()
    if f"## {version}" not in text:
        head, _, rest = text.partition("\n## ")
        changelog.write_text(f"{head}\n## {version}\n\n- (what changed, for users)\n\n## {rest}" if rest else f"{text}\n## {version}\n")
        changed.append(changelog)
    return changed


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: scripts/set-version.py VERSION")
    for path in set_version(sys.argv[1]):
        print(f"updated {path.relative_to(ROOT)}")
