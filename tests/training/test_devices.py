"""Every model, head and criterion runs with its inputs and parameters on a device other
than the CPU: the ``meta`` device, where a tensor made on the CPU inside the model meets
a meta tensor and raises, as it would meet a CUDA tensor on a GPU. CI has no GPU; this
catches what broke the character LM there (a sinusoid table built on the CPU).

Values cannot be read back from meta tensors. The models run as in a compiled training
run, with a static bound on the global tokens (``--max-global-tokens``), and the few
branches that read a mask back (``if pad.any()``, fairseq's ``if has_pads``) see True
on meta, as for a batch with padding. Each band backend that runs on
GPUs is tried. FlexAttention itself refuses meta tensors, so for ``flex`` a stand-in
takes its place that checks the device of everything the backend hands it (inputs,
block lists, and the tensors its ``mask_mod`` and ``score_mod`` read).
"""

import argparse
import types

import pytest
import torch
from fairseq.data import Dictionary
from rehearsal import Items

from longformer_fs.attention import LongformerSelfAttention
from longformer_fs.attention.relative_layer import RelativeBandSelfAttention
from longformer_fs.conventions import HOTPOTQA_SYMBOLS
from longformer_fs.criterions.coref import CorefCriterion
from longformer_fs.criterions.hotpotqa import HotpotqaCriterion
from longformer_fs.criterions.qa import QaCriterion
from longformer_fs.criterions.wikihop import WikihopCriterion
from longformer_fs.heads import QA_HEAD
from longformer_fs.models.led import LEDModel
from longformer_fs.models.longformer_lm import LongformerLanguageModel, LongformerLMConfig
from longformer_fs.models.longformer_roberta import LongformerRobertaModel
from longformer_fs.tasks.coref import CorefDataset, CorefTask, CorefTaskConfig
from longformer_fs.tasks.hotpotqa import HotpotqaConfig, HotpotqaDataset, HotpotqaTask
from longformer_fs.tasks.wikihop import CANDIDATE_HEAD

META = torch.device("meta")
BACKENDS = ["flex", "chunks", "kernel"]
T, B = 40, 2


@pytest.fixture(autouse=True)
def meta_masks_read_as_true(monkeypatch):
    real = torch.Tensor.__bool__
    monkeypatch.setattr(torch.Tensor, "__bool__", lambda t: True if t.device == META else real(t))


@pytest.fixture(autouse=True)
def flex_stand_in(monkeypatch):
    from longformer_fs.attention.backends import flex

    def stand_in(q, k, v, score_mod=None, block_mask=None, scale=None, return_aux=None):
        lists = (block_mask.kv_num_blocks, block_mask.kv_indices, block_mask.q_num_blocks, block_mask.q_indices)
        assert all(t.device == q.device for t in (k, v, *lists)), "flex: an input on another device"
        index = torch.zeros(1, dtype=torch.int32, device=q.device)  # FlexAttention passes index tensors
        block_mask.mask_mod(index, index, index, index)  # raises if it reads a tensor on another device
        score = q.new_zeros(1) if score_mod is None else score_mod(q.new_zeros(1), index, index, index, index)
        lse = q.float().sum(-1) + k.float().sum() * 0
        return q + k * 0 + v + score.sum(), types.SimpleNamespace(lse=lse)

    monkeypatch.setattr(flex, "flex_attention", stand_in)


@pytest.fixture(scope="module")
def dictionary():
    d = Dictionary()
    for i in range(40):
        d.add_symbol(f"w{i}")
    d.add_symbol("<mask>")
    return d


def task_of(dictionary):
    return types.SimpleNamespace(source_dictionary=dictionary, target_dictionary=dictionary, cfg=None)


def model_args(model_class, *argv) -> argparse.Namespace:
    parser = argparse.ArgumentParser(argument_default=argparse.SUPPRESS)  # as fairseq adds model args
    model_class.add_args(parser)
    return parser.parse_args(list(argv))


def on_meta(model: torch.nn.Module, backend: str) -> torch.nn.Module:
    for module in model.modules():
        if isinstance(module, (LongformerSelfAttention, RelativeBandSelfAttention)):
            module.backend = backend
    return model.to(META).train()


def tokens(dictionary, batch=B, length=T, device=META) -> torch.Tensor:
    """``(B, T)`` ids, made on the CPU first, as a data loader's are."""
    x = torch.randint(dictionary.nspecial, len(dictionary) - 1, (batch, length))
    x[:, 0] = dictionary.bos()
    return x.to(device)


def backward_reaches_every_parameter(model, loss, unused: str = "-"):
    """Every trainable parameter gets a gradient on meta (except those starting with ``unused``)."""
    loss.backward()
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad and not n.startswith(unused)]
    missing = [n for n, p in trainable if p.grad is None]
    assert not missing, missing
    assert all(p.grad.device == META for _, p in trainable)


def roberta(dictionary, *extra):
    args = model_args(
        LongformerRobertaModel,
        *("--encoder-layers", "2", "--encoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64"),
        *("--encoder-attention-heads", "2", "--attention-window", "4,6", "--attention-dilation", "1,2"),
        *("--max-positions", "64", "--max-global-tokens", "6", "--attention-dropout", "0", *extra),
    )
    return LongformerRobertaModel.build_model(args, task_of(dictionary))


@pytest.mark.parametrize("backend", BACKENDS)
def test_character_lm(dictionary, backend):
    cfg = LongformerLMConfig(
        decoder_embed_dim=32,
        decoder_ffn_embed_dim=64,
        decoder_layers=2,
        decoder_attention_heads=2,
        attention_window="4:16",
        attention_dilation="1,2",
        dilated_heads=1,
        dropout=0.0,
        max_target_positions=64,
    )
    model = on_meta(LongformerLanguageModel.build_model(cfg, task_of(dictionary)), backend)
    x = tokens(dictionary)
    logits, _ = model(x)
    assert logits.device == META and logits.shape == (B, T, len(dictionary))
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), x.reshape(-1))
    backward_reaches_every_parameter(model, loss)


@pytest.mark.parametrize("backend", BACKENDS)
def test_roberta_with_the_masked_lm_and_classification_heads(dictionary, backend):
    model = roberta(dictionary, "--global-attention-tokens", "<s>")
    model.register_classification_head("sentence_classification_head", num_classes=3)
    model = on_meta(model, backend)
    x = tokens(dictionary)
    lm_logits, _ = model(x)
    cls_logits, _ = model(x, features_only=True, classification_head_name="sentence_classification_head")
    assert lm_logits.device == cls_logits.device == META and cls_logits.shape == (B, 3)
    backward_reaches_every_parameter(model, lm_logits.float().mean() + cls_logits.float().mean())


def padded_batch(dictionary):
    x = tokens(dictionary, device="cpu")
    x[1, 30:] = dictionary.pad()
    glob = torch.zeros(B, T, dtype=torch.bool)
    glob[:, 1:5] = True  # a question
    return x.to(META), glob.to(META)


def token_head_model(dictionary, head: str, outputs: int, backend: str):
    """A meta-device ``longformer_roberta`` with token head ``head``, and a padded batch with
    a question marked global: ``(model, tokens, global_mask)``."""
    model = roberta(dictionary)
    model.register_token_head(head, outputs)
    return (on_meta(model, backend), *padded_batch(dictionary))


@pytest.mark.parametrize("backend", BACKENDS)
def test_question_answering_head_and_criterion(dictionary, backend):
    model, x, glob = token_head_model(dictionary, QA_HEAD, 2, backend)
    starts = torch.tensor([[10, 20], [-1, -1]]).to(META)
    document = torch.zeros(B, T, dtype=torch.bool)
    document[:, 6:] = True
    sample = {
        "net_input": {"src_tokens": x, "global_attention_mask": glob},
        "starts": starts,
        "ends": starts + 1,
        "document_mask": document.to(META),
        "ntokens": B * T,
        "nsentences": B,
    }
    loss, sample_size, logging = QaCriterion(task=None)(model, sample)
    assert loss.device == sample_size.device == logging["span_hits"].device == META
    backward_reaches_every_parameter(model, loss, unused="encoder.lm_head.")  # fine-tuning has no MLM head


@pytest.mark.parametrize("backend", BACKENDS)
def test_wikihop_head_and_criterion(dictionary, backend):
    model, x, glob = token_head_model(dictionary, CANDIDATE_HEAD, 1, backend)
    sample = {
        "net_input": {"src_tokens": x, "global_attention_mask": glob},
        "owner": torch.tensor([0, 0]).to(META),  # two chunks of one example
        "candidates": torch.tensor([[2, 3, 4]]).to(META),
        "candidate_mask": torch.tensor([[True, True, False]]).to(META),
        "target": torch.tensor([1]).to(META),
        "ntokens": B * T,
    }
    loss, _, logging = WikihopCriterion(task=None)(model, sample)
    assert loss.device == logging["ncorrect"].device == META
    backward_reaches_every_parameter(model, loss, unused="encoder.lm_head.")


def to_meta(batch):
    if isinstance(batch, dict):
        return {key: to_meta(value) for key, value in batch.items()}
    return batch.to(META) if torch.is_tensor(batch) else batch


@pytest.mark.parametrize("backend", BACKENDS)
def test_hotpotqa_heads_and_criterion(backend):
    """The four heads (two of them task-built scorers) and the joint loss, on a batch the
    task's own collater made on the CPU: a span question and a yes/no one."""
    dictionary = Dictionary()
    for symbol in [f"w{i}" for i in range(20)] + list(HOTPOTQA_SYMBOLS):
        dictionary.add_symbol(symbol)
    q, end_q, p, s = (dictionary.index(symbol) for symbol in HOTPOTQA_SYMBOLS)
    w = dictionary.index("w1")
    rows = [
        [dictionary.bos(), q, w, end_q, p, w, s, w, w, s, w, p, w, s, w, dictionary.eos()],
        [dictionary.bos(), q, w, w, end_q, p, w, s, w, dictionary.eos()],
    ]
    parts = {
        "tokens": Items(torch.tensor(row) for row in rows),
        "offsets": Items(torch.zeros(2 * len(row), dtype=torch.long) for row in rows),
        "starts": Items([torch.tensor([7]), torch.tensor([-1])]),
        "ends": Items([torch.tensor([8]), torch.tensor([-1])]),
        "paragraphs": Items([torch.tensor([1, 0]), torch.tensor([1])]),
        "sentences": Items([torch.tensor([0, 1, 0]), torch.tensor([1])]),
        "qtype": Items([torch.tensor([0]), torch.tensor([1])]),
    }
    dataset = HotpotqaDataset(parts, dictionary)
    sample = to_meta(dataset.collater([dataset[0], dataset[1]]))
    model = roberta(dictionary)
    for name, head in HotpotqaTask(HotpotqaConfig(data="unused"), dictionary).token_heads(model).items():
        model.register_token_head(name, head)
    model = on_meta(model, backend)
    loss, questions, logging = HotpotqaCriterion(task=None)(model, sample)
    assert questions == 2 and loss.device == logging["type_hits"].device == META
    backward_reaches_every_parameter(model, loss, unused="encoder.lm_head.")


def to_meta_documents(batch):
    return {**to_meta(batch), "documents": [to_meta(doc) for doc in batch["documents"]]}


@pytest.mark.parametrize("backend", BACKENDS)
def test_coreference_head_and_criterion(dictionary, backend):
    """The span model and its loss on two documents the task's own collater split into
    16-position segments on the CPU (the first one into two rows). Pruning takes the top
    spans by ``topk``: the non-crossing variant reads the scores back by design, which a
    meta tensor cannot do (it then puts its choice on the scores' device)."""
    lengths = (20, 9)
    gold = [torch.tensor([[0, 1, 0], [5, 5, 1], [16, 17, 0]]), torch.tensor([[2, 3, 0], [6, 6, 0]])]
    parts = {
        "tokens": Items(tokens(dictionary, 1, n, device="cpu")[0] for n in lengths),
        "sentence": Items(torch.arange(n) // 6 for n in lengths),
        "speaker": Items(torch.zeros(n, dtype=torch.long) for n in lengths),
        "mentions": Items(m.reshape(-1) for m in gold),
    }
    dataset = CorefDataset(parts, dictionary, 16)
    sample = to_meta_documents(dataset.collater([dataset[0], dataset[1]]))
    sizes = {"max_span_width": 3, "ffnn_size": 16, "feature_size": 4, "head_dropout": 0.0, "non_crossing": False}
    task = CorefTask(CorefTaskConfig(data="unused", max_positions=16, **sizes), dictionary)
    model = roberta(dictionary)
    for name, head in task.token_heads(model).items():
        model.register_token_head(name, head)
    model = on_meta(model, backend)
    loss, _, logging = CorefCriterion(task=None)(model, sample)
    assert loss.device == META
    backward_reaches_every_parameter(model, loss, unused="encoder.lm_head.")


@pytest.mark.parametrize("backend", BACKENDS)
def test_led_encoder_and_decoder(dictionary, backend):
    args = model_args(
        LEDModel,
        *("--encoder-layers", "2", "--decoder-layers", "1", "--encoder-embed-dim", "32", "--decoder-embed-dim", "32"),
        *("--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64", "--encoder-attention-heads", "2"),
        *("--decoder-attention-heads", "2", "--attention-window", "4", "--max-global-tokens", "1"),
        *("--attention-dropout", "0"),
        *("--max-source-positions", "64", "--max-target-positions", "32", "--share-all-embeddings"),
    )
    args.task = "translation"
    model = on_meta(LEDModel.build_model(args, task_of(dictionary)), backend)
    src = tokens(dictionary)
    prev = tokens(dictionary, length=12)
    logits, _ = model(src, torch.full((B,), T).to(META), prev)
    assert logits.device == META and logits.shape == (B, 12, len(dictionary))
    backward_reaches_every_parameter(model, logits.float().mean())
