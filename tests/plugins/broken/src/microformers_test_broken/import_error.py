"""Fails at import, as a plugin with a missing dependency would."""

import microformers_dependency_that_is_not_installed  # noqa: F401

MICROFORMERS_API_VERSION = 1
