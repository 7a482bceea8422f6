"""The recipes train on the machine they are given (longformer_fs/precision.py): where fairseq
cannot train in a recipe's fp16, the recipe trains in float32 and says so in one line; a
precision the user asks for there is refused in one line. And every recipe validates on
every item."""

import subprocess  # fairseq-hydra-train's exit code and one line, as a shell sees them

import pytest
import torch
from helpers import BIN, ROOT, command, compose_recipe
from omegaconf import OmegaConf

from longformer_fs.precision import FitToDevice

RECIPES = sorted(p for p in (ROOT / "recipes").glob("*/*.yaml"))
NEEDED = ["task.data=data-bin/x", "checkpoint.finetune_from_model=model.pt"]


def composed(name="triviaqa", overrides=()):
    return compose_recipe(ROOT / "recipes" / "finetune", name, [*NEEDED, *overrides])


@pytest.fixture
def no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_a_recipes_fp16_becomes_float32_without_cuda_and_one_line_says_so(no_cuda, capsys):
    cfg = composed()
    assert cfg.common.fp16
    FitToDevice().on_run_start(config=cfg, config_name="triviaqa")
    assert cfg.common.fp16 is False
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no CUDA device" in err[0] and "recipe triviaqa trains in float32" in err[0]
    assert "common.fp16=false" in err[0] and "assume GPUs" in err[0]


def test_a_gpu_keeps_the_recipes_fp16(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    cfg = composed()
    FitToDevice().on_run_start(config=cfg, config_name="triviaqa")
    assert cfg.common.fp16 is True and capsys.readouterr().err == ""


def test_precision_the_user_asks_for_is_refused_in_one_line(no_cuda, capsys):
    for override in ("common.fp16=true", "++common.bf16=true", "++common.cpu=true ++common.amp=true"):
        cfg = composed(overrides=override.split())
        with pytest.raises(SystemExit) as stop:
            FitToDevice().on_run_start(config=cfg, config_name="triviaqa")
        assert stop.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        asked = override.split()[-1].lstrip("+").split("=")[0]
        assert len(err) == 1 and err[0].startswith(f"longformer-fs: error: {asked}"), err


def test_bfloat16_on_a_gpu_without_it_is_refused(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Tesla V100-SXM2-16GB")
    cfg = composed(overrides=["++common.bf16=true"])
    with pytest.raises(SystemExit):
        FitToDevice().on_run_start(config=cfg, config_name="triviaqa")
    assert "Tesla V100-SXM2-16GB) cannot compute in bfloat16" in capsys.readouterr().err


def test_fairseq_hydra_train_run_directly_refuses_in_one_line():
    result = subprocess.run(
        command([BIN / "fairseq-hydra-train", "--config-dir", ROOT / "recipes" / "finetune", "--config-name", "imdb",
                 *NEEDED, "common.fp16=true"]),
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1].startswith("longformer-fs: error: common.fp16: ")


@pytest.mark.parametrize("path", RECIPES, ids=[f"{p.parent.name}/{p.stem}" for p in RECIPES])
def test_every_recipe_fits_the_device_and_keeps_every_item(path):
    recipe = OmegaConf.load(path)
    assert recipe.hydra.callbacks.fit_to_device._target_ == "longformer_fs.precision.FitToDevice"
    # fairseq's default multiple (8) drops the last batch's remainder, in validation too.
    assert recipe.dataset.required_batch_size_multiple == 1
