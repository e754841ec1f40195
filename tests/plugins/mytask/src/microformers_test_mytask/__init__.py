"""Test-only plugin providing the ``my-task`` pipeline."""
