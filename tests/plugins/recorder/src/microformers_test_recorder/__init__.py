"""Test-only Trainer integration plugin."""
