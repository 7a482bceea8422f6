"""``LongformerHubInterface``: fairseq's RoBERTa hub interface for ``longformer_roberta``.

What fairseq users call on RoBERTa works the same (``encode``, ``decode``,
``extract_features``, ``fill_mask``, ``predict``), with a ``global_attention_mask`` where
the model reads one, and the fine-tuned tasks' own calls, each over its task's
``model_outputs``: :meth:`answer` for a QA model, :meth:`rank_candidates` for WikiHop, and
:meth:`predict_prepared` for any fine-tuned task on a ``prep``-ared split (HotpotQA's
answers and supporting facts, coreference's clusters).
Text becomes ids as ``prep`` makes them (:mod:`longformer_fs.tokenization`), so a
fine-tuned model sees what it was trained on.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from fairseq import utils
from fairseq.data import ListDataset
from fairseq.models.roberta.hub_interface import RobertaHubInterface

from ..conventions import (
    BOS,
    EOS,
    MASK,
    WIKIHOP_SYMBOLS,
    make_windows,
    wikihop_context,
    wikihop_pieces,
    wikihop_prefix,
    wikihop_question,
)
from ..evaluation import coref as coref_evaluation
from ..evaluation import hotpotqa as hotpotqa_evaluation
from ..evaluation import qa as qa_evaluation
from ..evaluation.qa_spans import best_span_over_windows
from ..heads import QA_HEAD, Head
from ..tasks.qa import QaTask, question_mask
from ..tasks.wikihop import WikihopDataset, WikihopTask
from ..tokenization import SubwordEncoder

# What predict_prepared runs on a split for each kind of head (heads.HEADS), without scoring:
# the predictions of the kind's eval-* command.
PREPARED_PREDICTIONS = {
    "qa": qa_evaluation.predict_answers,
    "hotpotqa": hotpotqa_evaluation.predict_hotpotqa,
    "coref": coref_evaluation.predict_split,
}


class LongformerHubInterface(RobertaHubInterface):
    """A ``longformer_roberta`` model (any head) with its task and tokenizer.

    Global attention, where a call takes none, is what the model was trained with: the
    question for a QA model (every token before the first ``</s>``), else the model's own
    ``--global-attention-tokens`` (``<s>`` for a classifier, none for a masked LM).
    """

    def __init__(self, cfg, task, model, tokenizer: SubwordEncoder):
        super().__init__(cfg, task, model)
        self.tokenizer = tokenizer
        self.model.eval()

    @property
    def dictionary(self):
        return self.task.source_dictionary

    def encode(self, sentence: str, *addl_sentences: str, no_separator: bool = False) -> torch.LongTensor:
        """``<s> sentence </s>``, and ``</s> other </s>`` for each further sentence (no extra
        ``</s>`` with ``no_separator``), as RoBERTa's."""
        ids = [BOS, *self._ids(sentence), EOS]
        for other in addl_sentences:
            ids += ([] if no_separator else [EOS]) + [*self._ids(other), EOS]
        return torch.tensor(ids, dtype=torch.long)

    def _ids(self, text: str) -> list[int]:
        return [int(i) for i in self.tokenizer.encode([text])[0]]

    def decode(self, tokens: torch.LongTensor) -> str | list[str]:
        """The text of ``tokens`` (1-D); a list of texts where ``</s> </s>`` separates them."""
        if tokens.dim() != 1:
            raise ValueError(f"tokens: expected one sequence (1-D), got shape {tuple(tokens.shape)}")
        ids = tokens.tolist()
        if ids and ids[0] == BOS:
            ids = ids[1:]
        texts, current = [], []
        for i, token in enumerate(ids):
            if token == EOS and i + 1 < len(ids) and ids[i + 1] == EOS:
                texts.append(current)
                current = []
            elif token != EOS:
                current.append(token)
        texts.append(current)
        decoded = [self.tokenizer.decode(t) for t in texts]
        return decoded[0] if len(decoded) == 1 else decoded

    def default_global_attention(self, tokens: torch.Tensor) -> torch.Tensor | None:
        """``(B, T)`` bool: the global tokens the model was trained with, or None for the
        model's configured ones."""
        if isinstance(self.task, QaTask):
            return question_mask(tokens, EOS)
        return None

    def extract_features(
        self,
        tokens: torch.LongTensor,
        global_attention_mask: torch.Tensor | None = None,
        return_all_hiddens: bool = False,
    ):
        """Features ``(B, T, C)`` of the last layer, or every layer's (with
        ``return_all_hiddens``); ``global_attention_mask`` ``(B, T)`` (or ``(T,)``), True on
        global tokens, by default :meth:`default_global_attention`."""
        if tokens.dim() == 1:
            tokens = tokens.unsqueeze(0)
        if tokens.size(-1) > self.model.max_positions():
            raise ValueError(f"tokens: {tokens.size(-1)} exceed the model's {self.model.max_positions()} positions")
        tokens = tokens.to(self.device)
        if global_attention_mask is None:
            global_attention_mask = self.default_global_attention(tokens)
        elif global_attention_mask.dim() == 1:
            global_attention_mask = global_attention_mask.unsqueeze(0)
        if global_attention_mask is not None:
            global_attention_mask = global_attention_mask.to(self.device, torch.bool)
        features, extra = self.model(
            tokens,
            features_only=True,
            return_all_hiddens=return_all_hiddens,
            global_attention_mask=global_attention_mask,
        )
        if return_all_hiddens:
            return [state.transpose(0, 1) for state in extra["inner_states"]]
        return features

    def predict(
        self,
        head: str,
        tokens: torch.LongTensor,
        global_attention_mask: torch.Tensor | None = None,
        return_logits: bool = False,
    ) -> torch.Tensor:
        """A head's output: a classification head's ``(B, classes)`` log-probabilities (logits
        with ``return_logits``), a token head's ``(B, T, outputs)`` logits (``"qa"``: start,
        end)."""
        features = self.extract_features(tokens, global_attention_mask)
        if head in self.model.classification_heads:
            logits = self.model.classification_heads[head](features)
            return logits if return_logits else F.log_softmax(logits, dim=-1)
        if head in self.model.token_heads:
            return self.model.token_logits(head, features)
        heads = sorted([*self.model.classification_heads, *self.model.token_heads])
        raise ValueError(f"head: the model has no head {head!r} (it has {heads})")

    def fill_mask(self, masked_input: str, topk: int = 5) -> list[tuple[str, float, str]]:
        """The ``topk`` fillings of the one ``<mask>`` in ``masked_input``: ``(filled text,
        probability, token)`` triples, as RoBERTa's hub returns them."""
        if masked_input.count(MASK) != 1:
            raise ValueError(f"masked_input: put exactly one {MASK} in the text, e.g. 'He is a {MASK} guy'")
        left, right = masked_input.split(MASK)
        mask = self.dictionary.index(MASK)
        tokens = torch.tensor([BOS, *self._ids(left.rstrip()), mask, *self._ids(right), EOS])
        with torch.no_grad():
            logits, _ = self.model(
                tokens[None].to(self.device), global_attention_mask=self.default_global_attention(tokens[None])
            )
        probabilities = logits[0, int((tokens == mask).nonzero()[0])].float().softmax(dim=-1)
        values, indices = probabilities.topk(topk)
        filled = []
        for value, index in zip(values.tolist(), indices.tolist(), strict=True):
            token = self.tokenizer.decode([index])
            spaced = f" {MASK}" in masked_input and token.startswith(" ")
            text = masked_input.replace(f" {MASK}", token) if spaced else masked_input.replace(MASK, token.strip())
            filled.append((text, value, token))
        return filled

    def extract_features_aligned_to_words(self, *args, **kwargs):
        raise NotImplementedError(
            "extract_features_aligned_to_words: not offered (it needs fairseq's own BPE and spaCy); "
            "use extract_features and tokenizer.encode_with_offsets"
        )

    def answer(self, question: str, document: str, max_answer_tokens: int | None = None) -> str:
        """A fine-tuned QA model's answer, a span cut from ``document``: the input is ``<s>
        question </s> document </s>`` cut to the model's length, as ``prep qa`` makes it,
        the question global, and the span eval-qa's (the best start + end logits of at most
        ``max_answer_tokens``, the task's by default, over document tokens)."""
        if not isinstance(self.task, QaTask):
            raise ValueError("answer: a longformer_qa model answers questions (this one's task is not)")
        question_ids = self.tokenizer.encode([question])[0]
        ((document_ids, offsets),) = self.tokenizer.encode_with_offsets([document])
        no_answer = np.zeros((0, 2), dtype=np.int64)
        window = make_windows(question_ids, document_ids, offsets, no_answer, self.task.cfg.max_positions)[0]
        with torch.no_grad():
            logits = self.predict(QA_HEAD, torch.from_numpy(window.tokens)).float()[0]
        span = best_span_over_windows(
            [logits[:, 0]], [logits[:, 1]], [window.offsets], document,
            max_answer_tokens or self.task.cfg.max_answer_tokens,
        )  # fmt: skip
        return "" if span is None else span.text

    def rank_candidates(self, query: str, candidates: list[str], supports: list[str]) -> torch.Tensor:
        """A WikiHop model's ``(C,)`` log-probabilities of the ``candidates``: the input as
        ``prep wikihop`` makes it (``[q] query [/q] [ent] c1 [/ent] ... </s> support </s>
        ...``), run in chunks of the model's length that repeat the question and the
        candidates, each candidate's logits averaged over them (the task's ``model_outputs``)."""
        if not isinstance(self.task, WikihopTask):
            raise ValueError("rank_candidates: a longformer_wikihop model ranks candidates (this one's task is not)")
        question, *rest = self.tokenizer.encode(wikihop_pieces(wikihop_question(query), candidates, supports))
        symbols = {symbol: self.dictionary.index(symbol) for symbol in WIKIHOP_SYMBOLS}
        prefix = torch.from_numpy(wikihop_prefix(question, rest[: len(candidates)], symbols))
        context = torch.from_numpy(wikihop_context(rest[len(candidates) :]))
        dataset = WikihopDataset(
            ListDataset([prefix], [len(prefix)]), ListDataset([context], [len(context)]),
            ListDataset([torch.zeros(1, dtype=torch.long)], [1]), self.dictionary, self.task.cfg.max_positions,
        )  # fmt: skip
        sample = utils.apply_to_sample(lambda t: t.to(self.device), dataset.collater([dataset[0]]))
        with torch.no_grad():
            return F.log_softmax(WikihopTask.model_outputs(self.model, sample)[0], dim=-1)

    def predict_prepared(self, data, split: str = "valid"):
        """The fine-tuned task's predictions on a split that ``longformer-fs prep`` made in
        ``data``, as its ``eval-*`` command makes them (without scoring): for QA ``{example
        id: span}``, for HotpotQA ``{_id: answer and supporting facts}``, for coreference
        ``[{"id", "part", "clusters"}]`` (word spans)."""
        head = Head.of(self.model.state_dict())
        if head.kind not in PREPARED_PREDICTIONS:
            raise ValueError(
                f"predict_prepared: a model ending in {head.spec.what} has no prepared-split predictions here "
                f"(models ending in {', '.join(sorted(PREPARED_PREDICTIONS))} have)"
            )
        self.task.cfg.data = str(data)  # the task reads the split's files from here
        self.task.datasets.pop(split, None)  # not a split of other data read before
        return PREPARED_PREDICTIONS[head.kind](self.model, self.task, split, device=self.device)
