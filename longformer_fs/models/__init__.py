"""fairseq models of longformer-fs (registered on import)."""
