"""A toy third-party quantizer (test only)."""
