"""The encoder hub (fairseq's RoBERTa interface for longformer_roberta) against HF
transformers' own models and tokenizer, on models imported from the hub's layout: the same
ids, features (with and without global attention), fill_mask probabilities and QA answer."""

import pytest
import torch
from helpers import ok
from hf_models import save_model, scaled, vocab_size

from longformer_fs import from_pretrained
from longformer_fs.evaluation.qa_spans import best_span

TOL = {"atol": 1e-4, "rtol": 1e-4}
TEXT = "The band of each token covers its neighbours, and global tokens see the whole sequence."


@pytest.fixture(scope="module")
def masked_lm(longformer_hub, tmp_path_factory):
    from transformers import AutoTokenizer, LongformerForMaskedLM

    out = tmp_path_factory.mktemp("mlm")
    ok("import-hf", longformer_hub, "--out", out)
    theirs = LongformerForMaskedLM.from_pretrained(longformer_hub).eval()
    return from_pretrained(out), theirs, AutoTokenizer.from_pretrained(longformer_hub)


def test_encode_gives_hfs_ids_and_decode_the_text(masked_lm):
    hub, _, tokenizer = masked_lm
    assert hub.encode(TEXT).tolist() == tokenizer(TEXT)["input_ids"]
    assert hub.encode("A question?", "A context.").tolist() == tokenizer("A question?", "A context.")["input_ids"]
    assert hub.decode(hub.encode(TEXT)) == TEXT
    assert hub.decode(hub.encode("first", "second")) == ["first", "second"]


def test_features_equal_hfs_with_and_without_global_attention(masked_lm):
    hub, theirs, _ = masked_lm
    tokens = hub.encode(TEXT)
    glob = torch.zeros_like(tokens, dtype=torch.bool)
    glob[[0, 5]] = True
    with torch.no_grad():
        for mask in (None, glob):
            ours = hub.extract_features(tokens, global_attention_mask=mask)
            hf = theirs.longformer(tokens[None], global_attention_mask=None if mask is None else mask[None].long())
            torch.testing.assert_close(ours, hf.last_hidden_state, **TOL)
        layers = hub.extract_features(tokens, return_all_hiddens=True)
        assert len(layers) == 3 and torch.equal(layers[-1], hub.extract_features(tokens))


def test_fill_mask_gives_hfs_probabilities(masked_lm):
    hub, theirs, tokenizer = masked_lm
    text = "The band of each <mask> covers its neighbours."
    filled = hub.fill_mask(text, topk=4)
    encoded = tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        logits = theirs(**encoded).logits[0]
    position = int((encoded["input_ids"][0] == tokenizer.mask_token_id).nonzero())
    values, indices = logits[position].softmax(-1).topk(4)
    assert [p for _, p, _ in filled] == pytest.approx(values.tolist(), abs=1e-5)
    assert [token for _, _, token in filled] == [tokenizer.decode([i]) for i in indices.tolist()]
    assert all(text.replace(" <mask>", token) == sentence for sentence, _, token in filled if token.startswith(" "))


def test_a_qa_model_answers_as_hf_does(hub_tokenizer, tmp_path):
    """prep qa's window (<s> question </s> document </s>) by HF's tokenizer, the question
    global (HF's rule: every token before the first </s>), HF's logits; the answer is the
    best start + end of at most 30 tokens in the document, cut from its characters."""
    from transformers import LongformerConfig, LongformerForQuestionAnswering, RobertaTokenizerFast

    config = LongformerConfig(vocab_size=len(RobertaTokenizerFast.from_pretrained(hub_tokenizer)), hidden_size=32,
                              num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                              attention_window=[8, 8], max_position_embeddings=514, layer_norm_eps=1e-5,
                              type_vocab_size=1)  # fmt: skip
    hf_dir = save_model(scaled(LongformerForQuestionAnswering(config), seed=2), hub_tokenizer, tmp_path / "hf")
    ok("import-hf", hf_dir, "--out", tmp_path / "qa")
    hub = from_pretrained(tmp_path / "qa")
    theirs = LongformerForQuestionAnswering.from_pretrained(hf_dir).eval()
    tokenizer = RobertaTokenizerFast.from_pretrained(hf_dir)
    question, document = "Which gate opens?", "The red gate opens with keys near the old river, at night."
    # prep qa's window, by HF's tokenizer: <s> question </s> document </s>.
    asked = tokenizer(question, add_special_tokens=False)["input_ids"]
    read = tokenizer(document, add_special_tokens=False, return_offsets_mapping=True)
    tokens = torch.tensor([[0, *asked, 2, *read["input_ids"], 2]])
    question_global = torch.arange(tokens.shape[1])[None] <= len(asked)  # before the first </s>, HF's rule
    with torch.no_grad():
        out = theirs(input_ids=tokens, global_attention_mask=question_global.long())
    allowed = torch.zeros(tokens.shape[1], dtype=torch.bool)
    allowed[len(asked) + 2 : -1] = True
    _, start, end = best_span(out.start_logits[0], out.end_logits[0], 30, allowed)
    offsets = read["offset_mapping"]
    expected = document[offsets[start - len(asked) - 2][0] : offsets[end - len(asked) - 2][1]]
    assert expected and hub.answer(question, document) == expected


def test_only_a_qa_model_answers(masked_lm):
    with pytest.raises(ValueError, match="a longformer_qa model answers"):
        masked_lm[0].answer("Which gate?", "The red gate.")
    # RoBERTa's hub call that needs fairseq's own BPE (and spaCy) refuses in one line.
    with pytest.raises(NotImplementedError, match="^extract_features_aligned_to_words: [^\n]*$"):
        masked_lm[0].extract_features_aligned_to_words("The red gate.")
    # A masked LM has no prepared-split predictions: refused by its head, before any data is read.
    refused = "^predict_prepared: a model ending in the masked-LM head [^\n]*coref, hotpotqa, qa"
    with pytest.raises(ValueError, match=refused):
        masked_lm[0].predict_prepared("no-such-directory")


def test_predict_gives_hfs_classifier_logits_with_its_first_token_global(hub_tokenizer, tmp_path):
    """A classifier's ``<s>`` is global by default, as HF's own classifier makes it."""
    from transformers import LongformerConfig, LongformerForSequenceClassification

    config = LongformerConfig(vocab_size=vocab_size(hub_tokenizer), hidden_size=32, num_hidden_layers=2,
                              num_attention_heads=4, intermediate_size=64, attention_window=[8, 8],
                              max_position_embeddings=130, layer_norm_eps=1e-5, type_vocab_size=1,
                              num_labels=3)  # fmt: skip
    theirs = scaled(LongformerForSequenceClassification(config))
    save_model(theirs, hub_tokenizer, tmp_path / "hf")
    ok("import-hf", tmp_path / "hf", "--out", tmp_path / "ours")
    hub = from_pretrained(tmp_path / "ours")
    tokens = hub.encode(TEXT)
    with torch.no_grad():
        expected = theirs(tokens[None]).logits  # HF makes <s> global when given no mask
        logits = hub.predict("sentence_classification_head", tokens, return_logits=True)
        torch.testing.assert_close(logits, expected, **TOL)
        local_only = theirs(tokens[None], global_attention_mask=torch.zeros_like(tokens)[None]).logits
        assert not torch.allclose(logits, local_only, **TOL)  # the default mattered
        torch.testing.assert_close(hub.predict("sentence_classification_head", tokens), expected.log_softmax(-1), **TOL)
