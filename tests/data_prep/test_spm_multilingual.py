"""prep's SentencePiece ids are HF's XLM-R ids, on real text in five scripts.

The text is the translations in this system's gettext catalogues (``/usr/share/locale``):
real text that nobody here wrote, in Latin, Cyrillic, CJK, Arabic and Devanagari scripts.
A SentencePiece model is trained on half of it, laid out as XLM-R's is (``<unk> <s> </s>``
first), and saved as XLM-R ships it (``sentencepiece.bpe.model``). The oracle is HF's
``XLMRobertaTokenizer`` loaded from that directory, which holds XLM-R's offset between
SentencePiece ids and model ids. prep's ids, through the ``dict.txt`` it writes and read as
fairseq reads it, must equal HF's on the other half, characters the model never saw
included.
"""

import gettext
import shutil
from pathlib import Path

import pytest

from longformer_fs.conventions import UNK
from longformer_fs.tokenization import SubwordSpec

LOCALES = {"Latin": ("fr", "de"), "Cyrillic": ("ru", "uk"), "CJK": ("ja", "zh_CN", "ko"), "Arabic": ("ar",),
           "Devanagari": ("hi",)}  # fmt: skip
CATALOGUES = Path("/usr/share/locale")
PER_LOCALE = 600  # strings: enough for every script's common characters, quick to train on


def translations(locale: str) -> list[str]:
    """The non-empty translated strings of ``locale``'s catalogues, in file order."""
    texts = []
    for path in sorted((CATALOGUES / locale / "LC_MESSAGES").glob("*.mo")):
        with path.open("rb") as f:
            catalogue = gettext.GNUTranslations(f)._catalog
        texts += [text for key, text in catalogue.items() if key and text.strip()]
        if len(texts) >= PER_LOCALE:
            break
    return texts[:PER_LOCALE]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """``{script: held-out texts}`` and an XLM-R-layout directory of the trained model."""
    import sentencepiece

    train, held_out = [], {}
    for script, locales in LOCALES.items():
        texts = [t for locale in locales for t in translations(locale)]
        assert len(texts) >= 100 * len(locales), f"{script}: only {len(texts)} translations in {CATALOGUES}"
        train += texts[::2]
        held_out[script] = texts[1::2]
    out = tmp_path_factory.mktemp("xlmr")
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(train), model_prefix=str(out / "spm"), vocab_size=3000, hard_vocab_limit=False,
        character_coverage=0.9995, minloglevel=2,
    )  # fmt: skip
    release = out / "release"
    release.mkdir()
    shutil.copyfile(out / "spm.model", release / "sentencepiece.bpe.model")
    return held_out, release


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
