"""Test-only misbehaving plugins."""
