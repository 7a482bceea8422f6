"""The character LM writes: its incremental decoder (a ring buffer of the keys and values each
layer's window reaches) equals recomputing the whole text, in float64, under fairseq's
SequenceGenerator (greedy, seeded sampling, beam search with reordered caches); the hub and
``longformer-fs sample`` write with it."""

import pytest
import torch
from helpers import argmax_continuation, assert_refused_in_one_line, cli

from longformer_fs import from_pretrained
from longformer_fs.modules.char_lm_decoder import DecoderShape, LongformerDecoder

# (windows per layer, dilations per layer and head, text length): windows smaller and larger
# than the text, dilated heads, and buffers that wrap around (reach + 1 < length).
SHAPES = [
    ((3, 5), ((1, 2, 1, 3), (2, 1, 1, 1)), 40),
    ((50, 100), ((1, 1, 2, 2), (1, 4, 1, 1)), 30),
    ((2, 2), ((1, 3, 2, 1), (3, 1, 2, 2)), 60),
]


def test_incremental_decoding_equals_recomputing_in_float64():
    torch.manual_seed(0)
    for windows, dilations, length in SHAPES:
        shape = DecoderShape(vocab_size=20, padding_idx=1, embed_dim=16, ffn_dim=32, num_heads=4, windows=windows,
                             dilations=dilations)  # fmt: skip
        model = LongformerDecoder(shape, dropout=0.0).double().eval()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.3)  # away from the initialisation's zeros
            tokens = torch.randint(4, 20, (3, length))
            whole, _ = model(tokens)
            caches = model.new_caches()
            steps = [model(tokens[:, :7], caches)[0]]  # a prompt, then one character at a time
            steps += [model(tokens[:, t : t + 1], caches)[0] for t in range(7, length)]
        torch.testing.assert_close(torch.cat(steps, dim=1), whole, atol=1e-12, rtol=0)
        for block, cache in zip(model.blocks, caches, strict=True):  # never more than the window reaches
            assert min(block.attn.reach() + 1, length) <= cache.keys.shape[2] <= block.attn.reach() + 1


def recomputing(hub):
    """The same network as a fairseq language model that is not incremental:
    SequenceGenerator then runs it over the whole text at every step."""
    from fairseq.hub_utils import GeneratorHubInterface
    from fairseq.models import FairseqDecoder, FairseqLanguageModel

    class WholeText(FairseqDecoder):
        def __init__(self, inner):
            super().__init__(inner.dictionary)
            self.inner = inner

        def forward(self, prev_output_tokens, **kwargs):
            return self.inner(prev_output_tokens)

        def max_positions(self):
            return self.inner.max_positions()

    return GeneratorHubInterface(hub.cfg, hub.task, [FairseqLanguageModel(WholeText(hub.model.decoder))])


def test_sequence_generator_decodes_incrementally_as_it_recomputes(tiny_char_lm):
    """Greedy, seeded sampling (temperature, top-k, top-p) and beam search with the caches
    reordered: token for token, the scores to float64 rounding."""
    hub = from_pretrained(tiny_char_lm[0]).double()
    whole = recomputing(hub).double()
    prompt = hub.encode("the cat sat on a mat and the dog ")
    length = len(prompt) - 1 + 40  # 40 characters past the prompt (beyond the 16-wide top window)
    cases = {
        "greedy": {"beam": 1},
        "sampling": {"beam": 1, "sampling": True, "temperature": 0.8, "sampling_topk": 5},
        "nucleus": {"beam": 2, "sampling": True, "sampling_topp": 0.9},
        "beam": {"beam": 4},
    }
    for name, settings in cases.items():
        outputs = []
        for generator in (hub, whole):
            torch.manual_seed(3)
            outputs.append(generator.generate([prompt], max_len_a=0, max_len_b=length, min_len=length, **settings)[0])
        # Beam search forces the prompt on one beam: the others carry -inf until they die.
        ours, theirs = ([h for h in hypotheses if h["score"] > float("-inf")] for hypotheses in outputs)
        assert len(ours) == len(theirs) >= 1, name
        for a, b in zip(ours, theirs, strict=True):
            assert torch.equal(a["tokens"], b["tokens"]), name
            torch.testing.assert_close(a["positional_scores"], b["positional_scores"], atol=1e-9, rtol=0)
        assert torch.equal(ours[0]["tokens"][: len(prompt) - 1], prompt[:-1])  # the prompt, then 40 more
        assert len(ours[0]["tokens"]) == length + 1  # and </s>


def test_sample_writes_the_continuation_and_the_command_prints_it(tiny_char_lm, tmp_path):
    hub = from_pretrained(tiny_char_lm[0])
    greedy = hub.sample("the cat ", max_new=30, greedy=True)
    assert len(greedy.encode()) == 30 and set(greedy) <= set("the cat sat on a mat and dog ran far")
    predicted, written = argmax_continuation(hub, "the cat ", greedy)
    assert predicted == written  # greedy is the argmax, recomputed over the whole text
    # fairseq's sample(sentences, beam, verbose): a list gives a list; translate refuses in one line.
    assert hub.sample(["the dog ", "the cat "], 1, True, max_new=30, greedy=True)[1] == greedy
    with pytest.raises(NotImplementedError, match="^translate: [^\n]*$"):
        hub.translate("the cat ")
    # Nucleus sampling with a nucleus of one byte is the argmax too; a prompt from a file is the prompt.
    (tmp_path / "prompt.txt").write_text("the cat ")
    nucleus = cli("sample", tiny_char_lm[0], "--prompt-file", tmp_path / "prompt.txt", "--max-new", "30",
                  "--top-p", "1e-6", "--seed", "3")  # fmt: skip
    assert nucleus.returncode == 0 and nucleus.stdout == greedy + "\n", nucleus.stderr
    wide = hub.sample("the cat ", max_new=30, top_p=0.95, seed=4)
    assert len(wide.encode()) == 30 and wide != greedy  # sampling, not the argmax
    assert hub.sample("the cat ", max_new=30, seed=7) == hub.sample("the cat ", max_new=30, seed=7)
    result = cli("sample", tiny_char_lm[0], "--prompt", "the cat ", "--max-new", "30", "--greedy")
    assert result.returncode == 0 and result.stdout == greedy + "\n", result.stderr
    result = cli("sample", tiny_char_lm[0], "--prompt", "the cat ", "--max-new", "30", "--seed", "7", "--top-k", "3")
    assert result.stdout == hub.sample("the cat ", max_new=30, top_k=3, seed=7) + "\n"
    beam = cli("sample", tiny_char_lm[0], "--prompt", "the cat ", "--max-new", "10", "--greedy", "--beam", "3")
    assert beam.returncode == 0 and len(beam.stdout) == 11


def test_sample_refuses_an_unreadable_checkpoint_in_one_line(tiny_char_lm, tmp_path):
    """A truncated checkpoint, and one whose pickle would run code: one line, nothing run."""
    assert_refused_in_one_line(tmp_path, ["sample", "{checkpoint}", "--prompt", "the ", "--max-new", "5"],
                               tmp_path / "bad", tiny_char_lm[0])  # fmt: skip
