"""What a causal band layer keeps between decoding steps: the keys and values its next
query can reach, in a ring buffer.

A head with one-sided window ``w`` and dilation ``d`` attends from position ``t`` to
``t, t - d, ..., t - w d``. So a layer never needs more than the last ``w * max(d) + 1``
positions (its *reach*), and the buffer holds at most that many, however long the text
grows: memory is flat in the generated length. Position ``p`` lives in slot
``p % capacity``; the buffer grows with the text (doubling) until it is full, then wraps.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class BandCache:
    """One layer's keys and values for incremental decoding.

    Attributes:
        reach: the most positions the layer's queries look back, ``w * max(d)``.
        keys, values: ``(B, H, S, D)`` ring buffers of ``S <= reach + 1`` slots (empty
            until the first tokens are stored); position ``p`` is slot ``p % (reach + 1)``.
        length: tokens seen so far.
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
        last ``capacity`` positions, each in its slot."""
        new = keys.shape[2]
        if self.keys is None:
            self.keys = keys.new_zeros(keys.shape[:2] + (0, keys.shape[-1]))
            self.values = values.new_zeros(values.shape[:2] + (0, values.shape[-1]))
        needed = min(self.length + new, self.capacity)
        if needed > self.keys.shape[2]:  # grow by doubling, one copy each time, up to capacity
            size = min(self.capacity, max(needed, 2 * self.keys.shape[2]))
            grow = (0, 0, 0, size - self.keys.shape[2])
            self.keys, self.values = F.pad(self.keys, grow), F.pad(self.values, grow)
        first = max(0, new - self.capacity)  # what would be overwritten at once is never written
        positions = torch.arange(self.length + first, self.length + new, device=keys.device)
        self.keys.index_copy_(2, positions % self.capacity, keys[:, :, first:])
        self.values.index_copy_(2, positions % self.capacity, values[:, :, first:])
        self.length += new

    def gather(self, position: int, steps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The keys and values ``steps`` positions before ``position`` (already stored).

        Args:
            steps: ``(H, K)`` long, per head the look-back of each column (``d_h * k``).

        Returns:
            keys, values ``(B, H, K, D)``, and ``valid`` ``(H, K)``: the position exists.
        """
        positions = position - steps.to(self.keys.device)
        valid = positions >= 0
        slots = positions.clamp(min=0) % self.capacity  # while growing, a position is its slot
        batch, heads, held, dim = self.keys.shape
        # One index_select of whole D-rows over the heads' slots laid end to end: several
        # times faster than gather's element-wise index, and the step's largest cost.
        rows = (torch.arange(heads, device=slots.device)[:, None] * held + slots).reshape(-1)
        shape = (batch, heads, slots.shape[1], dim)

        def pick(buffer: torch.Tensor) -> torch.Tensor:
            return buffer.reshape(batch, heads * held, dim).index_select(1, rows).view(shape)

        return pick(self.keys), pick(self.values), valid

    def reorder(self, order: torch.Tensor) -> None:
        """Keep batch rows ``order`` (beam search's reordering of hypotheses)."""
        if self.keys is not None:
            self.keys = self.keys.index_select(0, order)
            self.values = self.values.index_select(0, order)
