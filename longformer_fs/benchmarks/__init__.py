"""Benchmarks behind ``longformer-fs bench``; they print ratios measured side by side."""
