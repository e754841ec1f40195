"""The fuzz/fault suite: every case in a memory-capped worker subprocess with a time limit (see fuzz.py).

CI runs a short deterministic plan; ``MICROFORMERS_FUZZ=long`` runs ten seeds of 150 cases per family.
"""

from __future__ import annotations

import os

from . import fuzz

LONG = os.environ.get("MICROFORMERS_FUZZ", "").lower() == "long"


def test_every_loader_fails_cleanly_or_accepts_documented_cases() -> None:
    seeds, per_family = (list(range(10)), 150) if LONG else ([0], 40)
    report = fuzz.run_all(fuzz.plan(seeds, per_family))
    assert report["failures"] == [], report["failures"][:10]
    assert set(report["counts"]) == set(fuzz.FAMILIES)
    for family, counts in report["counts"].items():
        assert counts.get("clean", 0) > 0, (family, counts)  # each family really reached the error paths
