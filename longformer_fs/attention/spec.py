"""``BandSpec``: the static description of one band-attention call."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BandSpec:
    """What every backend needs besides the tensors.

    Attributes:
        window: one-sided window ``w >= 0`` (may exceed ``T``).
        dilations: one int >= 1 per head.
        causal: keys at or before the query only.
        scale: multiplies the scores (``1/sqrt(D)`` by default upstream).
        dropout_p: dropout on the probabilities; 0 outside training.
    """

    window: int
    dilations: tuple[int, ...]
    causal: bool
    scale: float
    dropout_p: float = 0.0

    def head_groups(self) -> dict[int, list[int]]:
        """Heads grouped by dilation, in order of first appearance."""
        groups: dict[int, list[int]] = {}
        for head, d in enumerate(self.dilations):
            groups.setdefault(d, []).append(head)
        return groups
