"""``MarianConfig``: the ``config.json`` of ``model_type: marian`` checkpoints (Helsinki-NLP opus-mt ...).

Imports no torch, so ``AutoConfig`` stays cheap.
"""

from __future__ import annotations

from typing import Any

from microformers_bart import BartConfig


class MarianConfig(BartConfig):
    """BART's settings with Marian's defaults, plus ``decoder_vocab_size`` and ``share_encoder_decoder_embeddings``.

    ``decoder_vocab_size`` defaults to ``vocab_size``; with ``share_encoder_decoder_embeddings`` false the encoder
    and the decoder have their own token embeddings (separate vocabularies).
    """

    model_type = "marian"
    default_num_labels = None

    def __init__(
        self,
        vocab_size: int = 58101,
        decoder_vocab_size: int | None = None,
        share_encoder_decoder_embeddings: bool = True,
        pad_token_id: int | None = 58100,
        eos_token_id: int | list[int] | None = 0,
        bos_token_id: int | None = None,
        decoder_start_token_id: int | None = 58100,
        forced_eos_token_id: int | list[int] | None = 0,
        **kwargs: Any,
    ) -> None:
        self.decoder_vocab_size = decoder_vocab_size or vocab_size
        self.share_encoder_decoder_embeddings = share_encoder_decoder_embeddings
        super().__init__(
            vocab_size=vocab_size,
            pad_token_id=pad_token_id,
            eos_token_id=eos_token_id,
            bos_token_id=bos_token_id,
            decoder_start_token_id=decoder_start_token_id,
            forced_eos_token_id=forced_eos_token_id,
            **kwargs,
        )
