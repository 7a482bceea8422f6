"""Evaluation protocols (plain PyTorch; checkpoint loading lives in the command)."""
