"""Test-only plugin providing the ``least_likely`` generation strategy."""
