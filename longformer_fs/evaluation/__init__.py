"""Evaluation: the paper's protocols and metrics, and loading checkpoints to run them.

- :mod:`.sliding_window`, :mod:`.masked_lm`: protocols in plain PyTorch;
- :mod:`.checkpoint`, :mod:`.char_lm`: fairseq checkpoints scored with them.
"""
