"""The LED hub (fairseq's BART interface for led) against HF transformers' LED on a model
imported from the hub's layout: greedy generation token for token; and its summaries are
``summarize``'s."""

import json

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


def test_sample_summarizes_as_the_summarize_command(imported, tmp_path):
    hub = from_pretrained(imported)
    (tmp_path / "doc.txt").write_text(DOCUMENT)
    ok("summarize", imported / "model.pt", tmp_path / "doc.txt", "--min-len", "2", "--max-len", "10",
       "--out", tmp_path / "s.jsonl")  # fmt: skip
    written = json.loads((tmp_path / "s.jsonl").read_text())["summary"]
    assert hub.sample(DOCUMENT, min_len=2, max_len_b=10) == written
    assert hub.sample([DOCUMENT, DOCUMENT[:80]], min_len=2, max_len_b=10)[0] == written
