"""fairseq adapter: the ``longformer_coref`` task (paper §6, OntoNotes coreference), over
``prep coref`` data.

A document is read in non-overlapping segments ``<s> tokens </s>`` of up to
``max_positions`` positions (paper: 4,096 for Longformer, 384 for RoBERTa), one row each,
with no global attention. The coarse-to-fine span model
(:class:`~longformer_fs.modules.coref.CorefHead`) is the model's token head ``coref``;
it reads the segments' features joined back into the document
(:func:`~longformer_fs.modules.coref.document_features`).

The head's parameters carry ``param_group = "coref_head"``, so fairseq's ``composite``
optimizer gives them their own Adam and learning rate (the original implementation's 2e-4
for the task layers against 1e-5 for the encoder; ``recipes/finetune/coref.yaml``). With
any other optimizer the attribute is ignored and everything shares one rate. The
schedule of both groups is :mod:`longformer_fs.lr_scheduler`'s ``polynomial_decay_groups``.
"""

from dataclasses import dataclass, field

import numpy as np
import torch
from fairseq.data import Dictionary, data_utils
from fairseq.dataclass import FairseqDataclass
from fairseq.tasks import register_task
from omegaconf import MISSING

from ..conventions import BOS, COREF_FILES, EOS, SEGMENT_SPECIALS, segment_count, segment_room
from ..heads import COREF_HEAD
from ..modules.coref import CorefHead, document_features
from .token_head_task import ItemsDataset, TokenHeadTask

HEAD_PARAM_GROUP = "coref_head"  # the composite optimizer's group of the task layers


@dataclass
class CorefTaskConfig(FairseqDataclass):
    data: str = field(default=MISSING, metadata={"help": "a `longformer-fs prep coref` directory"})
    max_positions: int = field(
        default=4096, metadata={"help": "positions per segment, <s> and </s> included (the model's length)"}
    )
    max_span_width: int = field(
        default=30, metadata={"help": "longest candidate mention, in tokens (Joshi et al.: 30)"}
    )
    top_span_ratio: float = field(
        default=0.4, metadata={"help": "spans kept after mention scoring, per document token (0.4)"}
    )
    max_top_antecedents: int = field(
        default=50, metadata={"help": "antecedents kept per span by the coarse score, for the fine one (50)"}
    )
    ffnn_size: int = field(
        default=3000, metadata={"help": "hidden width of the mention and antecedent scorers (Joshi et al.: 3000)"}
    )
    feature_size: int = field(
        default=20, metadata={"help": "width of the span-width, distance, segment and speaker embeddings (20)"}
    )
    head_dropout: float = field(default=0.3, metadata={"help": "dropout in the span model (Joshi et al.: 0.3)"})
    non_crossing: bool = field(
        default=True, metadata={"help": "keep no candidate span crossing a better one (Lee et al.'s pruning)"}
    )
    seed: int = field(default=1, metadata={"help": "shuffling seed"})


def segments(tokens: torch.Tensor, max_positions: int) -> list[torch.Tensor]:
    """A document's model rows: ``<s> piece </s>`` for consecutive pieces of
    ``max_positions - 2`` tokens (one row for an empty document)."""
    room = segment_room(max_positions)
    bos, eos = tokens.new_tensor([BOS]), tokens.new_tensor([EOS])
    return [torch.cat([bos, tokens[i : i + room], eos]) for i in range(0, max(len(tokens), 1), room)]


class CorefDataset(ItemsDataset):
    def __init__(self, parts: dict, dictionary: Dictionary, max_positions: int):
        self.parts, self.dictionary, self.max_positions = parts, dictionary, max_positions
        lengths = np.asarray(parts["tokens"].sizes)
        room = segment_room(max_positions)
        rows = segment_count(lengths, max_positions)
        # A row fits the model (fairseq's size filter); a batch pays for every row.
        self.sizes = np.minimum(lengths, room) + SEGMENT_SPECIALS
        self.costs = rows * self.sizes

    def __getitem__(self, index):
        tokens = self.parts["tokens"][index]
        mentions = self.parts["mentions"][index].view(-1, 3)
        return {
            "id": index,
            "segments": segments(tokens, self.max_positions),
            "sentence": self.parts["sentence"][index],
            "speaker": self.parts["speaker"][index],
            "mentions": mentions,
        }

    def collater(self, samples):
        if not samples:
            return {}
        rows = [row for s in samples for row in s["segments"]]
        tokens = data_utils.collate_tokens(rows, self.dictionary.pad(), left_pad=False)
        width, room = tokens.shape[1], segment_room(self.max_positions)
        documents, first_row = [], 0
        for sample in samples:
            length = len(sample["sentence"])
            position = torch.arange(length)
            segment = position // room
            documents.append(
                {
                    # Where each token sits in the flattened (rows x width) features: after its row's <s>.
                    "token_index": (first_row + segment) * width + 1 + position % room,
                    "segment": segment,
                    "sentence": sample["sentence"],
                    "speaker": sample["speaker"],
                    "gold_starts": sample["mentions"][:, 0],
                    "gold_ends": sample["mentions"][:, 1],
                    "gold_cluster": sample["mentions"][:, 2],
                }
            )
            first_row += len(sample["segments"])
        return self.batch(samples, tokens, None, documents=documents)


@register_task("longformer_coref", dataclass=CorefTaskConfig)
class CorefTask(TokenHeadTask):
    prep, head = "coref", COREF_HEAD

    @staticmethod
    def model_outputs(model, sample) -> list:
        """The span model's :class:`~longformer_fs.modules.coref.CorefOutput` for each
        document of the batch, its segments' features joined back into the document."""
        features, _ = model(**sample["net_input"], features_only=True)
        head = model.token_heads[COREF_HEAD]
        return [
            head(document_features(features, doc["token_index"]), doc["sentence"], doc["segment"], doc["speaker"])
            for doc in sample["documents"]
        ]

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        parts = self.load_parts(split, COREF_FILES)
        self.datasets[split] = CorefDataset(parts, self.dictionary, self.cfg.max_positions)
        return self.datasets[split]

    global_attention_from_data = False  # coreference has no global attention (paper §6)

    def build_model(self, cfg, from_checkpoint=False):
        model = super().build_model(cfg, from_checkpoint)
        for parameter in model.token_heads[COREF_HEAD].parameters():
            parameter.param_group = HEAD_PARAM_GROUP
        return model

    def token_heads(self, model) -> dict:
        cfg = self.cfg
        head = CorefHead(
            model.embed_dim,
            max_span_width=cfg.max_span_width,
            feature_size=cfg.feature_size,
            ffnn_size=cfg.ffnn_size,
            dropout=cfg.head_dropout,
            top_span_ratio=cfg.top_span_ratio,
            max_top_antecedents=cfg.max_top_antecedents,
            non_crossing=cfg.non_crossing,
        )
        return {COREF_HEAD: head}
