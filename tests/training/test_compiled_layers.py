"""``--compile-layers``: each model's layers compiled in training, one region per layer type.

For the character LM, the QA encoder with its global question and LED (encoder and decoder
layers), built and trained as fairseq-train does, over batches of four lengths: no graph
break, a bounded number of graphs (two per distinct layer setting and type: the first
length static, the rest under one dynamic shape; none after the second length), and the
same losses and gradients as the eager model. Compiled with ``aot_eager``: dynamo and
AOTAutograd trace exactly what inductor receives, without its code generation.
"""

from __future__ import annotations

import pytest
import torch
from model_steps import MODELS, train_step

from longformer_fs.modules import compiled

LENGTHS = {"char_lm": (48, 56, 64, 72), "qa_encoder": (60, 70, 80, 90), "led": (60, 70, 80, 90)}
# Distinct (layer type, setting) pairs: the two blocks' windows; one encoder setting (two
# layers); LED's encoder layers, and its three decoder layers in two (fairseq's last one
# returns its attention weights).
SETTINGS = {"char_lm": 2, "qa_encoder": 1, "led": 3}
EXTRA = {"char_lm": (), "qa_encoder": (), "led": ("--decoder-layers", "3")}


@pytest.fixture
def counted(monkeypatch):
    """dynamo's counters and a graph-counting backend, fresh."""
    from torch._dynamo.testing import CompileCounterWithBackend
    from torch._dynamo.utils import counters

    counter = CompileCounterWithBackend("aot_eager")
    monkeypatch.setattr(compiled, "BACKEND", counter)
    compiled.compiled.cache_clear()
    torch._dynamo.reset()
    counters.clear()
    yield counter, counters
    compiled.compiled.cache_clear()
    torch._dynamo.reset()


def without_dropout(model):
    """The model with every dropout at 0: the one draw a compiled step and an eager one
    would make differently."""
    for module in model.modules():
        if hasattr(module, "p") and isinstance(module.p, float):  # fairseq's dropout modules
            module.p = 0.0
        if hasattr(module, "dropout") and isinstance(module.dropout, float):  # ours
            module.dropout = 0.0
    return model


@pytest.mark.parametrize("name", list(MODELS))
def test_compiled_layers_train_as_eager_ones_in_a_bounded_number_of_graphs(name, tmp_path, counted):
    """One model, as a training run has, over batches of four lengths, beside its eager twin
    (the same weights): each step's loss, and the first step's gradients, equal."""
    counter, counters = counted
    twins = []
    for extra in (["--compile-layers"], []):
        torch.manual_seed(0)
        task, model, criterion, _, _ = MODELS[name](tmp_path, LENGTHS[name][0], *extra, *EXTRA[name])
        twins.append((task, without_dropout(model), criterion))
    graphs = []
    for step, length in enumerate(LENGTHS[name]):
        sample = MODELS[name](tmp_path, length)[3]
        losses, grads = [], []
        for task, model, criterion in twins:
            model.zero_grad()
            losses.append(train_step(task, model, criterion, sample)[0].detach())
            grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
        torch.testing.assert_close(losses[0], losses[1], atol=1e-5, rtol=1e-5)
        if step == 0:
            assert grads[0].keys() == grads[1].keys() and grads[0]
            for key in grads[0]:
                torch.testing.assert_close(grads[0][key], grads[1][key], atol=1e-5, rtol=1e-4, msg=key)
        graphs.append(counter.frame_count)
    assert not counters["graph_break"], dict(counters["graph_break"])
    assert graphs[0] >= SETTINGS[name], graphs  # the layers did run compiled
    assert graphs[-1] == graphs[1] <= 2 * SETTINGS[name], graphs  # nothing compiled after the second length


def test_evaluation_stays_eager(tmp_path, counted):
    task, model, criterion, sample, _ = MODELS["qa_encoder"](tmp_path, 60, "--compile-layers")
    model.eval()
    with torch.no_grad():
        criterion(model, sample)
    assert counted[0].frame_count == 0
