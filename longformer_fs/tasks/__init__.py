"""fairseq tasks of longformer-fs (registered on import)."""
