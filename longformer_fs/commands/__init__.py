"""Small ``longformer-fs`` subcommands that are not benchmarks or data preparation."""
