"""What a causal band layer keeps between decoding steps: the keys and values its next
query can reach, in a ring buffer.

A head with one-sided window ``w`` and dilation ``d`` attends from position ``t`` to
``t, t - d, ..., t - w d``. So a layer never needs more than the last ``w * max(d) + 1``
positions (its *reach*), and the buffer holds at most that many, however long the text
grows: memory is flat in the generated length. Position ``p`` lives in slot
``p % capacity``; the buffer grows with the text until it is full, then wraps.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class BandCache:
    """One layer's keys and values for incremental decoding.

    Attributes:
        reach: the most positions the layer's queries look back, ``w * max(d)``.
        keys, values: ``(B, H, S, D)`` ring buffers, ``S <= reach + 1`` slots (empty
            until the first tokens are stored).
        length: tokens seen so far; position ``p`` is slot ``p % S`` once ``S`` stopped
            growing.
        position_rows: ``(H, K, D)``, a relative layer's position term for look-backs
            ``0..K-1`` (distance ``d_h * k``), computed once as the text reaches them.
    """

    reach: int
    keys: torch.Tensor | None = None
    values: torch.Tensor | None = None
    length: int = 0
    position_rows: torch.Tensor | None = None

    @property
    def capacity(self) -> int:
        return self.reach + 1

    def store(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Append positions ``length ..`` of ``keys``/``values`` ``(B, H, T, D)``, keeping the
        last ``capacity`` positions."""
        if self.keys is None:
            self.keys, self.values = (
                keys.new_zeros(keys.shape[:2] + (0, keys.shape[-1])),
                values.new_zeros(values.shape[:2] + (0, values.shape[-1])),
            )
        new = keys.shape[2]
        if self.keys.shape[2] < self.capacity:  # still growing: positions are in order from 0
            self.keys = torch.cat([self.keys, keys], dim=2)
            self.values = torch.cat([self.values, values], dim=2)
            self.length += new
            if self.keys.shape[2] > self.capacity:  # keep the last `capacity`, each in its slot
                self.keys, self.values = self._last_in_slots(self.keys), self._last_in_slots(self.values)
            return
        for step in range(new):  # full: overwrite the oldest slot
            slot = (self.length + step) % self.capacity
            self.keys[:, :, slot] = keys[:, :, step]
            self.values[:, :, slot] = values[:, :, step]
        self.length += new

    def _last_in_slots(self, ordered: torch.Tensor) -> torch.Tensor:
        """The last ``capacity`` positions of ``ordered`` (positions ``length - n .. length - 1``)
        laid out in their ring slots."""
        last = ordered[:, :, -self.capacity :]
        first = self.length - self.capacity
        return torch.roll(last, shifts=first % self.capacity, dims=2)

    def gather(self, position: int, steps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The keys and values ``steps`` positions before ``position`` (already stored).

        Args:
            steps: ``(H, K)`` long, per head the look-back of each column (``d_h * k``).

        Returns:
            keys, values ``(B, H, K, D)``, and ``valid`` ``(H, K)``: the position exists.
        """
        positions = position - steps.to(self.keys.device)
        valid = positions >= 0
        slots = positions.clamp(min=0)
        if self.keys.shape[2] >= self.capacity:
            slots = slots % self.capacity
        batch, _, _, dim = self.keys.shape
        index = slots[None, :, :, None].expand(batch, -1, -1, dim)
        return self.keys.gather(2, index), self.values.gather(2, index), valid

    def reorder(self, order: torch.Tensor) -> None:
        """Keep batch rows ``order`` (beam search's reordering of hypotheses)."""
        if self.keys is not None:
            self.keys = self.keys.index_select(0, order)
            self.values = self.values.index_select(0, order)
