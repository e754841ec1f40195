"""``AutoModelForZeroShotImageClassification``: the Auto class for image-text models' registered head."""

from __future__ import annotations

from microformers.auto import auto_class

__all__ = ["AutoModelForZeroShotImageClassification"]

AutoModelForZeroShotImageClassification = auto_class("AutoModelForZeroShotImageClassification")
