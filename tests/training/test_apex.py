"""Our models with and without NVIDIA apex.

apex is not on the package index, so its presence is simulated with a stub package in
this test only (fused LayerNorm, FusedAdam, amp_C's multi-tensor L2 norm, behaving like
torch's). fairseq imports apex's kernels when it can, and uses them on CUDA only; the
models must build and train either way, and `longformer-fs info` must say what fairseq
takes from it.
"""

import contextlib
import io
import json
import os
import subprocess  # fresh interpreters: fairseq decides on apex at its import

import pytest
from helpers import ROOT, cli_code, ok

STUB = {
    "apex/__init__.py": "",
    "apex/normalization/__init__.py": ("import torch\nclass FusedLayerNorm(torch.nn.LayerNorm):\n    pass\n"),
    "apex/multi_tensor_apply/__init__.py": (
        "class _Applier:\n"
        "    available = True\n"
        "    def __call__(self, op, buf, tensors, *args):\n"
        "        return op(buf, tensors, *args)\n"
        "multi_tensor_applier = _Applier()\n"
    ),
    "apex/optimizers/__init__.py": (
        "import torch\nclass FusedAdam(torch.optim.Adam):\n    pass\nclass FusedLAMB(torch.optim.Adam):\n    pass\n"
    ),
    "amp_C.py": (
        "import torch\n"
        "def multi_tensor_l2norm(buf, tensors, per_tensor):\n"
        "    norm = torch.stack([t.norm() for t in tensors[0]]).norm()\n"
        "    return norm, None\n"
    ),
}

TRAIN = """
import torch, longformer_fs
from argparse import Namespace
from fairseq.data import Dictionary
from fairseq.optim.adam import FairseqAdam
from longformer_fs.models.longformer_roberta import LongformerRobertaModel
from longformer_fs.models.longformer_lm import LongformerLanguageModel, LongformerLMConfig
import fairseq.modules.layer_norm as ln
print("fused_layer_norm_importable", ln.has_fused_layernorm)
d = Dictionary()
for i in range(20):
    d.add_symbol(f"w{i}")
d.add_symbol("<mask>")
task = Namespace(source_dictionary=d, target_dictionary=d)
args = Namespace(arch="longformer_roberta_base", encoder_layers=1, encoder_embed_dim=16, encoder_ffn_embed_dim=32,
                 encoder_attention_heads=2, attention_window="4", global_attention_tokens="<s>",
                 max_positions=64, dropout=0.0)
models = [LongformerRobertaModel.build_model(args, task)]
cfg = LongformerLMConfig(decoder_layers=1, decoder_embed_dim=16, decoder_ffn_embed_dim=32, decoder_attention_heads=2,
                         attention_window="4", attention_dilation="1", dilated_heads=0)
models.append(LongformerLanguageModel.build_model(cfg, task))
tokens = torch.randint(4, 24, (2, 20))
tokens[:, 0] = d.bos()
for model in models:
    cfg = Namespace(lr=[1e-3], adam_betas="(0.9, 0.98)", adam_eps=1e-8, weight_decay=0.0, use_old_adam=False,
                    fp16_adam_stats=False, tpu=False)
    opt = FairseqAdam(cfg, [p for p in model.parameters() if p.requires_grad])
    before = [p.detach().clone() for p in model.parameters()]
    for _ in range(2):
        opt.zero_grad()
        model(tokens)[0].float().sum().backward()
        opt.step()
    moved = any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    print(type(model).__name__, "trained", moved, type(opt.optimizer).__name__)
"""


@pytest.fixture(scope="module")
def stub(tmp_path_factory):
    root = tmp_path_factory.mktemp("apex_stub")
    for name, text in STUB.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


INFO = cli_code("info", "--json")


@pytest.fixture(scope="module")
def outputs(stub, fresh_python):
    """Training and ``longformer-fs info --json``, each without and with the stub:
    ``{(what, with_apex): stdout}``. With it, fresh interpreters (conftest's fresh_python:
    fairseq not yet imported) importing fairseq with the stub on their path, side by side;
    without it, this process (no apex either; its fairseq imported without one)."""
    env = dict(os.environ, PYTHONPATH=str(stub) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    processes = {
        (what, True): subprocess.Popen([fresh_python, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       text=True, cwd=ROOT, env=env)
        for what, code in (("train", TRAIN), ("info", INFO))
    }  # fmt: skip
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(TRAIN, "TRAIN", "exec"), {})
    results = {("train", False): printed.getvalue(), ("info", False): ok("info", "--json")}
    for key, proc in processes.items():
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
        results[key] = out
    return results


@pytest.mark.parametrize("with_apex", [False, True], ids=["without-apex", "with-apex-stub"])
def test_models_build_and_train(outputs, with_apex):
    out = outputs["train", with_apex]
    assert f"fused_layer_norm_importable {with_apex}" in out
    assert "LongformerRobertaModel trained True" in out and "LongformerLanguageModel trained True" in out
    assert out.count("trained True Adam") == 2  # fairseq's own Adam on CPU; FusedAdam only on CUDA


def test_info_reports_apex(outputs):
    without = json.loads(outputs["info", False])["apex"]
    assert without["installed"] is False and without["fairseq_uses"] == {}
    with_stub = json.loads(outputs["info", True])["apex"]
    assert with_stub["installed"] is True
    available = with_stub["available_kernels"]
    assert available["fused_layer_norm"] and available["fused_adam"] == "FusedAdamV2"
    assert available["multi_tensor_l2norm"]
    assert "no GPU" in (with_stub["note"] or "") or with_stub["fairseq_uses"]["fused_layer_norm"]
