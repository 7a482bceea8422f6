"""recipes/char_lm: the paper's values, and the make-driven phase chain on tiny data."""

import os

import pytest
import torch
from helpers import ROOT, compose_recipe, free_port, make

RECIPES = ROOT / "recipes" / "char_lm"

# Paper, Appendix A (docs/design.md §4), written out independently of the YAML.
PAPER = {
    "seq": [2048, 4096, 8192, 16384, 23040],
    "batch": [32, 32, 16, 16, 16],
    "lr": [2.5e-4, 1.25e-4, 6.25e-5, 3.125e-5, 1.5625e-5],
    "steps": {"small": [430_000, 50_000, 50_000, 35_000, 5_000], "large": [350_000, 25_000, 10_000, 5_000, 5_000]},
    "layers": {"small": 12, "large": 30},
    "dropout": {"small": 0.2, "large": 0.4},
    # the paper's dilation numbers per layer (0 = no gaps), on 2 heads
    "dilation": {"small": [0] * 6 + [1] * 2 + [2] * 2 + [3] * 2, "large": [0] * 15 + [1] * 5 + [2] * 5 + [3] * 5},
}


def compose(name, overrides=()):
    return compose_recipe(RECIPES, name, ["task.data=/data", *overrides])


@pytest.mark.parametrize("size", ["small", "large"])
def test_every_phase_composes_with_the_papers_values(size):
    from longformer_fs.modules.per_layer import layer_values

    previous = None
    for phase in range(1, 6):
        cfg = compose(f"{size}_phase{phase}")
        i = phase - 1
        steps = PAPER["steps"][size][i]
        assert cfg.task._name == "longformer_char_lm" and cfg.criterion._name == "bpc_cross_entropy"
        assert cfg.task.tokens_per_sample == PAPER["seq"][i]
        assert cfg.dataset.batch_size == PAPER["batch"][i]
        assert cfg.optimization.lr == [pytest.approx(PAPER["lr"][i])]
        assert cfg.optimization.max_update == steps
        assert cfg.lr_scheduler._name == "fixed" and cfg.lr_scheduler.warmup_updates == min(steps // 10, 10_000)
        assert cfg.optimization.clip_norm == 0.25
        assert cfg.optimizer._name == "adam" and cfg.optimizer.weight_decay == 0.01  # fairseq's Adam is AdamW
        assert cfg.model.decoder_layers == PAPER["layers"][size]
        assert (cfg.model.decoder_attention_heads, cfg.model.decoder_embed_dim) == (8, 512)
        assert cfg.model.dropout == PAPER["dropout"][size]
        assert cfg.model.dilated_heads == 2
        dil = [int(x) for x in cfg.model.attention_dilation.split(",")]
        assert dil == [n + 1 for n in PAPER["dilation"][size]]
        windows = layer_values(cfg.model.attention_window, cfg.model.decoder_layers)
        assert list(windows) == sorted(windows)  # grow from the bottom layer to the top
        assert windows[0] == 32 * 2**i and (phase == 5 or windows[-1] == 8192 * 2**i)
        assert cfg.common.user_dir.endswith("longformer_fs") and cfg.hydra.job.chdir is False
        assert cfg.common.tensorboard_logdir
        if previous is not None:  # windows double, the learning rate halves
            assert windows[0] == 2 * previous[0][0] and windows[-1] == 2 * previous[0][-1]
            assert cfg.optimization.lr[0] == pytest.approx(previous[1] / 2)
        previous = (windows, cfg.optimization.lr[0])


# ---------------------------------------------------------------- the deprecated spellings


def build_lm(model_cfg):
    """``model_cfg`` built as fairseq-hydra-train builds it (merged into the dataclass)."""
    from fairseq import models
    from fairseq.data import Dictionary
    from omegaconf import OmegaConf

    import longformer_fs.models.longformer_lm  # noqa: F401 (registers the model)

    # fairseq-hydra-train resolves the composed config into a plain one first.
    cfg = OmegaConf.create({"model": OmegaConf.to_container(model_cfg, resolve=True)})
    task = type("Task", (), {"target_dictionary": Dictionary()})()
    return models.build_model(cfg.model, task).decoder.net.shape


# The recipe's 12 layers, narrower.
NARROW = ["model.decoder_embed_dim=16", "model.decoder_ffn_embed_dim=32"]


def test_an_old_hydra_config_and_old_overrides_still_build(tmp_path, caplog):
    """A config written before the rename, overridden with the old key, builds the model it meant."""
    (tmp_path / "old.yaml").write_text(
        "model:\n  _name: longformer_lm\n  decoder_layers: 2\n  decoder_embed_dim: 16\n"
        "  decoder_ffn_embed_dim: 32\n  decoder_attention_heads: 4\n"
        '  attention_windows: "8:32"\n  attention_dilations: "1,2"\n'
    )
    cfg = compose_recipe(tmp_path, "old", ["model.attention_windows=4:16"], return_hydra_config=False)
    with caplog.at_level("WARNING"):
        shape = build_lm(cfg.model)
    assert shape.windows == (4, 16) and shape.dilations == ((1, 1, 1, 1), (1, 1, 2, 2))
    assert "use --attention-window (model.attention_window)" in caplog.text


def test_an_old_override_on_a_recipe_names_the_key_to_use():
    """The recipes set model.attention_window; the old key on top is a disagreement, said as one."""
    shape = build_lm(compose("small_phase1", [*NARROW, "model.attention_window=4:16"]).model)
    assert shape.windows[0] == 4 and shape.windows[-1] == 16
    cfg = compose("small_phase1", [*NARROW, "model.attention_windows=4:16"])
    with pytest.raises(ValueError, match=r"'4:16' against '32:8192'.*give only --attention-window "
                       r"\(model.attention_window\)"):  # fmt: skip
        build_lm(cfg.model)


# ---------------------------------------------------------------- the chain, for real

TINY = [
    "model.decoder_layers=2",
    "model.decoder_embed_dim=32",
    "model.decoder_ffn_embed_dim=64",
    "model.decoder_attention_heads=4",
    "model.attention_dilation=\"'1,2'\"",
    "model.attention_window=4:16",
    "task.tokens_per_sample=64",
    "dataset.batch_size=8",
    "common.log_interval=5",
    "dataset.num_workers=0",
    "dataset.validate_interval_updates=10",
    "checkpoint.save_interval_updates=10",
    "lr_scheduler.warmup_updates=2",
]


@pytest.fixture(scope="module")
def data(tmp_path_factory, char_corpus):
    """This module's directory: data/ is the Makefile's DATA (the shared tiny text8), ckpt/ its SAVE."""
    tmp = tmp_path_factory.mktemp("recipe")
    (tmp / "data").symlink_to(char_corpus.parent, target_is_directory=True)
    return tmp


def make_phase(target, data, *overrides):
    hydra_args = "HYDRA_ARGS=" + " ".join(TINY + list(overrides))
    return make(target, f"DATA={data / 'data'}", f"SAVE={data / 'ckpt'}", hydra_args, timeout=600)


def updates(path):
    return torch.load(path, weights_only=False)["optimizer_history"][-1]["num_updates"]


def weights(path):
    return torch.load(path, weights_only=False)["model"]


def test_phases_chain_resume_and_refuse_a_missing_start(data):
    ckpt = data / "ckpt" / "text8" / "small"
    missing = make_phase("text8-phase3", data)
    assert missing.returncode != 0 and "phase 3 starts from" in missing.stdout + missing.stderr

    first = make_phase("text8-phase1", data, "optimization.max_update=20", "optimization.lr=[3e-3]")
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    assert updates(ckpt / "phase1" / "checkpoint_last.pt") == 20

    # Relaunching with a later max_update resumes from update 20.
    resumed = make_phase("text8-phase1", data, "optimization.max_update=30", "optimization.lr=[3e-3]")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "Loaded checkpoint" in resumed.stdout + resumed.stderr
    assert updates(ckpt / "phase1" / "checkpoint_last.pt") == 30

    # Phase 2 starts from phase 1's weights (lr 0 keeps them) with a fresh update count.
    second = make_phase("text8-phase2", data, "optimization.max_update=3", "optimization.lr=[0.0]")
    assert second.returncode == 0, second.stderr[-2000:]
    assert updates(ckpt / "phase2" / "checkpoint_last.pt") == 3
    start, end = weights(ckpt / "phase1" / "checkpoint_last.pt"), weights(ckpt / "phase2" / "checkpoint_last.pt")
    name = "decoder.net.blocks.1.attn.pos_proj.weight"
    assert torch.equal(start[name], end[name])
    assert set(start) == set(end)


def test_make_phase_in_two_processes(data, tmp_path):
    """`make text8-phase1 NPROC=2`: fairseq-hydra-train under torchrun, one model, twice the batch."""
    hydra_args = "HYDRA_ARGS=" + " ".join(TINY + ["optimization.max_update=4", "dataset.batch_size=4"])
    result = make("text8-phase1", "NPROC=2", f"TORCHRUN_ARGS=--master-port {free_port()}", f"DATA={data / 'data'}",
                  f"SAVE={tmp_path}", hydra_args, env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=600)  # fmt: skip
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-3000:]
    assert "distributed init (rank 1): env://" in log and "'distributed_world_size': 2" in log
    assert updates(tmp_path / "text8" / "small" / "phase1" / "checkpoint_last.pt") == 4
