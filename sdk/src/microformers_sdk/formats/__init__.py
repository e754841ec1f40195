"""The sharding helpers a plugin's checkpoint format uses in its ``save``, re-exported from the kernel.

The safetensors and legacy ``.bin`` formats themselves are the kernel's (:mod:`microformers.formats`);
this module keeps ``microformers_sdk.formats.parse_size`` and friends importable for plugins.
"""

from __future__ import annotations

from microformers.formats import parse_size, plan_shards, save_sharded, shard_file_names

__all__ = ["parse_size", "plan_shards", "save_sharded", "shard_file_names"]
