"""The GPU path rehearsed on a CPU: each model a recipe trains, through every CUDA branch.

Inside :func:`longformer_fs.devices.rehearsal`, ``meta`` tensors take the decisions of an sm90
GPU (see that module for why meta, and what it does not rehearse). Here each recipe of
:data:`RECIPES` runs there as ``fairseq-hydra-train`` would run it:

- the recipe is composed by Hydra with its sizes overridden, and nothing else. Its callback
  fits its precision to the machine, which in a rehearsal keeps fp16. fairseq then fills its
  defaults and builds the task, the model and the criterion;
- a batch comes from the task's own collater, made on the host. fairseq's trainer moves it
  to the device, and it is moved the same way here, before the step;
- a training step is the trainer's. The model and criterion are cast as ``--fp16`` or
  ``--bf16`` casts them. The task's ``train_step`` goes through fairseq's FP16 optimizer
  wrapper (loss scaling, fp32 master weights), then the gradients are multiplied, clipped
  at the recipe's norm, and the optimizer steps;
- an evaluation step is the task's ``valid_step``. The LED and the character LM also
  decode two tokens incrementally, as generation does (the LED reordering its beam).

:func:`rehearse` fails, naming the recipe and what happened, on:

- an exception, such as an op without a derivative in the backward, or a call the CUDA op
  itself would refuse (FlashAttention's contract is checked in a rehearsal);
- a read-back of ours (:class:`longformer_fs.rehearsal.HostWatch`): ``.item()``, ``bool(t)``, a copy to the
  host, or an op whose output shape depends on values;
- a copy from the host into the step after the first step of a shape;
- a band-attention call that an sm90 GPU would not run on the backend the recipe expects,
  as ``longformer-fs info`` answers for that GPU;
- with compiled layers: a graph break, or a compile after the second length.

fairseq's own read-backs and copies are counted apart and let through, because a GPU
makes them too. These are the loss scaler's overflow check of the gradient norm, and the
MLM criterion's gather of its masked tokens. The watch answers them as a GPU would in
the common case: no overflow, and every token kept.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections import Counter
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from fairseq import optim, tasks, utils
from fairseq.data import LanguagePairDataset, data_utils
from fairseq.dataclass.initialize import add_defaults, hydra_init
from helpers import ROOT, compose_recipe
from omegaconf import OmegaConf, open_dict

from longformer_fs import devices
from longformer_fs.attention.calls import backend_calls
from longformer_fs.benchmarks.step_profile import dynamo_compiles
from longformer_fs.conventions import HOTPOTQA_SYMBOLS, WIKIHOP_SYMBOLS, byte_symbol
from longformer_fs.environment import auto_choices
from longformer_fs.precision import FitToDevice
from longformer_fs.rehearsal import RehearsalFailure, watched
from longformer_fs.tasks.packed_documents import PADDED_DOCUMENT, PackedDocumentsDataset, document_bound

META = torch.device("meta")

# ------------------------------------------------------------------ recipes and their batches


class Items(list):
    """A prepared split's items, as the tasks index them (``sizes``, ``[i]``)."""

    @property
    def sizes(self):
        return np.array([len(item) for item in self])


def _dictionary(path: Path, symbols) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{s} 1\n" for s in symbols))


WORDS = [str(i) for i in range(300)]  # a BPE-numbered dict.txt, as RoBERTa's


def _words(task, n: int, generator) -> torch.Tensor:
    d = task.source_dictionary
    return torch.randint(d.nspecial, d.nspecial + len(WORDS), (n,), generator=generator)


def _sentences(task, lengths: tuple[int, ...], generator) -> torch.Tensor:
    """``<s> words </s>`` rows of ``lengths``, right-padded into ``(B, T)``."""
    d = task.source_dictionary
    rows = [torch.cat([torch.tensor([d.bos()]), _words(task, n - 2, generator), torch.tensor([d.eos()])])
            for n in lengths]  # fmt: skip
    return data_utils.collate_tokens(rows, d.pad(), left_pad=False)


def _sample(source: torch.Tensor, lengths: tuple[int, ...], target: torch.Tensor, ntokens: int) -> dict:
    """A batch of fairseq's sentence datasets: ids, counts, ``net_input`` and ``target``."""
    return {"id": torch.arange(len(lengths)), "nsentences": len(lengths), "ntokens": ntokens,
            "net_input": {"src_tokens": source, "src_lengths": torch.tensor(lengths)}, "target": target}  # fmt: skip


def char_lm_batch(task, length: int, generator) -> dict:
    """Two right-padded rows, the second 14 characters shorter, as fairseq's LM datasets pad."""
    d, lengths = task.source_dictionary, (length, length - 14)
    rows = [torch.randint(d.nspecial, len(d), (n,), generator=generator) for n in lengths]
    tokens = data_utils.collate_tokens(rows, d.pad(), left_pad=False)
    target = torch.roll(tokens, -1, dims=1).masked_fill(tokens == d.pad(), d.pad())
    return _sample(tokens, lengths, target, int((target != d.pad()).sum()))


def mlm_batch(task, length: int, generator) -> dict:
    """fairseq's masked-LM batch: 15% of the tokens masked, the target padded elsewhere. With
    the task's ``pack_documents``, two rows that each pack three documents (``<s> words </s>``)
    by the task's own packing, with their document ids and bound."""
    d, lengths = task.source_dictionary, (length, length - 20)
    net_input = {}
    if task.cfg.pack_documents:
        sizes = [n // 3 for n in lengths for _ in range(2)] + [n - 2 * (n // 3) for n in lengths]
        packed = PackedDocumentsDataset(Items(_sentences(task, (n,), generator)[0] for n in sizes), sizes, length,
                                        d.bos())  # fmt: skip
        rows = [packed[i] for i in range(len(packed))]
        tokens, lengths = data_utils.collate_tokens(rows, d.pad()), tuple(len(row) for row in rows)
        documents = [packed.documents(i) for i in range(len(packed))]
        net_input = {"documents": data_utils.collate_tokens(documents, PADDED_DOCUMENT),
                     "max_documents": document_bound(max(len(packed.rows[i]) for i in range(len(packed))))}  # fmt: skip
    else:
        tokens = _sentences(task, lengths, generator)
    masked = (torch.rand(tokens.shape, generator=generator) < 0.15) & (tokens > d.eos())
    masked[:, 1] = True
    target = torch.where(masked, tokens, torch.full_like(tokens, d.pad()))
    sample = _sample(tokens.masked_fill(masked, d.index("<mask>")), lengths, target, int(masked.sum()))
    sample["net_input"].update(net_input)
    return sample


def classification_batch(task, length: int, generator) -> dict:
    """fairseq's sentence-prediction batch: ``<s> text </s>``, a class per row."""
    d, lengths = task.source_dictionary, (length, length - 30)
    tokens = _sentences(task, lengths, generator)
    return _sample(tokens, lengths, torch.tensor([0, 1]), int((tokens != d.pad()).sum()))


def qa_batch(task, length: int, generator) -> dict:
    """``<s> question </s> document </s>`` in two rows, the second 24 tokens shorter, its
    answer inside the document; the task's collater marks the question global."""
    from longformer_fs.tasks.qa import QaDataset

    d = task.source_dictionary
    rows, starts, ends = Items(), Items(), Items()
    for question, total in ((5, length), (11, length - 24)):
        body = _words(task, total - 3, generator)
        rows.append(torch.cat([torch.tensor([d.bos()]), body[:question], torch.tensor([d.eos()]), body[question:],
                               torch.tensor([d.eos()])]))  # fmt: skip
        starts.append(torch.tensor([question + 3]))
        ends.append(torch.tensor([question + 5]))
    dataset = QaDataset(rows, starts, ends, d)
    return dataset.collater([dataset[0], dataset[1]])


def wikihop_batch(task, length: int, generator) -> dict:
    """``[q] question [/q] [ent] c [/ent] ...`` before a context the task cuts into chunks of
    the model's positions; two examples, one of two chunks."""
    from longformer_fs.tasks.wikihop import WikihopDataset

    d = task.source_dictionary
    q, end_q, ent, end_ent = (d.index(s) for s in WIKIHOP_SYMBOLS)
    prefixes, contexts = Items(), Items()
    for candidates, context in ((3, length - 20), (2, 2 * length)):
        prefix = [d.bos(), q, *_words(task, 4, generator).tolist(), end_q]
        for _ in range(candidates):
            prefix += [ent, *_words(task, 2, generator).tolist(), end_ent]
        prefixes.append(torch.tensor(prefix))
        contexts.append(_words(task, context, generator))
    labels = Items([torch.tensor([1]), torch.tensor([0])])
    dataset = WikihopDataset(prefixes, contexts, labels, d, length)
    return dataset.collater([dataset[0], dataset[1]])


def hotpotqa_batch(task, length: int, generator) -> dict:
    """``<s> [q] question [/q] [p] [s] sentence ...`` in two rows: a span answer, a yes/no one."""
    from longformer_fs.tasks.hotpotqa import HotpotqaDataset

    d = task.source_dictionary
    q, end_q, p, s = (d.index(symbol) for symbol in HOTPOTQA_SYMBOLS)
    rows, paragraphs, sentences = Items(), Items(), Items()
    for total in (length, length - 40):
        row, paragraph_count, sentence_count = [d.bos(), q, *_words(task, 6, generator).tolist(), end_q], 0, 0
        while len(row) < total - 12:
            row += [p]
            paragraph_count += 1
            for _ in range(2):
                row += [s, *_words(task, 4, generator).tolist()]
                sentence_count += 1
        rows.append(torch.tensor(row[: total - 1] + [d.eos()]))
        paragraphs.append(torch.tensor([1] + [0] * (paragraph_count - 1)))
        sentences.append(torch.tensor([1, 1] + [0] * (sentence_count - 2)))
    parts = {
        "tokens": rows,
        "offsets": Items(torch.zeros(2 * len(row), dtype=torch.long) for row in rows),
        "starts": Items([torch.tensor([12]), torch.tensor([-1])]),
        "ends": Items([torch.tensor([13]), torch.tensor([-1])]),
        "paragraphs": paragraphs,
        "sentences": sentences,
        "qtype": Items([torch.tensor([0]), torch.tensor([1])]),
    }
    dataset = HotpotqaDataset(parts, d)
    return dataset.collater([dataset[0], dataset[1]])


def coref_batch(task, length: int, generator) -> dict:
    """One document, as the recipe's batch of 1, that the task's collater cuts into two
    segments of the model's positions; mentions, sentences and one speaker."""
    from longformer_fs.tasks.coref import CorefDataset

    total = 2 * length - 40
    gold = torch.tensor([[0, 1, 0], [5, 5, 1], [16, 17, 0], [40, 42, 1], [length + 3, length + 4, 0]])
    parts = {
        "tokens": Items([_words(task, total, generator)]),
        "sentence": Items([torch.arange(total) // 12]),
        "speaker": Items([torch.zeros(total, dtype=torch.long)]),
        "mentions": Items([gold.reshape(-1)]),
    }
    dataset = CorefDataset(parts, task.source_dictionary, task.cfg.max_positions)
    return dataset.collater([dataset[0]])


def led_batch(task, length: int, generator) -> dict:
    """fairseq's translation batch: sources left-padded (the second 30 shorter), ``<s>`` first."""
    d = task.source_dictionary
    sources = [torch.cat([torch.tensor([d.bos()]), _words(task, n - 2, generator), torch.tensor([d.eos()])])
               for n in (length, length - 30)]  # fmt: skip
    targets = [torch.cat([_words(task, n, generator), torch.tensor([d.eos()])]) for n in (20, 12)]
    pairs = LanguagePairDataset(sources, np.array([len(x) for x in sources]), d,
                                targets, np.array([len(x) for x in targets]), task.target_dictionary)  # fmt: skip
    return pairs.collater([pairs[0], pairs[1]])


ENCODER_SIZES = ["++model.encoder_layers=2", "++model.encoder_embed_dim=64", "++model.encoder_ffn_embed_dim=128",
                 "++model.encoder_attention_heads=4"]  # fmt: skip
DECODER_SIZES = ["++model.decoder_layers=2", "++model.decoder_embed_dim=64", "++model.decoder_ffn_embed_dim=128",
                 "++model.decoder_attention_heads=4"]  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Recipe:
    """One recipe as the rehearsal runs it.

    Attributes:
        config: ``recipes/`` path and config name.
        sizes: Hydra overrides of sizes only: layers, widths, heads (``D = 16``, so that each
            backend's head-size limits read as at full size), sequence length.
        dictionaries: files under ``task.data`` -> their symbols (what ``prep`` writes).
        batch: ``(task, length, generator) -> sample``, from the task's own collater.
        lengths: the sequence lengths of the steps, one per step (compiled layers: three).
        backend: ``{call kind: backend}`` an sm90 GPU takes in training; evaluation drops the
            ``+ dropout``.
        decode: the incremental decoding of generation to run after the evaluation step.
        host_work: what the recipe reads back on purpose, which meta cannot answer:
            ``(criterion) -> context`` around every step, standing in for it with the same
            shapes (:func:`non_crossing_pruning`, :func:`classification_metrics`).
    """

    config: str
    sizes: tuple[str, ...]
    dictionaries: dict
    batch: Callable
    lengths: tuple[int, ...]
    backend: str
    decode: str | None = None
    host_work: Callable | None = None


@contextlib.contextmanager
def non_crossing_pruning(criterion):
    """Coreference's span pruning without crossing spans (Lee et al.) is a loop on the host,
    over the scores read back once a document (``modules.coref.prune_spans``): the one read-back
    of ours by design. Meta has no scores to loop over, so the rehearsal prunes by ``topk``,
    which keeps as many spans, on the device; the loop itself runs in the CPU tests."""
    from longformer_fs.modules import coref

    original = coref.prune_spans
    coref.prune_spans = lambda scores, starts, ends, k, non_crossing: original(scores, starts, ends, k, False)
    try:
        yield
    finally:
        coref.prune_spans = original


@contextlib.contextmanager
def classification_metrics(criterion):
    """fairseq's sentence-prediction criterion reads each prediction back to report F1
    (``report_acc_and_f1``, on the host, in evaluation): fairseq's, and meta has no predictions."""
    saved = criterion.keep_pred_and_targ
    criterion.keep_pred_and_targ = False
    try:
        yield
    finally:
        criterion.keep_pred_and_targ = saved


BYTES = [byte_symbol(b) for b in range(32, 127)]
RECIPES = {
    "char_lm_phase1": Recipe(
        "char_lm/small_phase1",
        ("model.decoder_layers=2", "model.decoder_embed_dim=64", "model.decoder_ffn_embed_dim=128",
         "model.decoder_attention_heads=4", "model.attention_dilation='1,4'", "task.tokens_per_sample=256"),
        {"dict.txt": BYTES}, char_lm_batch, (256, 240, 224), "flex (relative)", decode="char_lm",
    ),
    "mlm_base": Recipe(
        "mlm/longformer_base_4096", (*ENCODER_SIZES, "task.tokens_per_sample=320"), {"dict.txt": WORDS},
        mlm_batch, (320, 300, 280), "flash (plain + dropout)",
    ),
    "triviaqa": Recipe("finetune/triviaqa", tuple(ENCODER_SIZES), {"dict.txt": WORDS}, qa_batch, (320, 300, 280),
                       "flash (plain + dropout)"),
    "imdb": Recipe("finetune/imdb", tuple(ENCODER_SIZES), {"input0/dict.txt": WORDS, "label/dict.txt": ["0", "1"]},
                   classification_batch, (320, 300, 280), "flash (plain + dropout)",
                   host_work=classification_metrics),
    "wikihop": Recipe("finetune/wikihop", (*ENCODER_SIZES, "task.max_positions=320"),
                      {"dict.txt": WORDS + list(WIKIHOP_SYMBOLS)}, wikihop_batch, (320, 300, 280),
                      "flash (plain + dropout)"),
    "hotpotqa": Recipe("finetune/hotpotqa", tuple(ENCODER_SIZES), {"dict.txt": WORDS + list(HOTPOTQA_SYMBOLS)},
                       hotpotqa_batch, (320, 300, 280), "flash (plain + dropout)"),
    "coref": Recipe("finetune/coref", (*ENCODER_SIZES, "task.max_positions=320", "task.ffnn_size=32",
                                       "task.feature_size=8"),
                    {"dict.txt": WORDS}, coref_batch, (320, 300, 280), "flash (plain + dropout)",
                    host_work=non_crossing_pruning),
    "led_base": Recipe("summarization/led_base_16k", (*ENCODER_SIZES, *DECODER_SIZES), {
        "dict.source.txt": WORDS, "dict.target.txt": WORDS}, led_batch, (600, 580, 560), "flash (plain + dropout)",
        decode="led"),
}  # fmt: skip


# ------------------------------------------------------------------ building as fairseq does


def recipe_config(name: str, data: Path, precision: str = "recipe", compile_layers: bool = False):
    """The recipe's config as ``fairseq-hydra-train`` would hand it to fairseq: composed with
    the sizes overridden, its precision fitted by its own callback (``precision``: the
    recipe's, or ``bf16`` or ``fp32`` in place of its fp16), fairseq's defaults added, resolved."""
    recipe = RECIPES[name]
    folder, config_name = recipe.config.split("/")
    overrides = [*recipe.sizes, f"task.data={data}", f"model.compile_layers={str(compile_layers).lower()}"]
    if precision == "bf16":
        overrides += ["common.fp16=false", "++common.bf16=true"]
    elif precision == "fp32":
        overrides += ["common.fp16=false"]
    os.environ.setdefault("PWD", str(ROOT))
    hydra_init(config_name)  # fairseq-hydra-train's schema, under the recipe's name
    cfg = compose_recipe(ROOT / "recipes" / folder, config_name, overrides)
    FitToDevice().on_run_start(config=cfg, config_name=config_name)
    with open_dict(cfg):
        del cfg["hydra"]
    add_defaults(cfg)
    cfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True, enum_to_str=True))
    OmegaConf.set_struct(cfg, True)
    return cfg


def build(cfg):
    """fairseq's task, model and criterion from ``cfg``, the model cast as its trainer casts it."""
    utils.import_user_module(cfg.common)
    task = tasks.setup_task(cfg.task)
    model, criterion = task.build_model(cfg.model), task.build_criterion(cfg.criterion)
    if cfg.common.fp16:
        model, criterion = model.half(), criterion.half()
    elif cfg.common.bf16:
        model, criterion = model.to(torch.bfloat16), criterion.to(torch.bfloat16)
    return task, model.to(META), criterion.to(META)


def write_data(name: str, data: Path) -> None:
    for path, symbols in RECIPES[name].dictionaries.items():
        _dictionary(data / path, symbols)


@contextlib.contextmanager
def fairseq_on_the_gpu():
    """What fairseq's optimizer wrappers ask of CUDA, answered for the rehearsal's device: a GPU
    is there, and the current device is ``meta``'s (index None), by which its flat fp32 master
    weights are keyed and to which its gradient norm is moved."""
    saved = torch.cuda.current_device, torch.cuda.is_available
    torch.cuda.current_device, torch.cuda.is_available = (lambda: None), (lambda: True)
    try:
        yield
    finally:
        torch.cuda.current_device, torch.cuda.is_available = saved


def build_optimizer(cfg, model, criterion):
    """fairseq's trainer's optimizer: the FP16 wrapper over the recipe's optimizer in half
    precision, the optimizer itself in float32."""
    params = [p for p in (*model.parameters(), *criterion.parameters()) if p.requires_grad]
    with fairseq_on_the_gpu():
        if cfg.common.fp16 or cfg.common.bf16:
            return optim.FP16Optimizer.build_optimizer(cfg, params)
        return optim.build_optimizer(cfg.optimizer, params)


def to_meta(sample):
    """The batch on the device, as fairseq's trainer moves it (``utils.move_to_cuda``)."""
    return utils.apply_to_sample(lambda t: t.to(META), sample)


def train_step(cfg, task, model, criterion, optimizer, sample, update: int) -> None:
    """fairseq's ``Trainer.train_step`` for one batch: forward, loss and backward through the
    optimizer wrapper, the gradients over the sample size, clipped, the optimizer's step."""
    model.train()
    criterion.train()
    optimizer.zero_grad()
    loss, sample_size, _ = task.train_step(sample, model, criterion, optimizer, update)
    with fairseq_on_the_gpu():
        # fairseq's trainer divides by the sample size (a tensor: no read-back) and undoes the loss scale.
        optimizer.multiply_grads(1.0 / (sample_size.float() if torch.is_tensor(sample_size) else max(sample_size, 1)))
        optimizer.clip_grad_norm(cfg.optimization.clip_norm)
        task.optimizer_step(optimizer, model, update)


def valid_step(task, model, criterion, sample) -> None:
    model.eval()
    with torch.no_grad():
        task.valid_step(sample, model, criterion)


def decode(kind: str, model, sample) -> None:
    """Two steps of incremental decoding, as fairseq's generator runs them, the beam of two
    reordered between them: the character LM over its band caches, the LED's decoder over
    its encoder's output."""
    model.eval()
    with torch.no_grad():
        order = torch.tensor([1, 0]).to(META)
        net, state, extra = sample["net_input"], {}, {}
        if kind == "char_lm":
            tokens, prompt = net["src_tokens"], 8
        else:
            tokens, prompt = net["prev_output_tokens"], 1
            extra["encoder_out"] = model.encoder(net["src_tokens"], src_lengths=net["src_lengths"])
        model.decoder(tokens[:, :prompt], incremental_state=state, **extra)
        model.decoder.reorder_incremental_state_scripting(state, order)
        if "encoder_out" in extra:
            extra["encoder_out"] = model.encoder.reorder_encoder_out(extra["encoder_out"], order)
        model.decoder(tokens[:, : prompt + 1], incremental_state=state, **extra)


# ------------------------------------------------------------------ the rehearsal


@contextlib.contextmanager
def fresh_compiler():
    """dynamo as a training process starts it: no graph compiled before (another recipe's, in
    this process, would be reused), and its recompile limit raising instead of running the rest
    eagerly, which would hide from the rehearsal the graphs past the limit a model sets."""
    config = torch._dynamo.config
    saved = config.fail_on_recompile_limit_hit, config.recompile_limit
    torch._dynamo.reset()
    config.fail_on_recompile_limit_hit = True
    try:
        yield
    finally:
        config.fail_on_recompile_limit_hit, config.recompile_limit = saved
        torch._dynamo.reset()


@contextlib.contextmanager
def compiled_calls():
    """``{"calls": n}``: the calls of compiled layer forwards inside (filled as they happen)."""
    from longformer_fs.modules import compiled

    counted = {"calls": 0}
    original = compiled.compiled

    def counting(forward, backend):
        function = original(forward, backend)

        def call(*args, **kwargs):
            counted["calls"] += 1
            return function(*args, **kwargs)

        return call

    compiled.compiled = counting
    try:
        yield counted
    finally:
        compiled.compiled = original


@dataclasses.dataclass
class Rehearsed:
    """What one recipe's rehearsal saw."""

    calls: Counter  # band-attention calls by backend and kind, eager steps
    fairseq_reads: Counter
    fairseq_copies: Counter
    compiles: list  # dynamo's compiles at each step (compiled layers)
    compiled_calls: int = 0  # calls of compiled layers


def rehearse(name: str, tmp: Path, precision: str = "recipe", compile_layers: bool = False) -> Rehearsed:
    """One recipe's steps on the rehearsed GPU; raises :class:`RehearsalFailure` (see the module
    docstring). Eager: two training steps of one length (the second watched for copies), an
    evaluation step and the decoding. Compiled layers: a training step at each of the
    recipe's lengths, watched for graph breaks and compiles after the second."""
    recipe = RECIPES[name]
    data = tmp / name
    write_data(name, data)
    generator = torch.Generator().manual_seed(0)
    seen = Rehearsed(Counter(), Counter(), Counter(), [])
    with devices.rehearsal(), contextlib.ExitStack() as stack:
        if compile_layers:
            stack.enter_context(fresh_compiler())
        cfg = recipe_config(name, data, precision, compile_layers)
        task, model, criterion = build(cfg)
        if recipe.host_work is not None:
            stack.enter_context(recipe.host_work(criterion))
        optimizer = build_optimizer(cfg, model, criterion)
        # Eager: one length twice, the second step watched for copies from the host. Compiled: the
        # first length (a static graph), the second twice (the dynamic graph every later length
        # runs, its second step watched), the third (which must compile nothing).
        first, second, third = recipe.lengths
        lengths = [first, second, second, third] if compile_layers else [first, first]
        copies_checked = {2} if compile_layers else {1}
        for step, length in enumerate(lengths):
            sample = to_meta(recipe.batch(task, length, generator))
            with watched(name) as watch, backend_calls() as calls, dynamo_compiles() as compiled, \
                    compiled_calls() as layer_calls:  # fmt: skip
                train_step(cfg, task, model, criterion, optimizer, sample, step)
            seen.compiled_calls += layer_calls["calls"]
            seen.fairseq_reads.update(watch.their_reads)
            if step in copies_checked and watch.copies:
                raise RehearsalFailure(
                    f"{name}: copies from the host in the second step of a shape: {dict(watch.copies)}"
                )
            seen.fairseq_copies.update(watch.their_copies)
            if compiled["graph_breaks"]:
                raise RehearsalFailure(f"{name}: graph breaks in compiled layers: {compiled['graph_break_reasons']}")
            seen.compiles.append(compiled["compiles"])
            seen.calls.update(calls)
        if compile_layers:
            if not seen.compiled_calls:
                raise RehearsalFailure(f"{name}: no layer ran compiled")
            if any(seen.compiles[2:]):  # the first length static, the second under a dynamic shape
                raise RehearsalFailure(f"{name}: compiles after the second length: {seen.compiles}")
            return seen
        expected = {recipe.backend}
        if set(seen.calls) != expected:
            raise RehearsalFailure(f"{name}: band attention ran as {dict(seen.calls)}; an sm90 GPU takes {expected}")
        dtype = str(next(model.parameters()).dtype).replace("torch.", "")
        info = auto_choices()  # what `longformer-fs info` says on the rehearsed GPU
        for call in seen.calls:
            backend, kind = call[:-1].split(" (", 1)
            said = info[f"cuda/{kind}/{dtype}"]["backend"]
            if said != backend:
                raise RehearsalFailure(f"{name}: a {kind} call in {dtype} ran on {backend}; info says {said}")
        with watched(name), backend_calls() as calls:
            valid_step(task, model, criterion, sample)
            if recipe.decode:
                decode(recipe.decode, model, sample)
        evaluation = {recipe.backend.replace(" + dropout", "")}
        if set(calls) != evaluation:
            raise RehearsalFailure(f"{name}: evaluation's band attention ran as {dict(calls)}; expected {evaluation}")
    return seen
