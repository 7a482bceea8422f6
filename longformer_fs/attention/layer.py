"""``LongformerSelfAttention``: sliding-window self-attention with global tokens.

Semantics (docs/design.md §1), for a sequence with global tokens ``G``:

- a local row attends to its band (global keys removed from it) plus every global key,
  in one softmax, through the local ``k``/``v`` projections;
- a global row attends to every non-padded key through ``q_proj_global``,
  ``k_proj_global`` and ``v_proj_global``, and its output replaces the row;
- padded rows output 0 (before ``out_proj``).

The band and the global-key columns are computed separately and merged through their
log-sum-exps (:func:`~.softmax.merge_attention`), which equals the single softmax and
lets the band come from any backend. The band keeps the global keys it reaches and the
columns take the others, so the band's mask is the padding alone: no backend sees a mask
with holes, and ``flash`` can take padding as segments.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from .backends import check_name
from .band import in_band, same_document
from .dense import float32_scores
from .functional import PreparesBand, band_attention_with_lse
from .softmax import masked_softmax_with_lse, merge_attention
from .spec import BandSpec
from .validation import check_documents, check_layer, check_mask


def global_token_index(global_mask: torch.Tensor, max_global: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions of global tokens, per row, in ``G`` slots: the largest count or a fixed bound.

    Args:
        global_mask: ``(B, T)`` bool.
        max_global: a static bound on the count per row, or None to use the largest
            count of this batch (at least 1). The count is data, so reading it stops
            ``torch.compile``'s graph and makes the host wait for the device; a bound keeps
            every shape static (a row over it fails an asynchronous check).

    Returns:
        ``index`` ``(B, G)`` long, distinct positions per row: its global tokens in
        ascending order, then (in the slots past its count) the first positions that are
        not global; and ``valid`` ``(B, G)`` bool marking the global ones.
    """
    counts = global_mask.sum(dim=1)
    if max_global is None:
        # At least one slot, so that the gathers of the global path always have a row to
        # read: a traced or exported graph also serves batches without a global token.
        g = counts.max().clamp(min=1).item()
        if torch.compiler.is_exporting():
            # An exported graph computes the count at run time: a size it may trust.
            torch._check(g >= 1)
            torch._check(g <= global_mask.shape[1])
    else:
        g = min(max_global, global_mask.shape[1])
        torch._assert_async((counts <= g).all(), "global_mask: a row has more global tokens than max_global")
    # Sorting positions with every non-global one moved past the end lists each row's
    # global positions first, in order, then the others (the keys are distinct: no stable
    # sort, which ONNX lacks). Distinct slots let the global rows be placed by a scatter.
    position = torch.arange(global_mask.shape[1], device=global_mask.device)
    key = torch.where(global_mask, position, position + global_mask.shape[1])
    index = torch.sort(key, dim=1).indices[:, :g]
    valid = torch.arange(g, device=global_mask.device)[None, :] < counts[:, None]
    return index, valid


@dataclass(frozen=True)
class GlobalTokens:
    """A batch's global tokens, found once for all the layers of a forward pass.

    The layers of one encoder share one global mask, so the encoder finds its tokens once
    (:meth:`find`) and hands them to each layer: the count per row is read back from the
    device once a forward, not once a layer, and an exported graph sorts the positions
    once, with one run-time size for all its layers.

    Attributes:
        mask: ``(B, T)`` bool, the global tokens, padding removed.
        index: ``(B, G)`` long, their positions in :func:`global_token_index`'s slots.
        valid: ``(B, G)`` bool, the slots that hold a global token.
    """

    mask: torch.Tensor
    index: torch.Tensor
    valid: torch.Tensor

    @classmethod
    def find(
        cls, mask: torch.Tensor | None, padding: torch.Tensor | None = None, bound: int | None = None
    ) -> GlobalTokens | None:
        """The global tokens of ``mask`` ``(B, T)`` bool outside ``padding`` ``(B, T)`` bool,
        in at most ``bound`` slots a row (None: the batch's largest count).

        Returns None for no mask, and, outside compilation and without a bound, for a
        mask without a global token (a read-back; a bound avoids it): the layers then
        skip the global path.
        """
        if mask is None:
            return None
        if padding is not None:
            mask = mask & ~padding
        if bound is None and not torch.compiler.is_compiling() and not bool(mask.any()):
            return None
        return cls(mask, *global_token_index(mask, bound))


def band_reaches(offset: torch.Tensor, window: int, dilations: tuple[int, ...], causal: bool) -> torch.Tensor:
    """Whether a head's band holds a key ``offset`` positions from its query.

    Args:
        offset: key position minus query position, any shape ``(B, 1, ...)``.

    Returns:
        bool, ``offset``'s shape with the head dimension 1 when every head has one
        dilation, else ``(B, H, ...)``.
    """
    per_dilation = {d: in_band(offset, window, d, causal) for d in set(dilations)}
    if len(per_dilation) == 1:
        return next(iter(per_dilation.values()))
    return torch.cat([per_dilation[d] for d in dilations], dim=1)


class LongformerSelfAttention(PreparesBand, nn.Module):
    """Longformer self-attention over fairseq's ``(T, B, C)`` layout.

    Args:
        embed_dim: model width ``C``; must be divisible by ``num_heads``.
        num_heads: attention heads ``H``.
        window: one-sided window ``w`` (the paper's "window size" is ``2w``).
        dilation: ``d >= 1`` for all heads, or one per head.
        causal: autoregressive mode (keys at or before the query only).
        dropout: dropout on attention probabilities, in training mode.
        backend: band backend, see :func:`~.functional.banded_attention`.
        max_global: a static bound on the global tokens of a row, or None. With a
            bound, global attention has no data-dependent shape, so ``torch.compile``
            traces the layer in one graph, and no value is read back from the device;
            a row over the bound is an error.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        window: int,
        dilation: int | Sequence[int] = 1,
        causal: bool = False,
        dropout: float = 0.0,
        backend: str = "auto",
        max_global: int | None = None,
    ):
        super().__init__()
        self.head_dim, self.window, self.dilations, self.dropout = check_layer(
            embed_dim, num_heads, window, dilation, dropout
        )
        if max_global is not None and (not isinstance(max_global, int) or max_global < 1):
            raise ValueError(f"max_global: expected a positive int or None, got {max_global!r}")
        self.max_global = max_global
        check_name(backend)
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.causal = bool(causal)
        self.backend = backend
        self.scale = self.head_dim**-0.5

        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)
        # The paper initialises the global projections as copies of the local ones.
        self.q_proj_global = copy.deepcopy(self.q_proj)
        self.k_proj_global = copy.deepcopy(self.k_proj)
        self.v_proj_global = copy.deepcopy(self.v_proj)

    def extra_repr(self) -> str:
        return (
            f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, window={self.window}, "
            f"dilation={list(self.dilations)}, causal={self.causal}, backend={self.backend!r}"
            + ("" if self.max_global is None else f", max_global={self.max_global}")
        )

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        """``(L, B, C)`` -> ``(B, H, L, D)``."""
        length, batch, _ = x.shape
        return x.view(length, batch, self.num_heads, self.head_dim).permute(1, 2, 0, 3)

    def forward(
        self,
        x: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        global_mask: torch.Tensor | GlobalTokens | None = None,
        max_global: int | None = None,
        documents: torch.Tensor | None = None,
        max_documents: int | None = None,
    ) -> torch.Tensor:
        """
        Args:
            x: ``(T, B, C)``.
            key_padding_mask: ``(B, T)`` bool, True marks padding, at the ends of a row as
                fairseq and HF pad (the ``flash`` backend takes no other).
            global_mask: ``(B, T)`` bool, True marks tokens with global attention; the
                count may differ between rows and may be zero. Or the tokens already found
                for this batch (:class:`GlobalTokens`, with this ``key_padding_mask``),
                which a model shares between its layers.
            max_global: a bound on this call's global tokens per row, in place of the
                layer's ``max_global`` (a model that knows one from its inputs); unused
                with :class:`GlobalTokens`, which were found under their own bound.
            documents: ``(B, T)`` integer document ids of rows that pack several documents
                (contiguous, ids not decreasing along a row), or None: one a row. Each
                document is attended as if alone: the band, and its global tokens, which
                are global within their own document only.
            max_documents: with ``documents``, a bound on the documents of a row when the
                caller knows one (a packed batch counts them on the host); the ``flash``
                backend then reads nothing back.

        Returns:
            ``(T, B, C)`` in the dtype of ``x``.
        """
        if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.shape[-1] != self.embed_dim:
            shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"x: expected shape (T, B, {self.embed_dim}), got {shape}")
        seq_len, batch, _ = x.shape
        pad = check_mask(key_padding_mask, "key_padding_mask", batch, seq_len, x.device, "padding")
        documents = check_documents(documents, batch, seq_len, x.device)
        if isinstance(global_mask, GlobalTokens):
            check_mask(global_mask.mask, "global_mask", batch, seq_len, x.device, "global token")
            tokens = global_mask
        else:
            glob = check_mask(global_mask, "global_mask", batch, seq_len, x.device, "global token")
            tokens = GlobalTokens.find(glob, pad, self.max_global if max_global is None else max_global)
        dropout_p = self.dropout if self.training else 0.0

        q, k, v = (self._heads(proj(x)) for proj in (self.q_proj, self.k_proj, self.v_proj))
        spec = self.band_spec(seq_len, packed=documents is not None, max_documents=max_documents)
        out, lse = band_attention_with_lse(
            q, k, v, pad, spec, self.backend, prepared=self.prepared_band, documents=documents
        )

        bias = self.out_proj.bias
        if tokens is not None:
            out = self._add_global(x, q, k, v, out, lse, tokens, pad, dropout_p, documents)
        elif self.training and torch.is_grad_enabled():
            bias = bias + self._touch_global_projections(x)  # on the (C,) bias: free
        if pad is not None:
            out = out.masked_fill(pad[:, None, :, None], 0.0)
        out = out.permute(2, 0, 1, 3).reshape(seq_len, batch, self.embed_dim).to(x.dtype)
        return F.linear(out, self.out_proj.weight, bias)

    def band_spec(self, seq_len: int, packed: bool = False, max_documents: int | None = None) -> BandSpec:
        """The band call of a forward on ``seq_len`` tokens (dropout in training only), of
        rows that pack several documents (at most ``max_documents`` a row, when known)
        when ``packed``."""
        dropout = self.dropout if self.training else 0.0
        return BandSpec(
            self.window, self.dilations, self.causal, self.scale, dropout, packed=packed,
            max_documents=max_documents if packed else None,
        )  # fmt: skip

    def global_projections(self) -> tuple[nn.Linear, nn.Linear, nn.Linear]:
        return self.q_proj_global, self.k_proj_global, self.v_proj_global

    def _touch_global_projections(self, x: torch.Tensor) -> torch.Tensor:
        """A zero that depends on every trainable global projection, for batches without
        global tokens: DistributedDataParallel (without find_unused_parameters) expects
        a gradient for every trainable parameter. The projections run on zero rows, so
        this costs nothing; frozen projections are left out."""
        touched = [proj(x[:0]).sum() for proj in self.global_projections() if proj.weight.requires_grad]
        return sum(touched, x.new_zeros((), dtype=self.out_proj.bias.dtype))

    def _add_global(self, x, q, k, v, out, lse, tokens: GlobalTokens, pad, dropout_p, documents=None):
        """Merge the global-key columns into local rows, then overwrite global rows.

        The band itself holds every unpadded key in reach, global ones too (through the
        local projections, as a local row sees them), so each local row takes the global
        keys its band does not reach. The band's mask is then the padding alone, which
        every backend takes at full speed. In packed rows (``documents``), a global token
        and the rows it meets are of one document.
        """
        index, valid = tokens.index, tokens.valid
        batch_idx = torch.arange(x.shape[1], device=x.device)[:, None]
        pos = torch.arange(x.shape[0], device=x.device)

        # Local rows: the global keys out of the band's reach, through the local projections.
        # In causal mode a query sees only the global keys at or before it.
        offset = index[:, None, None, :] - pos[None, None, :, None]  # (B, 1, T, G)
        allowed = valid[:, None, None, :] & ~band_reaches(offset, self.window, self.dilations, self.causal)
        if self.causal:
            allowed = allowed & (offset <= 0)
        glob_docs = None
        if documents is not None:  # packed rows: a global key only for rows of its document
            glob_docs = documents.gather(1, index)  # (B, G)
            allowed = allowed & same_document(documents, glob_docs)
        k_glob, v_glob = k[batch_idx, :, index].transpose(1, 2), v[batch_idx, :, index].transpose(1, 2)
        probs, lse_g = masked_softmax_with_lse(float32_scores(q, k_glob, self.scale), allowed)
        if dropout_p > 0:
            probs = F.dropout(probs, dropout_p)
        out_g = torch.matmul(probs, v_glob.to(probs.dtype))  # (B, H, T, D), the merge's precision
        out, _ = merge_attention(out, lse, out_g, lse_g)

        # Global rows: every non-padded key, through the global projections (SDPA: float32
        # accumulation without float32 copies). A slot past a row's count attends every
        # key too, so that no row is empty; it is never placed.
        x_rows = x.transpose(0, 1)[batch_idx, index].transpose(0, 1)  # (G, B, C)
        q_rows = self._heads(self.q_proj_global(x_rows))
        k_all, v_all = self._heads(self.k_proj_global(x)), self._heads(self.v_proj_global(x))
        allowed = torch.ones_like(tokens.mask) if pad is None else ~pad
        allowed = allowed[:, None, None, :]  # (B, 1, 1, T)
        if self.causal:
            allowed = allowed & (pos[None, None, None, :] <= index[:, None, :, None])
        if documents is not None:
            allowed = allowed & same_document(glob_docs, documents)
        allowed = allowed | ~valid[:, None, :, None]
        rows = F.scaled_dot_product_attention(
            q_rows, k_all, v_all, attn_mask=allowed, dropout_p=dropout_p, scale=self.scale
        )  # (B, H, G, D)

        # Each global row to its position: a scatter over the G distinct slots of each row,
        # whose gradient is a gather (no accumulation over a sequence-long index); the
        # slots past a row's count put back what was there.
        slots = index[:, None, :, None].expand(-1, out.shape[1], -1, out.shape[-1])
        rows = torch.where(valid[:, None, :, None], rows.to(out.dtype), out.gather(2, slots))
        return out.scatter(2, slots, rows)
