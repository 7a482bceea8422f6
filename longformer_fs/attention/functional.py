"""Functional Longformer attention: :func:`banded_attention`.

Semantics (docs/design.md §1): query ``i`` of head ``h`` attends to keys ``i + d_h * k``,
``k`` in ``[-w, w]`` (``[-w, 0]`` when causal), inside ``[0, T)`` and not padded.
Softmax runs in fp32 (or fp64) whatever the input dtype; padded query rows give 0.
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Sequence

import torch

from .backends import backend_for, check_name, get_backend, record_failure
from .spec import BackendFailed, BandSpec, PositionTerm
from .validation import check_dilation, check_documents, check_mask, check_qkv, check_scale, check_window


def band_attention_with_lse(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    key_mask: torch.Tensor | None,
    spec: BandSpec,
    backend: str = "auto",
    position: PositionTerm | None = None,
    prepared: object | None = None,
    documents: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Band attention in heads-first layout, returning the log-normaliser too.

    Arguments are already validated; see :mod:`.backends` for the contract. Used by
    :class:`~longformer_fs.attention.layer.LongformerSelfAttention` to merge the band
    with global keys, and by language models that add a relative-position term
    (``position``; then ``spec.relative`` must be True). ``prepared``: what the backend's
    ``prepare`` built for this call (:func:`prepare_call`), or None. ``documents``:
    ``(B, T)`` document ids of packed rows, given exactly when ``spec.packed``.
    """
    if (position is not None) != spec.relative:
        raise ValueError("position: give a PositionTerm exactly when spec.relative is True")
    if (documents is not None) != spec.packed:
        raise ValueError("documents: give document ids exactly when spec.packed is True")
    if q.shape[2] == 0:
        return q.new_zeros(q.shape), q.new_zeros(q.shape[:3])
    chosen = get_backend(backend, spec, q)
    extra = {} if documents is None else {"documents": documents}
    while True:
        try:
            if prepared is not None and chosen.prepare is not None:
                return chosen.fn(q, k, v, key_mask, spec, position, prepared=prepared, **extra)
            return chosen.fn(q, k, v, key_mask, spec, position, **extra)
        except BackendFailed as err:
            if backend != "auto":
                raise  # a backend asked for by name is that backend, or an error
            chosen, prepared = record_failure(chosen.name, spec, q, err), None


def prepare_call(
    backend: str, spec: BandSpec, seq_len: int, padded: bool, device: torch.device, dtype: torch.dtype, head_dim: int
) -> object | None:
    """What ``backend`` (a name, or ``auto``) reads for a call of ``spec`` on ``seq_len`` tokens,
    built now: a compiled layer builds it before its graph runs and hands it to the call as
    ``prepared`` (traced inside, it would be built again at every call). None: nothing to build."""
    chosen = backend_for(backend, spec, device, dtype, head_dim)
    return None if chosen.prepare is None else chosen.prepare(seq_len, spec, padded, device)


class PreparesBand:
    """A layer whose band call can be prepared before a compiled region runs it
    (:func:`prepare_call`): it says its call's :meth:`band_spec`, and its forward hands
    ``self.prepared_band`` to :func:`band_attention_with_lse`."""

    prepared_band: object | None = None  # set only inside band_prepared
    backend: str
    head_dim: int

    def band_spec(self, seq_len: int) -> BandSpec:
        raise NotImplementedError

    @contextlib.contextmanager
    def band_prepared(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None) -> Iterator[None]:
        """Inside, the next forward on ``x`` ``(T, B, C)`` takes its band's per-kind inputs
        (flex's tile lists) built here, before the compiled graph that runs it."""
        spec = self.band_spec(x.shape[0])
        self.prepared_band = prepare_call(
            self.backend, spec, x.shape[0], key_padding_mask is not None, x.device, x.dtype, self.head_dim
        )
        try:
            yield
        finally:
            self.prepared_band = None


def banded_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    window: int,
    dilation: int | Sequence[int] = 1,
    causal: bool = False,
    key_padding_mask: torch.Tensor | None = None,
    scale: float | None = None,
    backend: str = "auto",
    documents: torch.Tensor | None = None,
) -> torch.Tensor:
    """Sliding-window (optionally dilated, causal) attention.

    Args:
        q, k, v: ``(B, T, H, D)``. Any ``T``: padding to tile sizes is internal.
        window: one-sided window ``w >= 0``; ``w >= T`` is full (or causal) attention.
        dilation: ``d >= 1``, one int for all heads or one per head.
        causal: attend only to keys at or before the query.
        key_padding_mask: ``(B, T)`` bool, True marks padding (never attended; those
            query rows return 0). Anywhere in a row, except with ``backend="flash"``,
            which takes padding at the row ends only.
        scale: score multiplier; None means ``1 / sqrt(D)``.
        backend: ``"auto"`` (the fastest available here), or a name of
            :data:`~.backends.BACKENDS`: ``"flash"``, ``"flex"``, ``"kernel"``, ``"chunks"``,
            or ``"reference"`` (dense, tests only).
        documents: ``(B, T)`` integer document ids, for rows that pack several documents:
            no query sees a key of another document, as if each ran alone. Positions of a
            document are contiguous and the ids do not decrease along a row. None: one
            document a row.

    Returns:
        ``(B, T, H, D)`` in the dtype of ``q``.
    """
    check_qkv(q, k, v)
    batch, seq_len, heads, head_dim = q.shape
    window = check_window(window)
    dilations = check_dilation(dilation, heads)
    scale = check_scale(scale, head_dim)
    pad = check_mask(key_padding_mask, "key_padding_mask", batch, seq_len, q.device, "padding")
    documents = check_documents(documents, batch, seq_len, q.device)
    check_name(backend)  # fail on a bad name before doing any work

    # A mask given here may have holes anywhere (the layers' masks are fairseq's padding), so
    # auto passes over flash; asked for by name, flash takes it and checks it on the device.
    spec = BandSpec(
        window, dilations, bool(causal), scale, padding_at_ends=pad is None or backend == "flash",
        packed=documents is not None,
    )  # fmt: skip
    out, _ = band_attention_with_lse(*(x.transpose(1, 2) for x in (q, k, v)), pad, spec, backend, documents=documents)
    if pad is not None:
        out = out.masked_fill(pad[:, None, :, None], 0.0)
    return out.transpose(1, 2).to(q.dtype)
