"""TrainingArguments defaults that depend on microformers.logging."""

from __future__ import annotations


def test_disable_tqdm_follows_microformers_logging(tmp_path):
    from microformers import TrainingArguments, logging

    assert TrainingArguments(output_dir=str(tmp_path)).disable_tqdm is False
    logging.disable_progress_bar()
    try:
        assert TrainingArguments(output_dir=str(tmp_path)).disable_tqdm is True
    finally:
        logging.enable_progress_bar()
    level = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        assert TrainingArguments(output_dir=str(tmp_path)).disable_tqdm is True
    finally:
        logging.set_verbosity(level)
