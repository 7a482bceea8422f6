"""import-hf: released Longformer and LED checkpoints (HF transformers' layout) as ours.

The HF directories are built by transformers itself (tests/hf_models.py): weights moved
far from their initialisation, the hub's weight formats (safetensors, .bin, sharded) and
tokenizer layouts (tokenizer.json, vocab.json + merges.txt, both), a RoBERTa-style BPE
trained on English text. The oracle is HF's own model: in float64, through fairseq's
checkpoint loader, our logits must equal HF's. fairseq holds no token-type embedding, so
HF's is folded into the positions in the stored float32, a rounding of one part in 10^7
that the tolerance allows.
"""

import json
import shutil

import pytest
import torch
from helpers import fails, ok
from hf_models import english, save_model, scaled, vocab_size

from longformer_fs.checkpoint import load_model

TOL = {"atol": 1e-5, "rtol": 1e-5}


@pytest.fixture(scope="module")
def tokenizer(hub_tokenizer):
    """The suite's RoBERTa-style tokenizer, trained once per run (conftest.hub_tokenizer)."""
    return hub_tokenizer


def longformer_config(tokenizer, **extra):
    """A 2-layer Longformer with per-layer windows over ``tokenizer``'s vocabulary."""
    from transformers import LongformerConfig

    settings = dict(vocab_size=extra.pop("vocab_size", None) or vocab_size(tokenizer), hidden_size=32,
                    num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, attention_window=[4, 8],
                    max_position_embeddings=66, layer_norm_eps=1e-5, type_vocab_size=1, hidden_act="gelu")  # fmt: skip
    return LongformerConfig(**(settings | extra))


def led_config(tokenizer, **extra):
    """A 2 + 2-layer LED with per-layer windows over ``tokenizer``'s vocabulary."""
    from transformers import LEDConfig

    settings = dict(vocab_size=vocab_size(tokenizer), d_model=32, encoder_layers=2, decoder_layers=2,
                    encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                    attention_window=[4, 8], max_encoder_position_embeddings=80,
                    max_decoder_position_embeddings=24)  # fmt: skip
    return LEDConfig(**(settings | extra))


def imported(hf_dir, out, *extra):
    """import-hf, and the model and task as fairseq's checkpoint loader builds them (LED's
    translation task over its dict.txt, as summarize loads it), in float64."""
    report = json.loads(ok("import-hf", hf_dir, "--out", out, "--json", *extra))
    data = out
    if report["task"] == "sentence_prediction":  # its data: input0/ and label/ dictionaries, as prep writes them
        data = out / "data"
        for part, text in (("input0", (out / "dict.txt").read_text()), ("label", "0 1\n1 1\n2 1\n")):
            (data / part).mkdir(parents=True)
            (data / part / "dict.txt").write_text(text)
    if report["task"] == "translation":
        model, task = load_model(out / "model.pt")  # its task over the dict.txt beside it
    else:
        model, task = load_model(out / "model.pt", data)
    return report, model.double(), task


def batch(vocab, lengths, seed=0):
    """``<s> random tokens </s>`` rows of ``lengths``, right-padded."""
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.full((len(lengths), max(lengths)), 1)
    for row, n in enumerate(lengths):
        tokens[row, :n] = torch.randint(5, vocab - 1, (n,), generator=generator)
        tokens[row, 0], tokens[row, n - 1] = 0, 2
    return tokens


# ---------------------------------------------------------------- Longformer heads


def test_masked_lm_logits_equal_hf(tokenizer, tmp_path):
    """Per-layer windows ([4, 8] HF, 2 and 4 a side), a type embedding, safetensors, tokenizer.json."""
    from transformers import LongformerForMaskedLM

    theirs = scaled(LongformerForMaskedLM(longformer_config(tokenizer, type_vocab_size=2)))
    save_model(theirs, tokenizer, tmp_path / "hf", "safetensors", "json")
    report, ours, task = imported(tmp_path / "hf", tmp_path / "out")
    assert (report["arch"], report["head"], report["task"], report["window"]) == (
        "longformer_roberta_base", "masked_lm", "masked_lm", "2,4")  # fmt: skip
    assert report["positions"] == [64, 64] and report["notes"] and not report["left_out"]
    tokens = batch(theirs.config.vocab_size, [37, 25])
    with torch.no_grad():
        expected = theirs.double()(input_ids=tokens, attention_mask=(tokens != 1).long()).logits
        got = ours(tokens)[0]
    real = tokens != 1
    torch.testing.assert_close(got[real], expected[real], **TOL)
    assert expected.abs().max() > 10  # far from a fresh model's near-zero logits


def test_question_answering_logits_with_the_question_global(tokenizer, tmp_path):
    """pytorch_model.bin and vocab.json + merges.txt; global attention on the question
    (everything before the first </s>), as HF's QA model and our longformer_qa task set it."""
    from transformers import LongformerForQuestionAnswering

    from longformer_fs.heads import QA_HEAD
    from longformer_fs.tasks.qa import question_mask

    theirs = scaled(LongformerForQuestionAnswering(longformer_config(tokenizer)))
    save_model(theirs, tokenizer, tmp_path / "hf", "bin", "pair")
    report, ours, task = imported(tmp_path / "hf", tmp_path / "out")
    assert (report["head"], report["task"]) == ("qa", "longformer_qa")
    assert type(task).__name__ == "QaTask"
    tokens = batch(theirs.config.vocab_size, [40, 29])
    tokens[:, 6:8] = 2  # <s> question (5 tokens) </s> </s> document </s>, RoBERTa's pair
    question = question_mask(tokens, 2)
    with torch.no_grad():
        expected = theirs.double()(input_ids=tokens, attention_mask=(tokens != 1).long())  # HF finds the question
        features, _ = ours(tokens, global_attention_mask=question, features_only=True)
        got = ours.token_logits(QA_HEAD, features)
    real = tokens != 1
    torch.testing.assert_close(got[..., 0][real], expected.start_logits[real], **TOL)
    torch.testing.assert_close(got[..., 1][real], expected.end_logits[real], **TOL)


def test_classification_logits_with_the_first_token_global(tokenizer, tmp_path):
    """Sharded safetensors and both tokenizer layouts; HF's classifier makes <s> global."""
    from transformers import LongformerForSequenceClassification

    theirs = scaled(LongformerForSequenceClassification(longformer_config(tokenizer, num_labels=3)))
    save_model(theirs, tokenizer, tmp_path / "hf", "sharded-safetensors", "both")
    assert (tmp_path / "hf" / "model.safetensors.index.json").is_file()
    report, ours, task = imported(tmp_path / "hf", tmp_path / "out")
    assert (report["head"], report["task"]) == ("classification", "sentence_prediction")
    tokens = batch(theirs.config.vocab_size, [33, 21, 12])
    with torch.no_grad():
        expected = theirs.double()(input_ids=tokens, attention_mask=(tokens != 1).long()).logits
        got = ours(tokens, features_only=True, classification_head_name="sentence_classification_head")[0]
    torch.testing.assert_close(got, expected, **TOL)


@pytest.mark.parametrize("head", ["bare", "multiple_choice"])
def test_heads_without_a_task_here_bring_the_encoder_and_say_what_was_left(tokenizer, tmp_path, head):
    """The encoder's features equal HF's; the pooler and the multiple-choice classifier are
    named in one line; a fresh masked-LM head keeps fairseq's RoBERTa whole."""
    from transformers import LongformerForMultipleChoice, LongformerModel

    cls = LongformerModel if head == "bare" else LongformerForMultipleChoice
    theirs = scaled(cls(longformer_config(tokenizer)))
    save_model(theirs, tokenizer, tmp_path / "hf", "sharded-bin")
    out = ok("import-hf", tmp_path / "hf", "--out", tmp_path / "out")
    left = next(line for line in out.splitlines() if line.strip().startswith("left out:"))
    assert "pooler" in left and (("multiple-choice head" in left) == (head == "multiple_choice"))
    ours, _ = load_model(tmp_path / "out" / "model.pt", tmp_path / "out")
    encoder = theirs if head == "bare" else theirs.longformer
    tokens = batch(theirs.config.vocab_size, [30, 18])
    with torch.no_grad():
        expected = encoder.double()(input_ids=tokens, attention_mask=(tokens != 1).long()).last_hidden_state
        got = ours.double()(tokens, features_only=True)[0]
    real = tokens != 1
    torch.testing.assert_close(got[real], expected[real], **TOL)


# ---------------------------------------------------------------- LED


def test_led_logits_teacher_forced_with_the_first_token_global(tokenizer, tmp_path):
    """HF's LED numbers positions from 0, fairseq keeps 2 reserved rows; the decoder starts
    from </s> on both sides."""
    from transformers import LEDForConditionalGeneration

    theirs = scaled(LEDForConditionalGeneration(led_config(tokenizer)))
    save_model(theirs, tokenizer, tmp_path / "hf", "safetensors", "pair")
    report, ours, task = imported(tmp_path / "hf", tmp_path / "out")
    assert (report["arch"], report["task"], report["window"], report["positions"]) == (
        "led_base", "translation", "2,4", [80, 80])  # fmt: skip
    assert ours.encoder.embed_positions.weight.shape[0] == 82
    source = batch(theirs.config.vocab_size, [45, 31])
    target = batch(theirs.config.vocab_size, [9, 13], seed=1)
    previous = torch.cat([torch.full((2, 1), 2), target[:, :-1]], dim=1)  # </s> y1 ... (teacher forcing)
    with torch.no_grad():
        expected = theirs.double()(
            input_ids=source, attention_mask=(source != 1).long(), global_attention_mask=(source == 0).long(),
            decoder_input_ids=previous, decoder_attention_mask=(previous != 1).long(),
        ).logits  # fmt: skip
        got = ours(source, (source != 1).sum(1), previous)[0]
    real = previous != 1
    # The translation task's dictionary has no <mask>: fairseq's BART drops that last row on loading.
    assert got.shape[-1] == expected.shape[-1] - 1
    torch.testing.assert_close(got[real], expected[real][:, :-1], **TOL)


# ---------------------------------------------------------------- longer than released


def test_max_positions_extends_by_copying(tokenizer, tmp_path):
    from transformers import LEDForConditionalGeneration, LongformerForMaskedLM

    save_model(scaled(LongformerForMaskedLM(longformer_config(tokenizer))), tokenizer, tmp_path / "lf")
    report, ours, _ = imported(tmp_path / "lf", tmp_path / "lf_out", "--max-positions", "256")
    table = ours.encoder.sentence_encoder.embed_positions.weight
    assert report["positions"] == [64, 256] and table.shape[0] == 258
    torch.testing.assert_close(table[2 + 64 : 2 + 128], table[2:66])  # the 64 learned rows, again
    save_model(scaled(LEDForConditionalGeneration(led_config(tokenizer))), tokenizer, tmp_path / "led")
    report, ours, _ = imported(tmp_path / "led", tmp_path / "led_out", "--max-positions", "320")
    assert report["positions"] == [80, 320] and ours.encoder.embed_positions.weight.shape[0] == 322
    assert ours.decoder.embed_positions.weight.shape[0] == 26  # the decoder's are untouched
    assert "smaller than the checkpoint's 80" in fails(
        "import-hf", tmp_path / "led", "--out", tmp_path / "x", "--max-positions", "40"
    )


def copied_positions(table: torch.Tensor, reserved: int, rows: int) -> torch.Tensor:
    """HF's side of extending by copying, as allenai's conversion scripts did: the learned
    rows after ``reserved`` tiled out to ``rows`` learned rows."""
    learned = table[reserved:]
    return torch.cat([table[:reserved], learned.repeat(-(-rows // learned.shape[0]), 1)[:rows]])


def with_positions(model, config, key: str, table: torch.Tensor):
    """A copy of HF ``model`` built for ``config`` (more positions), ``key`` set to ``table``."""
    longer = type(model)(config).eval()
    state = {k: v for k, v in model.state_dict().items() if k in longer.state_dict()}
    state[key] = table
    missing, unexpected = longer.load_state_dict(state, strict=False)
    assert not unexpected and all("position_ids" in k for k in missing), (missing, unexpected)
    return longer.double()


def test_longformer_extended_from_4096_to_16384_equals_hf_extended_alike(tokenizer, tmp_path):
    """allenai's models hold 4,096 positions; past them, our copied rows give the logits
    that HF's model gives with its table extended by copying on its side."""
    from transformers import LongformerForMaskedLM

    theirs = scaled(LongformerForMaskedLM(longformer_config(tokenizer, max_position_embeddings=4098)))
    save_model(theirs, tokenizer, tmp_path / "hf")
    report, ours, _ = imported(tmp_path / "hf", tmp_path / "out", "--max-positions", "16384")
    assert report["positions"] == [4096, 16384]
    key = "longformer.embeddings.position_embeddings.weight"
    table = copied_positions(theirs.state_dict()[key], 2, 16384)  # HF numbers from padding_idx + 1 = 2
    longer = with_positions(theirs, longformer_config(tokenizer, max_position_embeddings=16386), key, table)
    tokens = batch(theirs.config.vocab_size, [4700, 4101])  # past 4,096, padded
    with torch.no_grad():
        expected = longer(input_ids=tokens, attention_mask=(tokens != 1).long()).logits
        got = ours(tokens)[0]
    real = tokens != 1
    # Five million logits: the type row folded into the positions in float32 (module
    # docstring) puts a few of them 1e-5 off.
    torch.testing.assert_close(got[real], expected[real], atol=5e-5, rtol=1e-5)


def test_led_extended_from_16384_to_32768_equals_hf_extended_alike(tokenizer, tmp_path):
    """LED's 16,384 encoder positions doubled: HF numbers them from 0, with no reserved row."""
    from transformers import LEDForConditionalGeneration

    config = led_config(tokenizer, d_model=16, encoder_attention_heads=2, decoder_attention_heads=2,
                        max_encoder_position_embeddings=16384)  # fmt: skip
    theirs = scaled(LEDForConditionalGeneration(config))
    save_model(theirs, tokenizer, tmp_path / "hf")
    report, ours, _ = imported(tmp_path / "hf", tmp_path / "out", "--max-positions", "32768")
    assert report["positions"] == [16384, 32768]
    key = "led.encoder.embed_positions.weight"
    table = copied_positions(theirs.state_dict()[key], 0, 32768)
    config.max_encoder_position_embeddings = 32768
    longer = with_positions(theirs, config, key, table)
    source = batch(theirs.config.vocab_size, [16500])
    previous = torch.cat([torch.full((1, 1), 2), batch(theirs.config.vocab_size, [6], seed=1)[:, :-1]], dim=1)
    with torch.no_grad():
        # HF's LED expands its mask to T x T in the model's dtype: in float32 here (1 GiB, not
        # 2), against ours in float64; a wrong position row would be off by whole units.
        expected = longer.float()(
            input_ids=source, attention_mask=torch.ones_like(source), global_attention_mask=(source == 0).long(),
            decoder_input_ids=previous,
        ).logits.double()  # fmt: skip
        got = ours(source, torch.tensor([source.shape[1]]), previous)[0]
    torch.testing.assert_close(got, expected[..., :-1], atol=1e-4, rtol=1e-5)  # the translation task has no <mask> row


# ---------------------------------------------------------------- and back out


@pytest.mark.parametrize("kind", ["masked_lm", "qa", "classification", "led"])
def test_import_then_export_gives_back_the_same_function(tokenizer, tmp_path, kind):
    import transformers

    cls, config = {
        "masked_lm": ("LongformerForMaskedLM", longformer_config(tokenizer)),
        "qa": ("LongformerForQuestionAnswering", longformer_config(tokenizer)),
        "classification": ("LongformerForSequenceClassification", longformer_config(tokenizer, num_labels=2)),
        "led": ("LEDForConditionalGeneration", led_config(tokenizer)),
    }[kind]
    original = scaled(getattr(transformers, cls)(config))
    save_model(original, tokenizer, tmp_path / "hf")
    ok("import-hf", tmp_path / "hf", "--out", tmp_path / "ours")
    report = json.loads(ok("export-hf", tmp_path / "ours" / "model.pt", "--out", tmp_path / "back", "--json"))
    assert report["model_class"] == cls
    back = getattr(transformers, cls).from_pretrained(tmp_path / "back", local_files_only=True).eval()
    tokens = batch(config.vocab_size, [30, 22])
    tokens[:, 5:7] = 2  # a question and a document, for the QA model's global mask
    inputs = {"input_ids": tokens, "attention_mask": (tokens != 1).long()}
    if kind == "led":
        inputs |= {"global_attention_mask": (tokens == 0).long(), "decoder_input_ids": tokens[:, :7]}
    with torch.no_grad():
        a, b = original.double()(**inputs), back.double()(**inputs)
    for name in ("logits", "start_logits", "end_logits"):
        if name in a:
            torch.testing.assert_close(b[name], a[name], **TOL)


# ---------------------------------------------------------------- the tokenizer


def test_prep_with_the_imported_tokenizer_gives_hf_ids_on_english_text(tokenizer, tmp_path):
    """encoder.json, vocab.bpe and dict.txt through prep's own encoder, against HF's tokenizer."""
    from transformers import AutoTokenizer, LongformerForMaskedLM

    from longformer_fs.tokenization import SubwordSpec

    model = scaled(LongformerForMaskedLM(longformer_config(tokenizer)))
    save_model(model, tokenizer, tmp_path / "hf", tokenizer="pair")
    ok("import-hf", tmp_path / "hf", "--out", tmp_path / "out")
    out = tmp_path / "out"
    ours = SubwordSpec.gpt2(out / "encoder.json", out / "vocab.bpe", out / "dict.txt").load()
    theirs = AutoTokenizer.from_pretrained(tmp_path / "hf", local_files_only=True)
    texts = [p for doc in english() for p in doc.split("\n\n") if p.strip()]
    texts += ["Ünïcode, “quotes” — and   spaces\ttabs\n\nnew lines", " leading space", "emoji 🙂 and ümlauts"]
    assert len(texts) > 200
    # A "<s>" written in the text is text to prep, as to fairseq's RoBERTa; HF's tokenizer reads
    # it as the special token unless told to split it (these docs write such symbols).
    assert any("<s>" in text for text in texts)
    for text, ids in zip(texts, ours.encode(texts), strict=True):
        expected = theirs(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        assert ids.tolist() == expected, text[:80]
        if not any(symbol in text for symbol in ("<s>", "<pad>", "</s>", "<unk>", "<mask>")):
            assert expected == theirs(text, add_special_tokens=False)["input_ids"]
    # fairseq's dictionary: the four specials first, the pieces, <mask> last (appended by the tasks).
    lines = (out / "dict.txt").read_text().splitlines()
    assert len(lines) + 5 == vocab_size(tokenizer)


def test_a_gpt2_numbered_tokenizer_comes_back_as_gpt2s_files(tmp_path):
    """A BPE numbered as GPT-2's is (256 byte characters, then merge results in order, then
    <|endoftext|>) and mapped to model ids through a RoBERTa-style dict.txt (GPT-2 ids by
    frequency), turned into HF's vocab.json as roberta-base's was: import-hf's encoder.json
    is that GPT-2 numbering exactly, and its dict.txt lists the same GPT-2 ids."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import LongformerForMaskedLM

    from longformer_fs.hf_format.gpt2_numbering import byte_characters

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(english(), vocab_size=500, min_frequency=2, show_progress=False)
    merges = json.loads(bpe._tokenizer.to_str())["model"]["merges"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in merges]
    gpt2 = {c: i for i, c in enumerate(byte_characters())}
    for rank, merge in enumerate(merges):
        gpt2[merge.replace(" ", "")] = 256 + rank
    gpt2["<|endoftext|>"] = len(gpt2)
    by_frequency = sorted(gpt2.values(), key=lambda i: (i * 7919) % len(gpt2))  # any order: a RoBERTa dict.txt's
    dict_lines = [f"{i} {1000 - n}" for n, i in enumerate(by_frequency)] + ["madeupword0000 0", "madeupword0001 0"]
    piece = {i: p for p, i in gpt2.items()}
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3} | {piece[i]: 4 + n for n, i in enumerate(by_frequency)}
    vocab["<mask>"] = 4 + len(dict_lines)  # after the padding rows, as roberta-base's
    hf = tmp_path / "hf"
    save_model(scaled(LongformerForMaskedLM(longformer_config(tmp_path, vocab_size=len(dict_lines) + 5))), None, hf,
               tokenizer="none")  # fmt: skip
    (hf / "vocab.json").write_text(json.dumps(vocab))
    (hf / "merges.txt").write_text("#version: 0.2\n" + "".join(m + "\n" for m in merges))
    ok("import-hf", hf, "--out", tmp_path / "out")
    assert json.loads((tmp_path / "out" / "encoder.json").read_text()) == gpt2
    written = [line.split()[0] for line in (tmp_path / "out" / "dict.txt").read_text().splitlines()]
    assert written == [line.split()[0] for line in dict_lines]


# ---------------------------------------------------------------- bad input


def test_bad_input_is_one_line_naming_the_file_and_out_is_left_as_it_was(tokenizer, tmp_path):
    from transformers import (
        BertConfig,
        BertModel,
        GPT2Config,
        GPT2Model,
        LongformerForMaskedLM,
        LongformerForQuestionAnswering,
    )

    good = save_model(scaled(LongformerForMaskedLM(longformer_config(tokenizer))), tokenizer, tmp_path / "good")
    out = tmp_path / "out"
    ok("import-hf", good, "--out", out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def refused(source, *extra):
        message = fails("import-hf", source, "--out", out, *extra)
        assert len(message.strip().splitlines()) == 1, message
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # OUT as it was
        return message

    BertModel(BertConfig(vocab_size=99, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=8)).save_pretrained(tmp_path / "bert")  # fmt: skip
    assert "config.json: model_type 'bert' is not one import-hf takes" in refused(tmp_path / "bert")
    GPT2Model(GPT2Config(vocab_size=99, n_embd=8, n_layer=1, n_head=2)).save_pretrained(tmp_path / "gpt2")
    assert "model_type 'gpt2'" in refused(tmp_path / "gpt2")
    (tmp_path / "empty").mkdir()
    assert f"{tmp_path / 'empty' / 'config.json'}: not found" in refused(tmp_path / "empty")

    def variant(name, change):
        shutil.copytree(good, tmp_path / name)
        change(tmp_path / name)
        return tmp_path / name

    missing = variant("missing", lambda d: (d / "model.safetensors").unlink())
    assert "no weights (model.safetensors" in refused(missing)
    truncated = variant("truncated", lambda d: (d / "model.safetensors").write_bytes(
        (good / "model.safetensors").read_bytes()[:5000]))  # fmt: skip
    assert f"{truncated / 'model.safetensors'}: cannot be read as safetensors" in refused(truncated)
    bin_dir = tmp_path / "bin"
    save_model(scaled(LongformerForMaskedLM(longformer_config(tokenizer))), tokenizer, bin_dir, "bin")
    (bin_dir / "pytorch_model.bin").write_bytes((bin_dir / "pytorch_model.bin").read_bytes()[:3000])
    assert f"{bin_dir / 'pytorch_model.bin'}: cannot be read as a torch checkpoint" in refused(bin_dir)
    sharded = save_model(scaled(LongformerForMaskedLM(longformer_config(tokenizer))), tokenizer, tmp_path / "sh",
                         "sharded-safetensors")  # fmt: skip
    next(sharded.glob("model-00002-*.safetensors")).unlink()
    assert "model-00002-of-" in refused(sharded) and "not found" in refused(sharded)

    def edit_config(**values):
        return lambda d: (d / "config.json").write_text(
            json.dumps(json.loads((d / "config.json").read_text()) | values)
        )

    bigger = variant("vocab", edit_config(vocab_size=vocab_size(tokenizer) + 1))
    assert "tokenizer.json: " in refused(bigger) and "embedding rows" in refused(bigger)
    assert "layer_norm_eps = 1e-12" in refused(variant("eps", edit_config(layer_norm_eps=1e-12)))
    assert "attention_window = [4, 7]" in refused(variant("odd", edit_config(attention_window=[4, 7])))
    assert "pad_token_id = 0" in refused(variant("pad", edit_config(pad_token_id=0)))
    assert 'hidden_act = "quick_gelu"' in refused(variant("act", edit_config(hidden_act="quick_gelu")))
    three = LongformerForQuestionAnswering(longformer_config(tokenizer, num_labels=3))  # start, end and a third
    assert "a QA head has 2 outputs (start, end), this one 3" in refused(save_model(three, tokenizer, tmp_path / "qa3"))

    other = save_model(scaled(LongformerForMaskedLM(longformer_config(tokenizer)), seed=7), tokenizer, tmp_path / "o")
    assert "already holds an import of" in refused(other) and "--force" in refused(other)
    ok("import-hf", good, "--out", out)  # the same source again: up to date, allowed
    ok("import-hf", other, "--out", out, "--force")
    assert (out / "model.pt").read_bytes() != before["model.pt"]


# ---------------------------------------------------------------- everywhere a converted checkpoint works


def test_an_imported_led_summarizes_and_converts_as_make_summarize_does(tokenizer, tmp_path):
    """summarize reads an imported LED with its tokenizer files; convert-bart (what make
    summarize-arxiv runs on BART=) takes it and its HF directory alike."""
    from transformers import LEDForConditionalGeneration

    hf = save_model(scaled(LEDForConditionalGeneration(led_config(tokenizer))), tokenizer, tmp_path / "hf")
    out = tmp_path / "led"
    ok("import-hf", hf, "--out", out)
    (tmp_path / "paper.txt").write_text(english()[0][:2000])
    ok("summarize", out / "model.pt", tmp_path / "paper.txt", "--encoder-json", out / "encoder.json",
       "--vocab-bpe", out / "vocab.bpe", "--min-len", "2", "--max-len", "6", "--out", tmp_path / "s.jsonl")  # fmt: skip
    summary = json.loads((tmp_path / "s.jsonl").read_text().splitlines()[0])
    assert summary["summary"].strip()
    for source in (out, hf):
        report = json.loads(ok("convert-bart", source, "--out", tmp_path / f"conv_{source.name}",
                               "--max-source-positions", "160", "--window", "8", "--json"))  # fmt: skip
        assert report["arch"] == "led_base" and report["source_positions"] == [80, 160]
    a, b = (torch.load(tmp_path / f"conv_{s}" / "model.pt", weights_only=False)["model"] for s in ("led", "hf"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
