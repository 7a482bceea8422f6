"""prep's SentencePiece ids are HF's XLM-R ids, on real text in five scripts.

The text is the translations in this system's gettext catalogues (``/usr/share/locale``):
real text that nobody here wrote, in Latin, Cyrillic, CJK, Arabic and Devanagari scripts.
A SentencePiece model is trained on half of it, laid out as XLM-R's is (``<unk> <s> </s>``
first), and saved as the hub serves XLM-R's (tests/hf_models.py). The oracle is HF's
``XLMRobertaTokenizer`` loaded from that directory, which holds XLM-R's offset between
SentencePiece ids and model ids. prep's ids, through the ``dict.txt`` it writes and read as
fairseq reads it, must equal HF's on the other half, characters the model never saw
included.
"""

import pytest

from longformer_fs.conventions import UNK
from longformer_fs.tokenization import SubwordSpec


@pytest.fixture(scope="module")
def corpus(xlmr_tokenizer):
    """``{script: held-out texts}`` and an XLM-R tokenizer directory trained on the rest."""
    return xlmr_tokenizer["held_out"], xlmr_tokenizer["dir"]


def test_prep_ids_equal_xlmr_tokenizer_ids_in_five_scripts(corpus, tmp_path):
    from fairseq.data import Dictionary
    from transformers import XLMRobertaTokenizer

    held_out, release = corpus
    theirs = XLMRobertaTokenizer.from_pretrained(str(release))
    encoder = SubwordSpec.spm(release / "sentencepiece.bpe.model").load()
    encoder.write_dictionary(tmp_path / "dict.txt")
    # As prep's dictionary is read by a masked-LM task: fairseq's specials, then dict.txt, then <mask>.
    dictionary = Dictionary.load(str(tmp_path / "dict.txt"))
    mask = dictionary.add_symbol("<mask>")
    assert (dictionary.bos(), dictionary.pad(), dictionary.eos(), dictionary.unk(), mask) == (
        theirs.bos_token_id, theirs.pad_token_id, theirs.eos_token_id, theirs.unk_token_id, theirs.mask_token_id
    )  # fmt: skip
    assert len(dictionary) == len(theirs)
    unknown = 0
    for script, texts in held_out.items():
        ours = [ids.tolist() for ids, _ in encoder.encode_with_offsets(texts)]
        expected = theirs(texts, add_special_tokens=False)["input_ids"]
        differ = [(t, o, e) for t, o, e in zip(texts, ours, expected, strict=True) if o != e]
        assert not differ, f"{script}: {len(differ)} of {len(texts)} texts differ, e.g. {differ[0]}"
        # fairseq's dictionary gives prep's ids back the pieces they came from.
        pieces = [[dictionary[i] for i in ids] for ids in ours[:20]]
        assert pieces == [theirs.convert_ids_to_tokens(ids) for ids in expected[:20]]
        unknown += sum(ids.count(UNK) for ids in ours)
    assert unknown > 0  # held-out text brings characters the model never saw: both give <unk>
