"""How longformer_roberta learns that the batch marks its global tokens: a declared model
flag, ``--global-attention-from-data``, which the token-head tasks set."""

import argparse

import pytest
from omegaconf import OmegaConf

from longformer_fs.models.longformer_roberta import LongformerRobertaModel
from longformer_fs.tasks.qa import QaConfig, QaTask

TINY = ["--encoder-layers", "1", "--encoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32"]
TINY += ["--encoder-attention-heads", "2", "--max-positions", "64", "--attention-window", "4"]


def training_args(*extra):
    from fairseq import options

    parser = options.get_training_parser()
    return options.parse_args_and_arch(parser, ["data", "--arch", "longformer_roberta_base", *TINY, *extra])


@pytest.fixture
def qa_task(tmp_path):
    (tmp_path / "dict.txt").write_text("".join(f"w{i} 1\n" for i in range(20)))
    return QaTask.setup_task(QaConfig(data=str(tmp_path)))


def global_projections_trainable(model) -> set:
    encoder = model.encoder.sentence_encoder
    return {
        p.requires_grad
        for a in encoder.attention_modules()
        for proj in a.global_projections()
        for p in proj.parameters()
    }


def test_the_model_declares_the_flag_with_help():
    parser = argparse.ArgumentParser()
    LongformerRobertaModel.add_args(parser)
    action = next(a for a in parser._actions if a.dest == "global_attention_from_data")
    assert action.option_strings == ["--global-attention-from-data"] and action.default is False
    assert "longformer_qa" in action.help and "longformer_wikihop" in action.help
    # fairseq suppresses model flags' defaults: the models read it with safe_getattr(..., False).
    assert not hasattr(training_args(), "global_attention_from_data")
    assert training_args("--global-attention-from-data").global_attention_from_data is True


def test_a_masked_lm_model_keeps_its_global_projections_frozen(qa_task):
    model = LongformerRobertaModel.build_model(training_args(), qa_task)
    assert global_projections_trainable(model) == {False}


def test_the_token_head_task_sets_the_flag_for_the_user(qa_task):
    args = training_args()  # the user's command does not name the flag
    model = qa_task.build_model(args)
    assert args.global_attention_from_data is True
    assert global_projections_trainable(model) == {True}


def test_a_config_written_before_the_flag_still_builds(qa_task):
    """A checkpoint's cfg.model from before the flag lacks the key; struct mode refuses new keys."""
    settings = vars(training_args())
    assert "global_attention_from_data" not in settings
    cfg = OmegaConf.create({k: v for k, v in settings.items() if isinstance(v, (int, float, str, bool, type(None)))})
    OmegaConf.set_struct(cfg, True)
    model = qa_task.build_model(cfg)
    assert cfg.global_attention_from_data is True
    assert global_projections_trainable(model) == {True}
