"""``BandSpec``: the static description of one band-attention call, and the signature
every backend implements (:class:`BandAttentionFn`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from .band import band_width


@dataclass(frozen=True)
class BandSpec:
    """What every backend needs besides the tensors.

    Attributes:
        window: one-sided window ``w >= 0`` (may exceed ``T``).
        dilations: one int >= 1 per head.
        causal: keys at or before the query only.
        scale: multiplies the scores (``1/sqrt(D)`` by default upstream).
        dropout_p: dropout on the probabilities; 0 outside training.
        relative: whether the call adds a relative-position term
            (:class:`PositionTerm`), which not every backend implements.
        padding_at_ends: the key mask, if any, pads only the ends of each row, as
            fairseq's and HF's batches do (``flash`` takes no other); False where a
            caller's mask may have holes.
        packed: the rows hold several documents (the call's ``documents``): no query
            sees a key of another document.
        max_documents: with ``packed``, a bound on the documents of a row when the caller
            knows one (a batch's collater counts them on the host): ``flash`` then lays
            out its segments with no read-back. None: unknown.
    """

    window: int
    dilations: tuple[int, ...]
    causal: bool
    scale: float
    dropout_p: float = 0.0
    relative: bool = False
    padding_at_ends: bool = True
    packed: bool = False
    max_documents: int | None = None

    def head_groups(self) -> dict[int, list[int]]:
        """Heads grouped by dilation, in order of first appearance."""
        groups: dict[int, list[int]] = {}
        for head, d in enumerate(self.dilations):
            groups.setdefault(d, []).append(head)
        return groups


@dataclass(frozen=True)
class PositionTerm:
    """A Transformer-XL relative-position term in band layout.

    The band score of query ``i`` and column ``c`` gains ``query[i] . table[h, c]``,
    scaled like the content score. Column ``c`` of head ``h`` is the key
    ``i + d_h * (c - w)``, so a table of distances ``d_h * (w - c)`` is all it takes:
    no relative shift and no T x T table.

    Attributes:
        query: ``(B, H, T, D)``, typically ``q + v_bias`` (the content score then uses
            ``q + u_bias``).
        table: ``(H, W, D)`` with ``W = band_width(window, causal)`` of the call.
    """

    query: torch.Tensor
    table: torch.Tensor

    def columns(self, window: int, effective: int, causal: bool) -> torch.Tensor:
        """The table for an effective (clamped) window: its columns are the middle ones."""
        start = window - effective
        return self.table[:, start : start + band_width(effective, causal)]


BandOutput = tuple[torch.Tensor, torch.Tensor]  # (out (B, H, T, D), lse (B, H, T))


class BandAttentionFn(Protocol):
    """A band backend's entry point; :mod:`longformer_fs.attention.backends` states the contract."""

    def __call__(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        key_mask: torch.Tensor | None,
        spec: BandSpec,
        position: PositionTerm | None = None,
        documents: torch.Tensor | None = None,
    ) -> BandOutput: ...


def refusal(backend: str, reasons: list[str]) -> str:
    """The one line a backend asked for by name raises when it cannot compute a call."""
    return f"backend: {backend!r} cannot compute this call: {'; '.join(reasons)}"


class BackendFailed(RuntimeError):
    """A backend failed on a call that its reasons allowed, in a way no check knows ahead
    (a compilation that failed, torch's recompile limit). A backend asked for by name
    raises it; ``auto`` records the failure and chooses again."""
