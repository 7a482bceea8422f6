"""The paper's Table 6 in miniature: RoBERTa -> Longformer conversion, continued MLM
pretraining, and the HF transformers export.

A tiny RoBERTa (2 layers, 128 positions) is trained by a real fairseq-train process on
a generated corpus of words repeated in short runs: a masked word is its neighbours'
word, which a model can only find if it knows where its neighbours are (positions).
Without positions it falls back to the words of the whole block.
"""

import json

import pytest
import torch
from helpers import ROOT, USER_DIR, fails, fairseq, fake_checkpoint, ok, print_results

from longformer_fs.evaluation.masked_lm import masked_lm_bits

RESULTS = {}  # the miniature Table 6, filled by the tests below


@pytest.fixture(scope="module", autouse=True)
def print_table6():
    """Print the miniature Table 6 after the module (pytest -s shows it)."""
    yield
    title = "\nMiniature Table 6 (MLM loss in bits per masked token, valid split):"
    print_results(title, RESULTS, lambda name, value: f"  {name:<52} {value:.3f}")


def convert(roberta, out, *extra):
    return ok("convert-roberta", roberta, "--out", out, "--max-positions", "512", *extra)


@pytest.fixture(scope="module")
def copied(tiny_roberta, tmp_path_factory):
    """The converted model of the paper's recipe: copied positions, a 64-token window (w = 32,
    as w = 256 is the paper's 512), 512 positions. Returns its model.pt."""
    out = tmp_path_factory.mktemp("copy")
    convert(tiny_roberta, out, "--window", "32")
    return out / "model.pt"


def load(path, data):
    from fairseq import checkpoint_utils

    models, _, task = checkpoint_utils.load_model_ensemble_and_task([str(path)], arg_overrides={"data": str(data)})
    return models[0].eval(), task


def valid_blocks(task, data, length, n_tokens):
    from fairseq.data import data_utils

    split = data_utils.load_indexed_dataset(str(data / "valid"), task.source_dictionary, "mmap")
    stream = torch.cat([split[i] for i in range(len(split))])[:n_tokens]
    body = stream[: len(stream) // (length - 1) * (length - 1)].view(-1, length - 1)
    return torch.cat([torch.full((len(body), 1), task.source_dictionary.bos()), body], dim=1)


def score(model, task, blocks):
    d = task.source_dictionary
    special = torch.tensor([d.bos(), d.eos(), d.pad()])
    return masked_lm_bits(model, blocks, d.index("<mask>"), special, mask_prob=0.15, seed=0).bits


def test_converted_with_wide_window_equals_roberta(tiny_roberta, runs_corpus, tmp_path):
    out = convert(tiny_roberta, tmp_path / "wide")  # default window 256 >= 128 tokens: full attention
    assert "positions: 128 -> 512" in out and "global projections: 12 tensors" in out
    original, task = load(tiny_roberta / "model.pt", runs_corpus)
    converted, _ = load(tmp_path / "wide" / "model.pt", runs_corpus)
    assert type(converted).__name__ == "LongformerRobertaModel"
    blocks = valid_blocks(task, runs_corpus, 128, 8 * 127)
    original.double(), converted.double()
    with torch.no_grad():
        torch.testing.assert_close(converted(blocks)[0], original(blocks)[0], atol=1e-6, rtol=1e-6)
    assert score(converted, task, blocks) == pytest.approx(score(original, task, blocks), abs=1e-6)


def test_table6_copied_positions_keep_the_loss_random_ones_do_not(tiny_roberta, copied, runs_corpus, tmp_path):
    convert(tiny_roberta, tmp_path / "random", "--window", "32", "--position-init", "random")
    original, task = load(tiny_roberta / "model.pt", runs_corpus)
    n_tokens = 16 * 511
    RESULTS["RoBERTa, 128 tokens"] = score(original, task, valid_blocks(task, runs_corpus, 128, n_tokens))
    for name, path in (("random", tmp_path / "random" / "model.pt"), ("copy", copied)):
        model, _ = load(path, runs_corpus)
        RESULTS[f"Longformer, {name} position embeddings, 512 tokens"] = score(
            model, task, valid_blocks(task, runs_corpus, 512, n_tokens)
        )
    base = RESULTS["RoBERTa, 128 tokens"]
    copied = RESULTS["Longformer, copy position embeddings, 512 tokens"]
    randomised = RESULTS["Longformer, random position embeddings, 512 tokens"]
    assert base < 2.0, RESULTS  # it learned locality (uniform guessing is 4 bits, the block's words ~3.5)
    assert abs(copied - base) <= 0.15 * base, RESULTS
    assert randomised > 1.5 * copied, RESULTS


def fairseq_validate(checkpoint, runs_corpus):
    out = fairseq(
        "fairseq-validate",
        runs_corpus,
        "--path",
        checkpoint,
        "--user-dir",
        USER_DIR,
        "--task",
        "masked_lm",
        "--tokens-per-sample",
        "512",
        "--sample-break-mode",
        "none",
        "--batch-size",
        "8",
        "--cpu",
        "--num-workers",
        "0",
        "--seed",
        "3",
        "--log-format",
        "json",
    )
    line = next(line for line in out.splitlines() if '| valid | {"valid_loss"' in line)
    return float(json.loads(line.split("| valid | ", 1)[1])["valid_loss"])


def test_continued_pretraining_with_the_recipe_lowers_valid_loss(copied, runs_corpus, tmp_path):
    save = tmp_path / "run"
    before = fairseq_validate(copied, runs_corpus)
    fairseq(
        "fairseq-hydra-train",
        "--config-dir",
        ROOT / "recipes" / "mlm",
        "--config-name",
        "longformer_base_4096",
        f"task.data={runs_corpus}",
        f"checkpoint.finetune_from_model={copied}",
        f"checkpoint.save_dir={save}",
        "task.tokens_per_sample=512",
        "task.sample_break_mode=none",
        "model.max_positions=512",
        "model.attention_window='32'",
        "+model.encoder_layers=2",
        "+model.encoder_embed_dim=64",
        "+model.encoder_ffn_embed_dim=128",
        "+model.encoder_attention_heads=4",
        "dataset.batch_size=8",
        "dataset.num_workers=0",
        "optimization.update_freq=[1]",
        "optimization.max_update=50",
        "optimization.lr=[5e-4]",
        "lr_scheduler.warmup_updates=5",
        "lr_scheduler.total_num_update=50",
        "dataset.validate_interval_updates=50",
        "common.log_interval=10",
    )
    after = fairseq_validate(save / "checkpoint_last.pt", runs_corpus)
    assert after < before, (before, after)  # fairseq's own valid loss (bits), BERT-style masking
    # The same drop under the table's fixed masking.
    start, task = load(copied, runs_corpus)
    trained, _ = load(save / "checkpoint_last.pt", runs_corpus)
    blocks = valid_blocks(task, runs_corpus, 512, 16 * 511)
    RESULTS["Longformer, copy, after 50 updates, 512 tokens"] = score(trained, task, blocks)
    assert RESULTS["Longformer, copy, after 50 updates, 512 tokens"] < score(start, task, blocks), RESULTS
    assert (save / "tensorboard").is_dir()


@pytest.mark.parametrize("with_global", [False, True], ids=["local", "global-bos"])
def test_hf_export_matches_our_logits(copied, runs_corpus, tmp_path, with_global):
    from transformers import LongformerForMaskedLM

    ok("export-hf", copied, "--out", tmp_path / "hf")
    ours, task = load(copied, runs_corpus)
    theirs = LongformerForMaskedLM.from_pretrained(tmp_path / "hf", local_files_only=True).eval()
    assert theirs.config.attention_window == [64, 64]
    blocks = valid_blocks(task, runs_corpus, 512, 2 * 511)
    blocks[:, 200] = task.source_dictionary.bos()  # a second global token mid-sequence
    glob = blocks == task.source_dictionary.bos()
    if with_global:
        ours.encoder.sentence_encoder.global_token_ids = torch.tensor([task.source_dictionary.bos()])
    with torch.no_grad():
        expected = ours(blocks)[0]
        got = theirs(input_ids=blocks, global_attention_mask=glob.long() if with_global else None).logits
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_convert_refuses_bad_input_with_clear_messages(tiny_roberta, tmp_path):
    assert "smaller than the checkpoint's 128" in fails(
        "convert-roberta", tiny_roberta, "--out", tmp_path / "a", "--max-positions", "64"
    )
    fake_checkpoint(tmp_path / "fake", "lstm", {"decoder.embed_tokens.weight": torch.zeros(3, 2)})
    assert "not a fairseq RoBERTa-like encoder (model: lstm)" in fails(
        "convert-roberta", tmp_path / "fake", "--out", tmp_path / "b"
    )
    assert "does not exist" in fails("convert-roberta", tmp_path / "missing", "--out", tmp_path / "c")


def test_export_refuses_dilation_and_causal():
    import argparse

    from longformer_fs.export.hf import ExportError, check_exportable

    args = argparse.Namespace(attention_window="4", attention_dilation="1,2", causal_attention=False)
    with pytest.raises(ExportError, match="dilated"):
        check_exportable(args, 2)
    args = argparse.Namespace(attention_window="4", attention_dilation="1", causal_attention=True)
    with pytest.raises(ExportError, match="causal"):
        check_exportable(args, 2)
    args = argparse.Namespace(attention_window="4,8", attention_dilation="1", causal_attention=False)
    assert check_exportable(args, 2) == [4, 8]


def test_hf_tokenizer_from_gpt2_files_uses_the_model_ids(tmp_path):
    """GPT-2's encoder.json/vocab.bpe mapped through dict.txt (which lists GPT-2 ids in model order)."""
    from transformers import AutoTokenizer

    from longformer_fs.hf_format.tokenizer_out import write_hf_tokenizer

    bpe = tmp_path / "gpt2"
    bpe.mkdir()
    (bpe / "encoder.json").write_text(json.dumps({"a": 0, "b": 1, "\u0120": 2, "\u0120a": 3, "\u0120b": 4}))
    (bpe / "vocab.bpe").write_text("#version: 0.2\n\u0120 a\n\u0120 b\n")
    (tmp_path / "dict.txt").write_text("4 9\n0 7\n3 5\n1 1\n")  # Ġb a Ġa b -> model ids 4 5 6 7; no Ġ
    with pytest.raises(ValueError, match="lacks 1 of the BPE's 5 pieces"):
        write_hf_tokenizer(bpe, tmp_path / "dict.txt", tmp_path)
    (tmp_path / "dict.txt").write_text("4 9\n0 7\n3 5\n1 1\n2 1\n")  # ... and Ġ -> 8
    out = tmp_path / "hf"
    out.mkdir()
    assert write_hf_tokenizer(bpe, tmp_path / "dict.txt", out) == "gpt2-bpe+dict.txt"
    tok = AutoTokenizer.from_pretrained(str(out), local_files_only=True)
    assert tok("a b a")["input_ids"] == [0, 5, 4, 6, 2]  # <s> a Ġb Ġa </s>
    assert tok.mask_token_id == 9 and tok.pad_token_id == 1
