"""Plain-PyTorch model building blocks (no fairseq imports)."""
