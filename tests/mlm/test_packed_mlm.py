"""``longformer_masked_lm --pack-documents`` (issue #75): fairseq's complete_doc blocks packed
first-fit into full rows, each row's document ids in ``net_input``, trained by fairseq-train."""

import math
import random

import numpy as np
import pytest
import torch
from conftest import bpe_args
from helpers import ON_CPU, TINY_ROBERTA, USER_DIR, fairseq, fairseq_json_logs, ok

from longformer_fs.tasks.packed_documents import PADDED_DOCUMENT, first_fit

TOKENS_PER_SAMPLE = 128


def naive_first_fit(sizes, capacity):
    """First-fit decreasing as written in a textbook: the oracle of the tree-based one."""
    rows, free = [], []
    for item in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        for row, room in enumerate(free):
            if room >= sizes[item]:
                rows[row].append(item)
                free[row] -= sizes[item]
                break
        else:
            rows.append([item])
            free.append(capacity - sizes[item])
    return rows


@pytest.mark.parametrize("seed", range(4))
def test_first_fit_is_the_textbook_one(seed):
    rng = np.random.default_rng(seed)
    sizes = np.minimum(rng.lognormal(3.5, 1.0, 300).astype(int) + 1, 128)
    rows = first_fit(sizes, 128)
    assert [row.tolist() for row in rows] == naive_first_fit(sizes.tolist(), 128)
    assert sorted(i for row in rows for i in row) == list(range(len(sizes)))
    assert max(int(sizes[row].sum()) for row in rows) <= 128
    with pytest.raises(ValueError, match="does not fit a row of 128"):
        first_fit(np.array([129]), 128)


@pytest.fixture(scope="module")
def documents(gpt2, tmp_path_factory):
    """``prep docs`` of 60 documents whose lengths are long-tailed, a few past a row."""
    root = tmp_path_factory.mktemp("packed")
    rng = random.Random(0)
    words = "the band of each token covers its neighbours and global tokens see the whole sequence".split()
    (root / "txt").mkdir()
    for i in range(60):
        n = min(int(rng.lognormvariate(3.2, 0.9)) + 3, 400)
        (root / "txt" / f"{i:02d}.txt").write_text(" ".join(rng.choice(words) for _ in range(n)) + ".\n")
    ok("prep", "docs", "--source", f"docs=txt:{root / 'txt'}", *bpe_args(gpt2), "--workers", "1", "--out",
       root / "data")  # fmt: skip
    return root / "data"


def setup(data, pack: bool, break_mode: str = "complete_doc"):
    from fairseq.tasks import TASK_REGISTRY  # noqa: F401 (the plugin's tasks are registered on import)

    import longformer_fs.tasks  # noqa: F401
    from longformer_fs.tasks.masked_lm import LongformerMaskedLMConfig, LongformerMaskedLMTask

    cfg = LongformerMaskedLMConfig(data=str(data), tokens_per_sample=TOKENS_PER_SAMPLE, sample_break_mode=break_mode,
                                   pack_documents=pack, seed=1)  # fmt: skip
    task = LongformerMaskedLMTask.setup_task(cfg)
    task.load_dataset("train")
    return task, task.dataset("train")


def test_packed_rows_hold_every_complete_doc_block_once_and_say_whose_tokens_are_whose(documents):
    unpacked_task, unpacked = setup(documents, pack=False)
    task, packed = setup(documents, pack=True)
    d = task.source_dictionary
    blocks = unpacked_task._load_dataset_split("train", 1, False)  # complete_doc blocks with <s>, unmasked
    rows = task._packing
    assert len(packed) == len(rows) and len(unpacked) == len(blocks)
    # Full rows, where complete_doc pads: within two rows of the fewest the tokens need.
    assert len(rows) <= -(-int(rows.sizes.sum()) // TOKENS_PER_SAMPLE) + 2
    assert np.mean(rows.sizes) > 0.9 * TOKENS_PER_SAMPLE
    pieces = []
    for i in range(len(rows)):
        tokens, ids = rows[i], rows.documents(i)
        assert len(ids) == len(tokens) <= TOKENS_PER_SAMPLE and ids.tolist() == sorted(ids.tolist())
        for doc in ids.unique().tolist():
            piece = tokens[ids == doc]
            assert piece[0] == d.bos()  # each packed document as RoBERTa reads one: <s> ...
            pieces.append(tuple(piece.tolist()))
    # fairseq's complete_doc keeps a sentence longer than a block whole: such a block is cut
    # at the row's length, each later piece with its own <s>.
    expected = []
    for i in range(len(blocks)):
        block = blocks[i].tolist()
        expected.append(tuple(block[:TOKENS_PER_SAMPLE]))
        for start in range(TOKENS_PER_SAMPLE, len(block), TOKENS_PER_SAMPLE - 1):
            expected.append((d.bos(), *block[start : start + TOKENS_PER_SAMPLE - 1]))
    assert any(len(blocks[i]) > TOKENS_PER_SAMPLE for i in range(len(blocks)))  # the case is exercised
    assert sorted(pieces) == sorted(expected)
    batch = packed.collater([packed[i] for i in range(4)])
    ids, padding = batch["net_input"]["documents"], batch["net_input"]["src_tokens"].eq(d.pad())
    assert ids[padding].eq(PADDED_DOCUMENT).all() and not ids[~padding].eq(PADDED_DOCUMENT).any()


def test_fairseq_train_trains_on_packed_rows_and_each_document_scores_as_alone(documents, tmp_path):
    log = fairseq("fairseq-train", documents, "--user-dir", USER_DIR, "--task", "longformer_masked_lm",
                  "--pack-documents", "--criterion", "masked_lm", "--arch", "longformer_roberta_base", *TINY_ROBERTA,
                  "--attention-window", "16", "--max-positions", str(TOKENS_PER_SAMPLE), "--tokens-per-sample",
                  str(TOKENS_PER_SAMPLE), "--optimizer", "adam", "--lr", "1e-3", "--batch-size", "4",
                  "--max-update", "3", "--save-dir", tmp_path / "save", "--no-epoch-checkpoints",
                  "--disable-validation", *ON_CPU, "--log-format", "json", "--log-interval", "1")  # fmt: skip
    losses = [float(entry["loss"]) for _, entry in fairseq_json_logs(log, ("train_inner",))]
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses), log[-2000:]

    # The trained model on a batch as the task makes it: each document's logits are the
    # model's on that document alone, and without the ids they are not.
    from longformer_fs.checkpoint import load_model

    model, _ = load_model(tmp_path / "save" / "checkpoint_last.pt", documents)
    task, packed = setup(documents, pack=True)
    shared = [i for i in range(len(packed)) if len(task._packing.documents(i).unique()) > 2][:3]  # rows of 3+
    assert len(shared) == 3
    net_input = packed.collater([packed[i] for i in shared])["net_input"]
    with torch.no_grad():
        packed_logits = model(net_input["src_tokens"], documents=net_input["documents"])[0]
        leaky = model(net_input["src_tokens"])[0]
        ids = net_input["documents"]
        for row in range(len(ids)):
            for doc in ids[row].unique().tolist():
                if doc == PADDED_DOCUMENT:
                    continue
                where = ids[row] == doc
                alone = model(net_input["src_tokens"][row][where][None])[0][0]
                torch.testing.assert_close(packed_logits[row][where], alone, atol=1e-4, rtol=1e-4)
    assert (packed_logits - leaky).abs().max() > 1e-3
