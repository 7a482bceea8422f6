"""Long models in other languages, from HF's layout: XLM-R and CamemBERT made long by
convert-roberta, and a Longformer with XLM-R's SentencePiece tokenizer (how the community's
multilingual long checkpoints are laid out) brought in by import-hf.

The directories are built by transformers itself, with a SentencePiece model trained on
real text in five scripts (tests/hf_models.py). The oracles are HF's models, in float64,
and HF's tokenizer for the ids that ``prep --spm`` gives with the files the command wrote.
"""

import json
import shutil

import pytest
import torch
from helpers import fails, ok, pretrain_roberta
from hf_models import multilingual, renumbered, scaled, train_xlmr_tokenizer

from longformer_fs import from_pretrained
from longformer_fs.checkpoint import load_model
from longformer_fs.tokenization import SubwordSpec

TOL = {"atol": 1e-5, "rtol": 1e-5}
SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, layer_norm_eps=1e-5,
             type_vocab_size=1)  # fmt: skip


@pytest.fixture(scope="module")
def xlmr(tmp_path_factory):
    """An XLM-R tokenizer directory and the text it was trained on, ``{script: texts}``: the
    first 300 texts of each language, which this module's samples join whole (the suite's
    shared tokenizer, conftest.xlmr_tokenizer, saw every other text of 600)."""
    texts = multilingual(300)
    tokenizer = train_xlmr_tokenizer([t for ts in texts.values() for t in ts], tmp_path_factory.mktemp("xlmr"), 1500)
    return tokenizer, texts


@pytest.fixture(scope="module")
def camembert(xlmr, tmp_path_factory):
    """The same SentencePiece model as CamemBERT's hub directory numbers it."""
    return renumbered(xlmr[0], tmp_path_factory.mktemp("camembert"), "camembert")


def save_with_tokenizer(model, tokenizer, out):
    """``model`` saved as the hub serves it, with XLM-R's tokenizer files."""
    model.save_pretrained(out)
    for path in tokenizer.iterdir():
        shutil.copyfile(path, out / path.name)
    return out


def hf_batch(tokenizer, texts, longest=None):
    """Rows ``<s> text </s>`` as HF's tokenizer (the directory's own class) makes them, right-padded."""
    from transformers import AutoTokenizer

    theirs = AutoTokenizer.from_pretrained(str(tokenizer), use_fast=False)
    rows = [theirs(t, truncation=longest is not None, max_length=longest)["input_ids"] for t in texts]
    tokens = torch.full((len(rows), max(map(len, rows))), theirs.pad_token_id)
    for i, row in enumerate(rows):
        tokens[i, : len(row)] = torch.tensor(row)
    return tokens


def prep_ids_equal_hf(out, tokenizer, texts):
    """The files the command wrote give HF's ids through prep's SentencePiece path."""
    from transformers import AutoTokenizer

    assert (out / "sentencepiece.bpe.model").read_bytes() == (tokenizer / "sentencepiece.bpe.model").read_bytes()
    encoder = SubwordSpec.spm(out / "sentencepiece.bpe.model", out / "dict.txt").load()
    ours = [ids.tolist() for ids, _ in encoder.encode_with_offsets(texts)]
    theirs = AutoTokenizer.from_pretrained(str(tokenizer), use_fast=False)
    assert ours == theirs(texts, add_special_tokens=False)["input_ids"]


def prep_ids_equal_tokenizer_json(out, tokenizer_json, texts):
    """The SentencePiece model a command rebuilt from ``tokenizer_json`` alone gives, through
    prep, the ids that HF's ``tokenizers`` gives running that file, on every text."""
    from tokenizers import Tokenizer

    everything = [t for ts in texts.values() for t in ts]
    rebuilt = SubwordSpec.spm(out / "sentencepiece.bpe.model", out / "dict.txt").load()
    ours = [ids.tolist() for ids, _ in rebuilt.encode_with_offsets(everything)]
    theirs = Tokenizer.from_file(str(tokenizer_json))
    assert ours == [e.ids for e in theirs.encode_batch(everything, add_special_tokens=False)]


def test_convert_roberta_makes_xlmr_long_and_export_hf_brings_it_back(xlmr, tmp_path):
    """With a window as wide as the input, the long model computes XLM-R's function; its
    export is a Longformer with XLM-R's tokenizer, as AutoModel and AutoTokenizer load it."""
    from transformers import (
        AutoModelForMaskedLM,
        AutoTokenizer,
        LongformerForMaskedLM,
        XLMRobertaConfig,
        XLMRobertaForMaskedLM,
        XLMRobertaTokenizer,
    )

    tokenizer, texts = xlmr
    vocab = len(SubwordSpec.spm(tokenizer / "sentencepiece.bpe.model").load().symbols) + 5
    theirs = scaled(XLMRobertaForMaskedLM(XLMRobertaConfig(vocab_size=vocab, max_position_embeddings=130, **SIZES)))
    hf = save_with_tokenizer(theirs, tokenizer, tmp_path / "xlm-roberta")
    ok("convert-roberta", hf, "--out", tmp_path / "long", "--max-positions", "512", "--window", "128")
    ours, _ = load_model(tmp_path / "long" / "model.pt", tmp_path / "long")
    samples = [" ".join(ts[5:25]) for ts in texts.values()]  # every script, up to 128 tokens
    tokens = hf_batch(tokenizer, samples, longest=128)
    with torch.no_grad():
        expected = theirs.double()(input_ids=tokens, attention_mask=(tokens != 1).long()).logits
        got = ours.double()(tokens)[0]
    real = tokens != 1
    torch.testing.assert_close(got[real], expected[real], **TOL)
    assert expected.abs().max() > 10  # far from a fresh model's near-zero logits
    prep_ids_equal_hf(tmp_path / "long", tokenizer, samples)

    # Through the hub, the SentencePiece model given by hand (spm=): HF's ids and logits.
    (tmp_path / "bare").mkdir()
    for name in ("model.pt", "dict.txt"):
        (tmp_path / "bare" / name).write_bytes((tmp_path / "long" / name).read_bytes())
    hub = from_pretrained(tmp_path / "bare", spm=tokenizer / "sentencepiece.bpe.model")
    ids = XLMRobertaTokenizer.from_pretrained(str(tokenizer))(samples, truncation=True, max_length=128)["input_ids"]
    for i, sample in enumerate(samples):
        assert hub.encode(sample)[:128].tolist()[:-1] == ids[i][:-1]  # both end with </s>
        with torch.no_grad():
            logits = hub.model(torch.tensor([ids[i]]))[0][0]
        torch.testing.assert_close(logits.double(), expected[i, : len(ids[i])], atol=1e-4, rtol=1e-4)

    # And back out: a directory that AutoTokenizer and AutoModel load, with our ids and logits.
    long = tmp_path / "long"
    ok("export-hf", long / "model.pt", "--out", tmp_path / "hf-long", "--tokenizer", long)
    exported = AutoTokenizer.from_pretrained(str(tmp_path / "hf-long"))
    assert isinstance(exported, XLMRobertaTokenizer)
    assert exported(samples)["input_ids"] == XLMRobertaTokenizer.from_pretrained(str(tokenizer))(samples)["input_ids"]
    back = AutoModelForMaskedLM.from_pretrained(tmp_path / "hf-long").double().eval()
    assert isinstance(back, LongformerForMaskedLM)
    with torch.no_grad():
        again = back(input_ids=tokens, attention_mask=(tokens != 1).long()).logits
    torch.testing.assert_close(again[real], got[real], **TOL)


def test_convert_roberta_makes_camembert_long_and_export_hf_brings_it_back(xlmr, camembert, tmp_path):
    """CamemBERT's tokenizer gives <s> and </s> the ids 5 and 6, fairseq's tasks 0 and 2:
    the long model reads fairseq's ids and computes CamemBERT's function on HF's (every
    logit but those of ids 0 and 2, which HF never gives); its export reads HF's ids again.
    From CamemBERT's tokenizer.json alone, the rebuilt SentencePiece model numbers it so too."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer, CamembertConfig, CamembertForMaskedLM

    texts = xlmr[1]
    vocab = len(SubwordSpec.spm(camembert / "sentencepiece.bpe.model").load().symbols) + 8
    config = CamembertConfig(vocab_size=vocab, max_position_embeddings=130, bos_token_id=5, eos_token_id=6, **SIZES)
    theirs = scaled(CamembertForMaskedLM(config))
    hf = save_with_tokenizer(theirs, camembert, tmp_path / "camembert")
    ok("convert-roberta", hf, "--out", tmp_path / "long", "--max-positions", "512", "--window", "128")
    ours, _ = load_model(tmp_path / "long" / "model.pt", tmp_path / "long")
    samples = [" ".join(ts[5:25]) for ts in texts.values()]
    tokens = hf_batch(camembert, samples, longest=128)
    assert (tokens[:, 0] == 5).all() and (tokens == 6).sum() == len(samples)
    fairseq_ids = tokens.clone()
    fairseq_ids[tokens == 5], fairseq_ids[tokens == 6] = 0, 2
    with torch.no_grad():
        expected = theirs.double()(input_ids=tokens, attention_mask=(tokens != 1).long()).logits
        got = ours.double()(fairseq_ids)[0]
    real, read = tokens != 1, [i for i in range(vocab) if i not in (0, 2)]
    torch.testing.assert_close(got[real][:, read], expected[real][:, read], **TOL)
    assert expected.abs().max() > 10
    prep_ids_equal_hf(tmp_path / "long", camembert, samples)

    long = tmp_path / "long"
    ok("export-hf", long / "model.pt", "--out", tmp_path / "hf-long", "--tokenizer", long)
    exported = AutoTokenizer.from_pretrained(str(tmp_path / "hf-long"), use_fast=False)
    assert type(exported).__name__ == "CamembertTokenizer"
    assert exported(samples)["input_ids"] == AutoTokenizer.from_pretrained(str(camembert))(samples)["input_ids"]
    back = AutoModelForMaskedLM.from_pretrained(tmp_path / "hf-long").double().eval()
    assert (back.config.bos_token_id, back.config.eos_token_id) == (5, 6)
    with torch.no_grad():
        again = back(input_ids=tokens, attention_mask=(tokens != 1).long()).logits
    torch.testing.assert_close(again[real], got[real], **TOL)

    # CamemBERT's tokenizer.json alone: the SentencePiece model rebuilt in its numbering.
    (hf / "sentencepiece.bpe.model").unlink()
    ok("convert-roberta", hf, "--out", tmp_path / "from-json", "--max-positions", "512", "--window", "128")
    assert (tmp_path / "from-json" / "dict.txt").read_bytes() == (long / "dict.txt").read_bytes()
    prep_ids_equal_tokenizer_json(tmp_path / "from-json", hf / "tokenizer.json", texts)


def test_import_hf_takes_a_longformer_with_xlmr_sentencepiece(xlmr, tmp_path):
    """A window of 32 a side on 600 tokens of real text, and the tokenizer as prep takes it,
    from XLM-R's SentencePiece model or from HF's tokenizer.json alone."""
    from transformers import LongformerConfig, LongformerForMaskedLM

    tokenizer, texts = xlmr
    vocab = len(SubwordSpec.spm(tokenizer / "sentencepiece.bpe.model").load().symbols) + 5
    config = LongformerConfig(vocab_size=vocab, attention_window=64, max_position_embeddings=1026, **SIZES)
    theirs = scaled(LongformerForMaskedLM(config))
    hf = save_with_tokenizer(theirs, tokenizer, tmp_path / "longformer-xlmr")
    ok("import-hf", hf, "--out", tmp_path / "out")
    ours, _ = load_model(tmp_path / "out" / "model.pt", tmp_path / "out")
    samples = [" ".join(ts) for ts in texts.values()][:2]
    tokens = hf_batch(tokenizer, samples, longest=600)
    assert tokens.shape[1] == 600
    with torch.no_grad():
        expected = theirs.double()(input_ids=tokens, attention_mask=(tokens != 1).long()).logits
        got = ours.double()(tokens)[0]
    real = tokens != 1
    # HF's type row is folded into the positions in float32 (test_import_hf.py): over two
    # million logits, a few end up 1e-5 off.
    torch.testing.assert_close(got[real], expected[real], atol=5e-5, rtol=1e-5)
    prep_ids_equal_hf(tmp_path / "out", tokenizer, samples)

    # The same directory with tokenizer.json alone (the Unigram model HF made from XLM-R's):
    # the SentencePiece model is rebuilt from it, and gives HF's ids.
    (hf / "sentencepiece.bpe.model").unlink()
    ok("import-hf", hf, "--out", tmp_path / "again")
    prep_ids_equal_tokenizer_json(tmp_path / "again", hf / "tokenizer.json", texts)
    assert (tmp_path / "again" / "dict.txt").read_bytes() == (tmp_path / "out" / "dict.txt").read_bytes()
    swapped = json.loads((hf / "tokenizer.json").read_text())
    swapped["model"]["vocab"][:2] = swapped["model"]["vocab"][1::-1]  # <pad> before <s>: not XLM-R's ids
    (hf / "tokenizer.json").write_text(json.dumps(swapped))
    error = fails("import-hf", hf, "--out", tmp_path / "swapped")
    assert "its first ids are ['<pad>', '<s>'" in error and not (tmp_path / "swapped").exists()


def test_convert_roberta_takes_fairseqs_xlmr_layout(xlmr, tmp_path):
    """fairseq's XLM-R release is ``model.pt``, ``dict.txt`` and ``sentencepiece.bpe.model``:
    here a tiny RoBERTa that fairseq-train itself trained on text ``prep --spm`` prepared.
    The long model equals fairseq's own RoBERTa with a window as wide as the input, and
    the tokenizer goes along."""
    from fairseq import checkpoint_utils

    tokenizer, texts = xlmr
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for script, ts in texts.items():
        for i in range(0, 60, 15):
            (corpus / f"{script}{i}.txt").write_text("\n".join(ts[i : i + 15]) + "\n", encoding="utf-8")
    ok("prep", "docs", "--out", tmp_path / "bin", "--spm", tokenizer / "sentencepiece.bpe.model",
       "--source", f"catalogues=txt:{corpus}", "--valid-fraction", "0.1", "--test-fraction", "0")  # fmt: skip
    release = pretrain_roberta(tmp_path / "bin", tmp_path / "bin" / "dict.txt", tmp_path / "xlmr.base", updates=2)
    shutil.copyfile(tokenizer / "sentencepiece.bpe.model", release / "sentencepiece.bpe.model")

    ok("convert-roberta", release, "--out", tmp_path / "long", "--max-positions", "512", "--window", "128")
    assert (tmp_path / "long" / "dict.txt").read_bytes() == (release / "dict.txt").read_bytes()
    prep_ids_equal_hf(tmp_path / "long", tokenizer, [" ".join(ts[:3]) for ts in texts.values()])
    ours, _ = load_model(tmp_path / "long" / "model.pt", tmp_path / "long")
    (theirs,), _, _ = checkpoint_utils.load_model_ensemble_and_task(
        [str(release / "model.pt")], arg_overrides={"data": str(release)}
    )
    theirs = theirs.double().eval()
    tokens = hf_batch(tokenizer, [" ".join(ts[30:45]) for ts in texts.values()], longest=126)
    with torch.no_grad():
        expected = theirs(tokens)[0]
        got = ours.double()(tokens)[0]
    real = tokens != 1
    torch.testing.assert_close(got[real], expected[real], **TOL)
