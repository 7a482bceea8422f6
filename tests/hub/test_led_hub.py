"""The LED hub (fairseq's BART interface for led) against HF transformers' LED on a model
imported from the hub's layout: greedy generation token for token; and its summaries are
``summarize``'s."""

import dataclasses

import pytest
import torch
from helpers import ok

from longformer_fs import from_pretrained

DOCUMENT = "We study attention over long documents. The band of each token covers its neighbours. " * 3


@pytest.fixture(scope="module")
def imported(led_hub, tmp_path_factory):
    out = tmp_path_factory.mktemp("led")
    ok("import-hf", led_hub, "--out", out)
    return out


def test_greedy_generation_equals_hfs(led_hub, imported):
    from transformers import LEDForConditionalGeneration

    hub = from_pretrained(imported)
    theirs = LEDForConditionalGeneration.from_pretrained(led_hub).eval()
    tokens = hub.encode(DOCUMENT)
    ours = hub.generate([tokens], beam=1, max_len_a=0, max_len_b=12, min_len=1)[0][0]["tokens"]
    first = torch.zeros_like(tokens)[None]
    first[0, 0] = 1  # <s> global, as the model reads its sources
    with torch.no_grad():
        hf = theirs.generate(tokens[None], global_attention_mask=first, num_beams=1, do_sample=False,
                             max_new_tokens=12, min_new_tokens=1, no_repeat_ngram_size=0, forced_bos_token_id=None,
                             forced_eos_token_id=None)[0]  # fmt: skip
    hf = hf[1:]  # HF's output starts with the decoder's start, </s>
    assert ours[: len(hf)].tolist() == hf[: len(ours)].tolist() and len(ours) >= 2
    assert hub.decode(ours) == hub.tokenizer.decode([t for t in ours.tolist() if t > 3])


def repeated_ngrams(tokens: list[int], n: int) -> list[tuple[int, ...]]:
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return sorted({g for g in grams if grams.count(g) > 1})


def test_sample_is_a_beam_search_that_repeats_no_3_gram(imported):
    """``sample``'s beam search (summarize's settings: beam 4, length penalty 2, no repeated
    3-gram) on an untrained model, whose favourite tokens repeat: fairseq 0.12 blocked no
    n-gram without its CUDA extension (longformer_fs.generation_fixes). Without the blocking
    the same search repeats 3-grams (so this model shows whether it blocks)."""
    hub = from_pretrained(imported)
    tokens = hub.encode(DOCUMENT)
    settings = {"beam": 4, "lenpen": 2.0, "min_len": 20, "max_len_a": 0, "max_len_b": 30}
    blocked = hub.generate([tokens], no_repeat_ngram_size=3, **settings)[0][0]["tokens"][:-1].tolist()
    free = hub.generate([tokens], no_repeat_ngram_size=0, **settings)[0][0]["tokens"][:-1].tolist()
    assert len(blocked) == 30 and not repeated_ngrams(blocked, 3)
    assert repeated_ngrams(free, 3), "the model repeats nothing: the test cannot see the blocking"
    assert hub.sample(DOCUMENT, min_len=20, max_len_b=30).split() == hub.decode(torch.tensor(blocked)).split()


def test_fairseqs_translate_and_sample_arguments_keep_their_meaning(imported, monkeypatch):
    """fairseq's ``GeneratorHubInterface.translate(sentences, beam, verbose)`` calls
    ``self.sample(sentences, beam, verbose)``: on our hub, ``verbose`` must not land in a
    generation setting (it once set the length penalty to 0). The settings reaching the
    beam search are recorded, and each search is then run cut to 8 tokens (the toy model
    would write 512); inherited calls that need fairseq's own BPE refuse in one line."""
    from fairseq.hub_utils import GeneratorHubInterface

    from longformer_fs.evaluation.summarization import GenerationSettings
    from longformer_fs.hub import led as led_hub

    hub = from_pretrained(imported)
    seen = []
    real = led_hub.generate

    def recorded(model, task, sources, settings, batch):
        seen.append(settings)
        return real(model, task, sources, dataclasses.replace(settings, min_len=1, max_len=8), batch)

    monkeypatch.setattr(led_hub, "generate", recorded)
    first = GeneratorHubInterface.translate(hub, [DOCUMENT], 3, False)
    assert seen[-1] == dataclasses.replace(GenerationSettings(), beam=3)  # lenpen 2.0, no repeated 3-gram
    assert hub.translate(DOCUMENT) == hub.sample(DOCUMENT) and seen[-1] == seen[-2] == GenerationSettings()
    assert hub.sample([DOCUMENT], 3, True) == first
    for call in (lambda: hub.fill_mask(["a <mask> b"]), lambda: hub.sample(DOCUMENT, 4, False, 2.0)):
        with pytest.raises((NotImplementedError, TypeError)) as refused:
            call()
        assert "\n" not in str(refused.value)
