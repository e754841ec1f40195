"""Every ```python snippet of README.md and docs/*.md runs as written.

Each snippet runs in a subprocess with the repository's Python (``.venv/bin/python`` where it exists), in a
fresh empty folder, offline (``HF_HUB_OFFLINE=1``, an empty ``HF_HOME``): only the packaged model aliases
(``smollm2-135m-instruct``, ``all-minilm-l6-v2``) and what the snippets build themselves are there. A snippet
and the ``continued`` ones after it share one process, run once; each still passes or fails on its own (a
line printed after each one says it finished). The test id is the snippet's ``page:line`` (its opening fence).

Words after ``python`` in the fence's info string mark a snippet:

- ``needs-gpu``: it needs a CUDA device; skipped when torch sees none.
- ``needs-network``: it needs a model hub or another network service; always skipped here.
- ``continued``: it goes on from the previous ```python snippet of the same page (which may itself be
  ``continued``); it runs after all of them, in the same process, so it can use their names and files.
- ``file=NAME``: the snippet is the content of the file ``NAME`` (a relative path) that the snippets continuing
  it import or read; it is written into the folder (and compiled) instead of run.

The program runs from the folder it starts in (as ``python script.py`` in a project folder), so files written
there are importable.

Any other word is refused (a typo must not run or skip a snippet silently). Snippets that load the packaged
SmolLM2 carry pytest's ``slow`` marker (still part of ``make test``). Bash blocks are not run: the ones in the
docs install packages, build distributions or run long jobs.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
MARKERS = {"needs-gpu", "needs-network", "continued"}
FILE_MARKER = re.compile(r"^file=(?!/)(?!.*\.\.)[\w./-]+$")
SLOW_ALIASES = ("smollm2-135m-instruct",)
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*(\S*)(.*)$")
TIMEOUT_S = 600


@attrs.frozen(eq=False)
class Snippet:
    page: Path
    line: int  # 1-based line of the opening fence
    code: str
    markers: frozenset[str]
    previous: Snippet | None = attrs.field(repr=False)  # the snippet before it on its page

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"

    def chain(self) -> list[Snippet]:
        """The snippets this one continues, first to last, ending with this one."""
        snippets = [self]
        while "continued" in snippets[0].markers and snippets[0].previous is not None:
            snippets.insert(0, snippets[0].previous)
        return snippets


def python_snippets(page: Path) -> list[Snippet]:
    lines = page.read_text(encoding="utf-8").splitlines()
    snippets: list[Snippet] = []
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        indent, fence, language, rest = opening.groups()
        end = index + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        if end == len(lines):
            raise AssertionError(f"{page.relative_to(REPO)}:{index + 1}: the fence opened here is never closed")
        if language == "python":
            body = [line[len(indent) :] if line.startswith(indent) else line for line in lines[index + 1 : end]]
            markers = frozenset(rest.split())
            previous = snippets[-1] if snippets else None
            snippets.append(Snippet(page, index + 1, "\n".join(body) + "\n", markers, previous))
        index = end + 1
    return snippets


ALL_SNIPPETS = [snippet for page in PAGES for snippet in python_snippets(page)]


def test_every_python_fence_is_collected_with_known_markers():
    fences = sum(
        1
        for page in PAGES
        for line in page.read_text(encoding="utf-8").splitlines()
        if (match := FENCE.match(line)) and match.group(3) == "python"
    )
    assert len(ALL_SNIPPETS) == fences > 0
    for snippet in ALL_SNIPPETS:
        assert snippet.code.strip(), f"{snippet.id}: empty snippet"
        unknown = {marker for marker in snippet.markers - MARKERS if not FILE_MARKER.match(marker)}
        assert not unknown, f"{snippet.id}: unknown fence marker(s) {sorted(unknown)}; known: {sorted(MARKERS)}"
        if "continued" in snippet.markers:
            assert snippet.previous is not None and snippet.previous.page == snippet.page, (
                f"{snippet.id}: marked `continued` but no python snippet comes before it on its page"
            )


def _skip_reason(snippet: Snippet) -> str | None:
    if "needs-network" in snippet.markers:
        return f"{snippet.id} is marked needs-network: it needs a network service, and this test runs offline"
    if "needs-gpu" in snippet.markers:
        import torch

        if not torch.cuda.is_available():
            return f"{snippet.id} is marked needs-gpu and this machine has no CUDA device"
    return None


def _group(snippet: Snippet) -> list[Snippet]:
    """The chain ``snippet`` belongs to, from its first snippet to the last one that continues it."""
    head = snippet.chain()[0]
    group = [head]
    for later in ALL_SNIPPETS[ALL_SNIPPETS.index(head) + 1 :]:
        if "continued" not in later.markers or later.page != head.page:
            break
        group.append(later)
    return group


def _done(snippet: Snippet) -> str:
    return f"<<doc snippet done: {snippet.id}>>"


def _python() -> str:
    venv_python = REPO / ".venv" / "bin" / "python"
    return str(venv_python) if venv_python.exists() else sys.executable


_RUNS: dict[str, tuple[Path, subprocess.CompletedProcess[str]]] = {}


def _run_group(snippet: Snippet, folder: Path) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """Run the snippet's whole chain once (up to the first snippet skipped here): one process, one folder."""
    group = _group(snippet)
    key = group[0].id
    if key not in _RUNS:
        parts = []
        for part in group:
            if _skip_reason(part) is not None:
                break
            file_name = next((marker[len("file=") :] for marker in part.markers if FILE_MARKER.match(marker)), None)
            if file_name is None:
                code = part.code
            else:  # written where the program runs, and compiled so that a syntax error fails this snippet
                code = (
                    f"__import__('pathlib').Path({file_name!r}).parent.mkdir(parents=True, exist_ok=True)\n"
                    f"__import__('pathlib').Path({file_name!r}).write_text({part.code!r}, encoding='utf-8')\n"
                    f"compile({part.code!r}, {file_name!r}, 'exec')\n"
                )
            parts.append(f"# --- {part.id}\n{code}print({_done(part)!r}, flush=True)\n")
        program = "\n".join(parts)
        workdir = folder / "work"
        workdir.mkdir()
        script = workdir / "doc_snippet.py"
        script.write_text(program, encoding="utf-8")
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "HF_HOME": str(folder / "hf-home"),
            "MICROFORMERS_NO_PROGRESS_BAR": "1",
        }
        env.pop("PYTHONPATH", None)
        command = [_python(), str(script)]
        try:
            result = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired as timeout:
            stdout = timeout.stdout.decode() if isinstance(timeout.stdout, bytes) else timeout.stdout or ""
            result = subprocess.CompletedProcess(command, -1, stdout, f"timed out after {TIMEOUT_S} s")
        _RUNS[key] = (script, result)
    return _RUNS[key]


def _param(snippet: Snippet):
    loads_smollm2 = any(alias in part.code for part in _group(snippet) for alias in SLOW_ALIASES)
    return pytest.param(snippet, id=snippet.id, marks=[pytest.mark.slow] if loads_smollm2 else [])


@pytest.mark.parametrize("snippet", [_param(s) for s in ALL_SNIPPETS])
def test_doc_snippet_runs(snippet: Snippet, tmp_path: Path):
    for part in snippet.chain():
        if (reason := _skip_reason(part)) is not None:
            pytest.skip(reason if part is snippet else f"{snippet.id} continues {reason}")
    script, result = _run_group(snippet, tmp_path)
    if _done(snippet) in result.stdout:
        return
    not_done = next(part for part in snippet.chain() if _done(part) not in result.stdout)
    if not_done is not snippet:
        pytest.fail(f"{snippet.id} continues {not_done.id}, which failed (see its own test)")
    pytest.fail(
        f"{snippet.id} failed (exit {result.returncode}):\n{snippet.code}\n"
        f"--- stderr (last 4000 characters) of {script} (the chain's snippets in order, run in its folder):\n"
        f"{result.stderr[-4000:]}",
        pytrace=False,
    )
