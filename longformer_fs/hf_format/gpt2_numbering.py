"""GPT-2's numbering of a byte-level BPE's pieces, which HF's files no longer hold.

GPT-2 numbered its pieces by how they arose: the 256 byte characters first, in the order
of its byte-to-character table (:func:`byte_characters`), then each merge's result, in
merge order (id ``256 + rank``), then ``<|endoftext|>`` (50256). :func:`gpt2_ids` numbers
any byte-level BPE that way, so the ``encoder.json`` and ``vocab.bpe`` written for a
released RoBERTa, Longformer, BART or LED are GPT-2's own.
"""

from __future__ import annotations

from ..conventions import MASK, SPECIAL_SYMBOLS


def byte_characters() -> list[str]:
    """The characters GPT-2's byte-level BPE writes the 256 bytes as, in GPT-2's id order:
    the printable Latin-1 bytes as themselves, then every other byte ``b`` as ``chr(256 + n)``
    for the ``n``-th of them."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in printable]
    return [chr(b) for b in printable] + [chr(256 + n) for n in range(len(others))]


def gpt2_ids(vocab: dict[str, int], merges: list[tuple[str, str]]) -> dict[str, int]:
    """Every piece of a byte-level BPE's ``vocab`` (piece -> model id; specials and ``<mask>``
    aside) with its id in GPT-2's numbering, given its ``merges`` in order: a byte
    character its place in :func:`byte_characters`, a merge's result ``256 + rank`` (its
    first merge), any other piece the next free ids, in model-id order."""
    numbered = {c: i for i, c in enumerate(byte_characters())}
    for rank, (left, right) in enumerate(merges):
        numbered.setdefault(left + right, 256 + rank)
    skipped = {*SPECIAL_SYMBOLS, MASK}
    ids, next_free = {}, 256 + len(merges)
    for piece, _ in sorted(vocab.items(), key=lambda item: item[1]):
        if piece in skipped:
            continue
        if piece in numbered:
            ids[piece] = numbered[piece]
        else:
            ids[piece], next_free = next_free, next_free + 1
    return ids
