"""fairseq criterions of longformer-fs (registered on import)."""
