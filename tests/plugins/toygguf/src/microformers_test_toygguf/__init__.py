"""Test-only plugin: a GGUF mapping for the toy architecture."""
