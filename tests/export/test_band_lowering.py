"""The band attention op lowered to ONNX (``longformer_fs/export/onnx_band.py``): a Longformer
attention layer exported once, with a dynamic length, runs in onnxruntime at every length
and equals the float64 dense oracle (the layer on the reference backend)."""

import numpy as np
import pytest
import torch

from longformer_fs.attention.layer import LongformerSelfAttention
from longformer_fs.export.onnx_translations import TRANSLATIONS

WIDTH, HEADS, WINDOW = 32, 4, 8


class Layer(torch.nn.Module):
    """The attention layer with its padding as an input, in fairseq's (T, B, C)."""

    def __init__(self, causal: bool, backend: str, dilation: int = 1):
        super().__init__()
        torch.manual_seed(0)
        self.attention = LongformerSelfAttention(WIDTH, HEADS, WINDOW, dilation, causal=causal, backend=backend)

    def forward(self, x, padding):
        return self.attention(x, key_padding_mask=padding)


def export(layer):
    x, padding = torch.randn(50, 2, WIDTH), torch.zeros(2, 50, dtype=torch.bool)
    length = torch.export.Dim("length", min=2, max=16384)
    return torch.onnx.export(layer, (x, padding), dynamo=True, dynamic_shapes=({0: length}, {1: length}),
                             custom_translation_table=TRANSLATIONS, verbose=False)  # fmt: skip


@pytest.fixture(scope="module", params=[False, True], ids=["bidirectional", "causal"])
def exported(request, tmp_path_factory):
    import onnxruntime

    layer = Layer(request.param, "kernel").eval()
    path = tmp_path_factory.mktemp("onnx") / "layer.onnx"
    export(layer).save(str(path))
    oracle = Layer(request.param, "reference").double().eval()
    oracle.load_state_dict(layer.state_dict())
    return onnxruntime.InferenceSession(str(path)), oracle


@pytest.mark.parametrize("length", [2, 3, 7, 8, 9, 37, 100, 513, 2049])
def test_one_graph_serves_every_length_and_padding(exported, length):
    """Lengths below, at and past the window, not multiples of it; row 1 padded past half."""
    session, oracle = exported
    x = torch.randn(length, 2, WIDTH)
    padding = torch.zeros(2, length, dtype=torch.bool)
    padding[1, length // 2 + 1 :] = True
    names = [i.name for i in session.get_inputs()]
    (got,) = session.run(None, dict(zip(names, [x.numpy(), padding.numpy()], strict=True)))
    with torch.no_grad():
        want = oracle(x.double(), padding).numpy()
    real = ~padding.T.numpy()  # padded rows are zeroed by the layer on both sides
    np.testing.assert_allclose(got[real], want[real], atol=1e-5, rtol=1e-5)
    assert got.shape == (length, 2, WIDTH)


def test_dilated_heads_are_refused_by_name():
    with pytest.raises(Exception, match=r"dilated heads \(\[2, 2, 2, 2\]\) are not lowered"):
        export(Layer(False, "kernel", dilation=2).eval())


def test_a_layer_called_without_padding(tmp_path):
    """No key mask reaches the op: every key in the band is kept."""
    import onnxruntime

    class Unpadded(Layer):
        def forward(self, x):
            return self.attention(x)

    layer = Unpadded(False, "kernel").eval()
    length = torch.export.Dim("length", min=2, max=16384)
    program = torch.onnx.export(layer, (torch.randn(50, 2, WIDTH),), dynamo=True, dynamic_shapes=({0: length},),
                                custom_translation_table=TRANSLATIONS, verbose=False)  # fmt: skip
    program.save(str(tmp_path / "layer.onnx"))
    session = onnxruntime.InferenceSession(str(tmp_path / "layer.onnx"))
    oracle = Unpadded(False, "reference").double().eval()
    oracle.load_state_dict(layer.state_dict())
    for length in (5, 77):
        x = torch.randn(length, 2, WIDTH)
        (got,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
        with torch.no_grad():
            np.testing.assert_allclose(got, oracle(x.double()).numpy(), atol=1e-5, rtol=1e-5)
