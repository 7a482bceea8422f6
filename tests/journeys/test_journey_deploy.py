"""docs/deploy.md's journey: a released TriviaQA model as the hub serves it, imported,
exported to ONNX, and served by the page's serve_qa.py, which the test saves as the page
tells the user to, and runs in an interpreter that cannot import torch. Its answer is the
span HF's own PyTorch model scores best under the page's rule."""

import re

import numpy as np
import pytest
import torch
from hf_models import save_model, scaled, vocab_size
from journey import Journey, Workspace
from pages import ROOT

pytestmark = pytest.mark.slow  # a journey: its page's command blocks run as written, as processes

JOURNEY = Journey("deploy")
PAGE = ROOT / "docs" / "deploy.md"
HUB = "longformer-large-4096-finetuned-triviaqa"
QUESTION, DOCUMENT = "Who wrote the play?", "The play was written by William Shakespeare around 1600."


def test_a_released_qa_model_exported_and_served_without_torch(hub_tokenizer, tmp_path):
    from tokenizers import Tokenizer
    from transformers import LongformerConfig, LongformerForQuestionAnswering

    config = LongformerConfig(vocab_size=vocab_size(hub_tokenizer), hidden_size=32, num_hidden_layers=2,
                              num_attention_heads=4, intermediate_size=64, attention_window=[16, 16],
                              max_position_embeddings=4098, layer_norm_eps=1e-5, type_vocab_size=1)  # fmt: skip
    theirs = scaled(LongformerForQuestionAnswering(config))
    workspace = Workspace(tmp_path / "checkout")
    save_model(theirs, hub_tokenizer, workspace.path(HUB))
    (serve,) = re.findall(r"^```python\n(.*?)^```", PAGE.read_text(), re.M | re.S)
    # torch cannot be imported where the page's script runs: it serves with onnxruntime alone.
    workspace.path("serve_qa.py").write_text("import sys\nsys.modules['torch'] = None\n" + serve)

    logs = JOURNEY.run(workspace)
    answer = logs[JOURNEY.steps[-1]].strip().splitlines()[-1]

    pair = Tokenizer.from_file(str(workspace.path(HUB) / "tokenizer.json")).encode(QUESTION, DOCUMENT)
    ids = torch.tensor([pair.ids])
    with torch.no_grad():
        out = theirs(input_ids=ids, global_attention_mask=(torch.arange(len(pair.ids)) < pair.ids.index(2))[None])
    start, end = out.start_logits[0].numpy(), out.end_logits[0].numpy()
    document = [k for k, s in enumerate(pair.sequence_ids) if s == 1]
    spans = [(i, j) for i in document for j in document if i <= j < i + 30]
    i, j = spans[int(np.argmax([start[i] + end[j] for i, j in spans]))]
    assert answer == DOCUMENT[pair.offsets[i][0] : pair.offsets[j][1]] and answer
