"""Terminal chat and one-shot generation on top of the microformers kernel."""
