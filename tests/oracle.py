"""Independent float64 oracle for Longformer attention, written from docs/design.md §1.

Deliberately naive: one query row at a time, key sets built by explicit Python
conditions, no code shared with ``longformer_fs``. Slow; use tiny shapes.
"""

from __future__ import annotations

import torch


def allowed_local_keys(i: int, seq_len: int, window: int, dilation: int, causal: bool) -> list[int]:
    """Keys j = i + d*k, k in [-w, w] ([-w, 0] causal), inside [0, T)."""
    upper = 0 if causal else window
    keys = []
    for j in range(seq_len):
        offset = j - i
        if offset % dilation == 0 and -window <= offset // dilation <= upper:
            keys.append(j)
    return keys


def _attend(query, keys, values, scale):
    scores = (keys @ query) * scale  # (n,)
    probs = torch.softmax(scores, dim=0)
    return probs @ values


def oracle_attention(
    q,
    k,
    v,
    window,
    dilations,
    causal=False,
    pad=None,
    glob=None,
    q_glob=None,
    k_glob=None,
    v_glob=None,
    scale=None,
    pos_query=None,
    pos_table=None,
    documents=None,
):
    """Longformer attention on ``(B, T, H, D)`` tensors, full semantics.

    Local rows: band keys (global keys removed) plus all global keys, local k/v.
    Global rows: all non-padded keys through the global q/k/v. Padded rows: 0.
    In causal mode no row ever sees a key after it, global or not.
    Optional relative-position term (band keys only): ``pos_query[b, i, h]`` (B, T, H, D)
    dotted with ``pos_table[h, (j - i) / d_h + w]``, scaled like the content score.
    Packed rows (``documents``, ``(B, T)`` ids): a row sees only keys of its own document,
    global ones included.
    """
    batch, seq_len, heads, head_dim = q.shape
    scale = head_dim**-0.5 if scale is None else scale
    pad = torch.zeros(batch, seq_len, dtype=torch.bool) if pad is None else pad.cpu()
    glob = torch.zeros(batch, seq_len, dtype=torch.bool) if glob is None else glob.cpu() & ~pad
    # The masks as Python booleans: a tensor indexed once per (row, key) cost seconds a call.
    pad_rows, glob_rows = pad.tolist(), glob.tolist()
    doc_rows = [[0] * seq_len] * batch if documents is None else documents.cpu().tolist()
    rows = []
    for b in range(batch):
        is_pad, is_glob, doc = pad_rows[b], glob_rows[b], doc_rows[b]
        for i in range(seq_len):
            visible = [j for j in range(seq_len) if not is_pad[j] and (not causal or j <= i) and doc[j] == doc[i]]
            head_outs = []
            for h in range(heads):
                if is_pad[i]:
                    head_outs.append(torch.zeros_like(q[b, i, h]))
                    continue
                if is_glob[i]:
                    idx = torch.tensor(visible)
                    head_outs.append(_attend(q_glob[b, i, h], k_glob[b, idx, h], v_glob[b, idx, h], scale))
                    continue
                band = set(allowed_local_keys(i, seq_len, window, dilations[h], causal))
                keys = [j for j in visible if (j in band and not is_glob[j]) or is_glob[j]]
                idx = torch.tensor(keys)
                if pos_query is None:
                    head_outs.append(_attend(q[b, i, h], k[b, idx, h], v[b, idx, h], scale))
                    continue
                columns = torch.tensor([(j - i) // dilations[h] + window for j in keys])
                scores = (k[b, idx, h] @ q[b, i, h] + pos_table[h, columns] @ pos_query[b, i, h]) * scale
                head_outs.append(torch.softmax(scores, dim=0) @ v[b, idx, h])
            rows.append(torch.stack(head_outs))
    return torch.stack(rows).view(batch, seq_len, heads, head_dim)


def oracle_layer(layer, x, pad=None, glob=None, documents=None):
    """The oracle applied to a LongformerSelfAttention's own weights; x is (T, B, C)."""
    seq_len, batch, channels = x.shape
    heads, head_dim = layer.num_heads, layer.head_dim

    def split(proj):
        return proj(x).transpose(0, 1).reshape(batch, seq_len, heads, head_dim)

    out = oracle_attention(
        split(layer.q_proj),
        split(layer.k_proj),
        split(layer.v_proj),
        layer.window,
        layer.dilations,
        layer.causal,
        pad,
        glob,
        split(layer.q_proj_global),
        split(layer.k_proj_global),
        split(layer.v_proj_global),
        documents=documents,
    )
    return layer.out_proj(out.reshape(batch, seq_len, channels).transpose(0, 1))
