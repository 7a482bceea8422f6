"""A converted RoBERTa on rows that pack several documents (issue #75): each document's
logits are HF RoBERTa's on that document alone, positions restarting at padding_idx + 1."""

import torch
from helpers import ok
from hf_models import roberta_as_hf

from longformer_fs.checkpoint import load_model
from longformer_fs.modules.packing import document_positions

# Two rows: three documents, and two followed by padding.
ROWS = ((30, 47, 12), (20, 40))


def test_each_packed_document_is_hfs_roberta_on_it_alone(roberta_base, gpt2, tmp_path):
    ok("convert-roberta", roberta_base, "--out", tmp_path / "long", "--max-positions", "256")  # window 256: each whole
    theirs = roberta_as_hf(roberta_base, gpt2, tmp_path / "hf").double().eval()
    ours, task = load_model(tmp_path / "long" / "model.pt", tmp_path / "long")
    ours = ours.double()
    d = task.source_dictionary
    seq_len = max(sum(row) for row in ROWS)
    generator = torch.Generator().manual_seed(0)
    tokens = torch.full((len(ROWS), seq_len), d.pad())
    documents = torch.zeros(len(ROWS), seq_len, dtype=torch.long)
    spans = []
    for b, lengths in enumerate(ROWS):
        start = 0
        for i, length in enumerate(lengths):
            body = torch.randint(d.nspecial, len(d) - 1, (length,), generator=generator)
            body[0], body[-1] = d.bos(), d.eos()  # each document as RoBERTa reads one: <s> ... </s>
            tokens[b, start : start + length], documents[b, start : start + length] = body, i
            spans.append((b, start, start + length))
            start += length
        documents[b, start:] = len(lengths)
    with torch.no_grad():
        packed = ours(tokens, documents=documents)[0]
        leaky = ours(tokens)[0]
        for b, start, end in spans:
            alone = tokens[b : b + 1, start:end]
            want = theirs(input_ids=alone).logits[0]
            # fairseq computes GELU in float32 (fairseq.modules.gelu): agreement to 1e-7, not 1e-15.
            torch.testing.assert_close(packed[b, start:end], want, atol=1e-6, rtol=1e-5)
        b, start, end = spans[1]  # the second document: positions and keys of the first leak without boundaries
        assert (leaky[b, start:end] - packed[b, start:end]).abs().max() > 1e-2


def test_positions_restart_at_roberta_offset_in_each_document():
    documents = torch.tensor([[0, 0, 0, 1, 1, 2, 2, 2], [0, 0, 1, 1, 1, 1, 2, 2]])
    padding = torch.zeros_like(documents, dtype=torch.bool)
    padding[1, 6:] = True
    assert document_positions(documents, padding, 1).tolist() == [[2, 3, 4, 2, 3, 2, 3, 4], [2, 3, 2, 3, 4, 5, 1, 1]]
