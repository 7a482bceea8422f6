"""``RelativeBandSelfAttention``: causal band attention with Transformer-XL positions.

The character LM's attention (paper §4): a per-layer window, dilation on some heads,
and relative positions with a content bias ``u`` and a position bias ``v``:

    score(i, j) = (q_i + u) . k_j + (q_i + v) . W_R R[i - j]

In band layout ``R[i - j]`` depends only on the band column (docs/design.md §1), so the
position term is a ``(H, W, D)`` table, never T x T.

Decoding one token at a time (``cache``, causal layers only), the layer keeps the keys and
values its next query can reach (:class:`~.cache.BandCache`) and the position rows of the
distances used so far, and computes the new query's band against them: the same scores as
the whole sequence would give that position, at a cost flat in the text's length.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn as nn

from .backends import check_name
from .cache import BandCache
from .dense import compute_dtype
from .functional import PreparesBand, band_attention_with_lse
from .relative import band_distances, head_distances, sinusoid
from .spec import BandSpec, PositionTerm
from .validation import check_layer, check_mask


class RelativeBandSelfAttention(PreparesBand, nn.Module):
    """Band self-attention with relative positions over ``(T, B, C)`` inputs.

    Args:
        embed_dim: model width ``C``; divisible by ``num_heads``.
        num_heads: heads ``H``.
        window: one-sided window ``w``.
        dilation: one int for all heads or one per head.
        causal: autoregressive (the character LM) or not.
        dropout: attention-probability dropout in training.
        backend: band backend (``"auto"`` takes the fastest that has the position term).
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        window: int,
        dilation: int | Sequence[int] = 1,
        causal: bool = True,
        dropout: float = 0.0,
        backend: str = "auto",
    ):
        super().__init__()
        self.head_dim, self.window, self.dilations, self.dropout = check_layer(
            embed_dim, num_heads, window, dilation, dropout
        )
        self.embed_dim, self.num_heads = embed_dim, num_heads
        check_name(backend)  # a bad name fails here, as LongformerSelfAttention's does
        self.causal, self.backend = bool(causal), backend
        self.qkv_proj = nn.Linear(embed_dim, 3 * embed_dim)
        self.pos_proj = nn.Linear(embed_dim, embed_dim, bias=False)  # W_R
        self.out_proj = nn.Linear(embed_dim, embed_dim)
        self.content_bias = nn.Parameter(torch.zeros(num_heads, self.head_dim))  # u
        self.position_bias = nn.Parameter(torch.zeros(num_heads, self.head_dim))  # v

    def extra_repr(self) -> str:
        return (
            f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, window={self.window}, "
            f"dilation={list(self.dilations)}, causal={self.causal}"
        )

    def position_table(self, window: int | None = None) -> torch.Tensor:
        """``(H, W, D)`` for a call with one-sided ``window`` (default: the layer's)."""
        window = self.window if window is None else window
        return self._project_distances(band_distances(window, self.dilations, self.causal, self.pos_proj.weight.device))

    def _project_distances(self, distances: torch.Tensor) -> torch.Tensor:
        """``(H, N, D)``: head h's D outputs of ``W_R`` applied to the sinusoids of its
        ``distances[h]`` (``(H, N)``): H*N*C*D work, not the H*N*C*C of projecting every
        head fully."""
        weight = self.pos_proj.weight.view(self.num_heads, self.head_dim, self.embed_dim)
        embedded = sinusoid(distances, self.embed_dim).to(weight)
        return torch.einsum("hnc,hdc->hnd", embedded, weight)

    def band_spec(self, seq_len: int) -> BandSpec:
        """The band call of a forward on ``seq_len`` tokens: the window clamped to ``T - 1``
        (columns past it only reach outside the sequence for every head: a long window, 8192
        in phase 1's top layer, would cost 8193 columns at any length); dropout in training."""
        window = min(self.window, max(seq_len - 1, 0))
        dropout = self.dropout if self.training else 0.0
        return BandSpec(window, self.dilations, self.causal, self.head_dim**-0.5, dropout, relative=True)

    def reach(self) -> int:
        """How many positions back the layer's queries look: ``w * max(d)``."""
        return self.window * max(self.dilations)

    def forward(
        self, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None, cache: BandCache | None = None
    ) -> torch.Tensor:
        """x: ``(T, B, C)`` -> ``(T, B, C)``; key_padding_mask: ``(B, T)``, True = padding.

        With ``cache`` (a causal layer decoding, unpadded): ``x`` holds the tokens after
        the ``cache.length`` already seen, whose keys and values the cache then keeps.
        """
        seq_len, batch, channels = x.shape
        if channels != self.embed_dim:
            raise ValueError(f"x: expected shape (T, B, {self.embed_dim}), got {tuple(x.shape)}")
        pad = check_mask(key_padding_mask, "key_padding_mask", batch, seq_len, x.device, "padding")
        q, k, v = (
            t.view(seq_len, batch, self.num_heads, self.head_dim).permute(1, 2, 0, 3)
            for t in self.qkv_proj(x).chunk(3, dim=-1)
        )
        if cache is not None:
            if not self.causal or pad is not None:
                raise ValueError("cache: incremental decoding takes a causal layer and unpadded tokens")
            if cache.length:  # after the first call: one query at a time against the cache
                out = torch.cat([self._step(q[:, :, i : i + 1], k, v, i, cache) for i in range(seq_len)], dim=2)
                return self.out_proj(out.permute(2, 0, 1, 3).reshape(seq_len, batch, channels).to(x.dtype))
            cache.store(k, v)  # the first tokens (a prompt): the whole band at once, below
        spec = self.band_spec(seq_len)
        position = PositionTerm(q + self.position_bias[:, None], self.position_table(spec.window))
        out, _ = band_attention_with_lse(
            q + self.content_bias[:, None], k, v, pad, spec, self.backend, position, self.prepared_band
        )
        if pad is not None:
            out = out.masked_fill(pad[:, None, :, None], 0.0)
        out = out.permute(2, 0, 1, 3).reshape(seq_len, batch, channels).to(x.dtype)
        return self.out_proj(out)

    def _lookback(self, first: int, end: int, device: torch.device) -> torch.Tensor:
        """``(H, end - first)`` long: each head's distances ``d_h * k`` for ``k`` in ``[first, end)``."""
        return head_distances(torch.arange(first, end, device=device), self.dilations)

    def _step(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, i: int, cache: BandCache) -> torch.Tensor:
        """Token ``i`` of the new ones (its query ``q``: ``(B, H, 1, D)``) after storing its
        key and value: its band over the cache, ``(B, H, 1, D)``."""
        cache.store(k[:, :, i : i + 1], v[:, :, i : i + 1])
        position = cache.length - 1
        steps = min(self.window, position) + 1  # look-backs k = 0..w, those before the text dropped below
        have = 0 if cache.position_rows is None else cache.position_rows.shape[1]
        if have < steps:  # the rows of new distances d_h * k, k = have..steps-1: each computed once
            rows = self._project_distances(self._lookback(have, steps, q.device))
            cache.position_rows = rows if have == 0 else torch.cat([cache.position_rows, rows], dim=1)
        lookback = self._lookback(0, steps, q.device)
        keys, values, valid = cache.gather(position, lookback)
        dtype = compute_dtype(q.dtype)
        content = torch.einsum("bhqd,bhkd->bhqk", (q + self.content_bias[:, None]).to(dtype), keys.to(dtype))
        table = cache.position_rows[:, :steps].to(dtype)
        position_term = torch.einsum("bhqd,hkd->bhqk", (q + self.position_bias[:, None]).to(dtype), table)
        scores = (content + position_term) * self.head_dim**-0.5
        scores = scores.masked_fill(~valid[None, :, None, :], float("-inf"))
        return torch.einsum("bhqk,bhkd->bhqd", scores.softmax(dim=-1), values.to(dtype)).to(q.dtype)
