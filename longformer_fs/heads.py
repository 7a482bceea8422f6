"""The heads our models end in, declared once: what each is called in the weights, and where
it can go (export-hf, export-onnx). A new task's head is added to :data:`HEADS` here, and
every exporter and hub reads it from there (``docs/design.md``, "adding a task").

- :class:`Head`: the head one checkpoint ends in (:meth:`Head.of` reads it from the weights);
- :class:`HeadKind`: the kinds of head; :data:`HEADS`: each kind's :class:`HeadSpec`, the
  HF transformers class it leaves as and the outputs an ONNX file of it serves.

Plain Python, below the models: a ``longformer_roberta`` model names its heads' weights
with these prefixes and names.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

# Where a longformer_roberta model keeps its heads' weights: ``classification_heads.NAME.*``
# (fairseq's RoBERTa's) and ``token_heads.NAME.*`` (ours: a linear map of every token).
CLASSIFICATION_HEADS = "classification_heads."
TOKEN_HEADS = "token_heads."
# The token heads' names in a longformer_roberta model's weights (``token_heads.NAME.*``),
# which the tasks register and the exporters and hubs look up.
QA_HEAD = "qa"  # longformer_qa: start and end logits
CANDIDATE_HEAD = "candidate"  # longformer_wikihop: a logit at each candidate's [ent]
COREF_HEAD = "coref"  # longformer_coref: the span model
HOTPOTQA_PREFIX = "hotpotqa_"  # longformer_hotpotqa's four heads
SPAN_HEAD, TYPE_HEAD = HOTPOTQA_PREFIX + "span", HOTPOTQA_PREFIX + "type"
PARAGRAPH_HEAD, SENTENCE_HEAD = HOTPOTQA_PREFIX + "paragraph", HOTPOTQA_PREFIX + "sentence"


class HeadKind(enum.StrEnum):
    """Each kind of head, by the name messages, reports and :data:`HEADS` use (a string:
    ``Head("qa").kind == "qa"``)."""

    MASKED_LM = "masked_lm"
    CLASSIFICATION = "classification"
    QA = "qa"
    TOKEN = "token"
    HOTPOTQA = "hotpotqa"
    COREF = "coref"
    SUMMARIZER = "summarizer"
    CHAR_LM = "char_lm"


@dataclass(frozen=True)
class HeadSpec:
    """What one kind of head is, and where it can go.

    Attributes:
        what: its description in messages.
        hf_class: the HF transformers class export-hf writes it as, or None (no counterpart).
        onnx_outputs: the outputs an export-onnx file of it serves, or () (not served).
    """

    what: str
    hf_class: str | None = None
    onnx_outputs: tuple[str, ...] = ()


HEADS = {
    HeadKind.MASKED_LM: HeadSpec("the masked-LM head", "LongformerForMaskedLM", ("logits",)),
    HeadKind.CLASSIFICATION: HeadSpec("a classification head", "LongformerForSequenceClassification", ("logits",)),
    HeadKind.QA: HeadSpec(
        "the QA span head (longformer_qa)", "LongformerForQuestionAnswering", ("start_logits", "end_logits")
    ),
    HeadKind.TOKEN: HeadSpec("a token head (longformer_wikihop's candidates)", "LongformerForTokenClassification"),
    HeadKind.HOTPOTQA: HeadSpec("HotpotQA's heads (longformer_hotpotqa)"),
    HeadKind.COREF: HeadSpec("the coreference span model (longformer_coref)"),
    HeadKind.SUMMARIZER: HeadSpec("LED's decoder", "LEDForConditionalGeneration"),
    HeadKind.CHAR_LM: HeadSpec("a character LM's output layer"),
}


@dataclass(frozen=True)
class Head:
    """The head a checkpoint ends in.

    Attributes:
        kind: its :class:`HeadKind` (its name, ``"qa"``, is taken too).
        name: its name in the weights (a classification or token head's), or "".

    Raises:
        ValueError: a kind that is none of :class:`HeadKind`.
    """

    kind: HeadKind
    name: str = ""

    def __post_init__(self):
        object.__setattr__(self, "kind", HeadKind(self.kind))

    @property
    def spec(self) -> HeadSpec:
        return HEADS[self.kind]

    def __str__(self) -> str:
        return self.kind if self.name in ("", self.kind) else f"{self.kind} ({self.name})"

    @classmethod
    def of(cls, state_dict: dict) -> Head:
        """The head of a ``longformer_roberta`` model with these weights.

        Raises:
            ValueError: several heads that are not one task's (HotpotQA's four are one).
        """
        classification, tokens = task_heads(state_dict)
        if tokens and all(name.startswith(HOTPOTQA_PREFIX) for name in tokens) and not classification:
            return cls("hotpotqa")
        if len(classification) + len(tokens) > 1:
            raise ValueError(
                f"{len(classification) + len(tokens)} task heads ({', '.join(classification + tokens)}); "
                "a model served or exported ends in one"
            )
        if classification:
            return cls("classification", classification[0])
        if tokens:
            name = tokens[0]
            return cls({QA_HEAD: "qa", COREF_HEAD: "coref"}.get(name, "token"), name)
        return cls("masked_lm")


def task_heads(state_dict: dict) -> tuple[list[str], list[str]]:
    """The names of the classification heads and of the token heads a ``longformer_roberta``
    state dict holds, each sorted (none of either: the masked-LM head alone)."""

    def names(prefix: str) -> list[str]:
        return sorted({k[len(prefix) :].split(".")[0] for k in state_dict if k.startswith(prefix)})

    return names(CLASSIFICATION_HEADS), names(TOKEN_HEADS)
