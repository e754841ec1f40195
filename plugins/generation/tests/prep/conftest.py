"""The generation stand-ins (tiny causal LM, byte tokenizer) shared with microformers-generation's tests."""

from generation_stand_ins import *  # noqa: F403
