"""The GPU path rehearsed with compiled layers (``compile_layers``): dynamo and AOTAutograd
over the rehearsal's meta tensors, compiled with ``aot_eager`` (what inductor receives, without
its code generation, which meta cannot run), a fresh dynamo for each recipe as a training
process starts it. tests/rehearsal.py says what fails a step; here also a graph break, a
compile after the second length, a copy from the host in the dynamic graph's second step.

One recipe per distinct compiled layer and attention: the character LM (its blocks over
relative ``flex``), TriviaQA (the encoder layer with global tokens), MLM (the same layer without
them) and LED (its encoder and decoder layers, under activation checkpointing). The other
fine-tuning recipes compile the same encoder layer as TriviaQA's, with global tokens, or as
MLM's, without; only their batches and heads, outside the compiled layers, differ, and
test_rehearsal.py runs each of them eagerly.
"""

from __future__ import annotations

import pytest
import torch
from rehearsal import rehearse

from longformer_fs.attention import layer
from longformer_fs.rehearsal import RehearsalFailure

pytestmark = pytest.mark.slow  # each recipe's compiled layers traced and compiled

COMPILED = ["char_lm_phase1", "triviaqa", "mlm_base", "led_base"]


@pytest.mark.parametrize("name", COMPILED)
def test_compiled_layers_rehearsed(name, tmp_path):
    seen = rehearse(name, tmp_path, compile_layers=True)
    assert seen.compiled_calls and seen.compiles[0] > 0
    assert not seen.calls  # every band call inside a compiled graph


def test_it_fails_on_a_graph_break_in_a_compiled_layer(monkeypatch, tmp_path):
    forward = layer.LongformerSelfAttention.forward

    def breaking(self, *args, **kwargs):
        torch._dynamo.graph_break()
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(layer.LongformerSelfAttention, "forward", breaking)
    with pytest.raises(RehearsalFailure, match=r"triviaqa: graph breaks in compiled layers"):
        rehearse("triviaqa", tmp_path, compile_layers=True)


def test_it_fails_on_flex_geometry_traced_into_a_compiled_layer(monkeypatch, tmp_path):
    """Without its geometry built before the graph (``prepare_compiled``), a compiled block
    traces through flex's cache, and its graph rebuilds the tile lists on the host and copies
    them to the device at every call."""
    from longformer_fs.modules.char_lm_decoder import DecoderBlock

    monkeypatch.delattr(DecoderBlock, "prepare_compiled")
    with pytest.raises(RehearsalFailure, match=r"char_lm_phase1: copies from the host .*aten\._to_copy"):
        rehearse("char_lm_phase1", tmp_path, compile_layers=True)
