"""Test-only toy plugin."""
