"""The coarse-to-fine span model of coreference (Lee et al. 2018, as Joshi et al. 2019 put
it on BERT), plain PyTorch, over the features of one document's tokens.

The encoder (Longformer here, paper §6) reads the document in non-overlapping segments;
their features are joined back into one ``(T, H)`` sequence of the document's tokens
(:func:`document_features`) before anything below runs. Then, for one document:

1. Candidate spans: every ``(start, end)`` of at most ``max_span_width`` tokens inside one
   sentence (:func:`candidate_spans`).
2. Span representation ``g = [x_start, x_end, head, width]`` (``D = 3H + F``), ``head``
   the attention-weighted mean of the span's tokens (one learned logit per token,
   softmax inside the span; :meth:`CorefHead.span_embeddings`).
3. Mention score ``s_m = FFNN(g)``; the ``k = ratio x T`` best spans are kept
   (:func:`prune_spans`; optionally none crossing another kept one, as Lee et al.).
4. Coarse antecedent score ``s_c(i, j) = s_m(i) + s_m(j) + g_i^T W_c g_j`` for ``j < i``;
   each span keeps its ``K`` best coarse antecedents.
5. Fine score ``s_a(i, j) = FFNN([g_i, g_j, g_i * g_j, phi(i, j)])``, ``phi`` embeddings
   of the distance (in kept spans, bucketed), the segment distance and same-speaker.
6. ``s(i, j) = s_c(i, j) + s_a(i, j)``, and ``s(i, eps) = 0`` for the dummy antecedent
   (not a mention, or the first of its cluster). Training maximises the marginal
   log-likelihood of the gold antecedents (:func:`antecedent_loss`); prediction takes
   each span's argmax and chains the links into clusters (:func:`predict_clusters`).

Left out of Joshi et al.'s model: the higher-order (``coref_depth = 2``) refinement of
span representations, the genre embedding and the span-width prior.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

DISTANCE_BUCKETS = 10  # 0, 1, 2, 3, 4, 5-7, 8-15, 16-31, 32-63, 64+ (Lee et al.)
SEGMENT_DISTANCES = 16  # segment distances 0..15, larger ones share the last row


def document_features(features: torch.Tensor, token_index: torch.Tensor) -> torch.Tensor:
    """The features of a document's tokens, joined from its segments.

    Args:
        features: ``(S, L, H)``, the encoder's output for the document's ``S`` segment rows
            (each ``<s> tokens </s>`` and padding).
        token_index: ``(T,)`` long, where each document token sits in the flattened
            ``(S * L)`` rows, in document order (the specials and padding left out).

    Returns:
        ``(T, H)``.
    """
    return features.reshape(-1, features.shape[-1]).index_select(0, token_index)


def candidate_spans(sentence: torch.Tensor, max_width: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Every span of up to ``max_width`` tokens, valid when it stays in one sentence.

    Args:
        sentence: ``(T,)`` long, the sentence of each token.

    Returns:
        ``starts``, ``ends`` (inclusive), ``valid``: ``(T * W,)`` each, span ``t * W + w``
        being ``(t, t + w)`` (``W = max_width``); ends past the document are clamped and
        marked invalid. The shape is static: nothing is read back from the device.
    """
    length = sentence.shape[0]
    starts = torch.arange(length, device=sentence.device)[:, None].expand(length, max_width)
    ends = starts + torch.arange(max_width, device=sentence.device)[None, :]
    inside = ends < length
    ends = ends.clamp(max=length - 1)
    valid = inside & (sentence[ends] == sentence[starts])
    return starts.reshape(-1), ends.reshape(-1), valid.reshape(-1)


def prune_spans(
    scores: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor, k: int, non_crossing: bool
) -> torch.Tensor:
    """The indices of the ``k`` best-scoring spans, in document order (start, then end).

    Args:
        scores: ``(N,)`` mention scores, ``-inf`` for invalid spans (at least ``k`` valid).
        non_crossing: skip a span that crosses one already kept (``s1 < s2 <= e1 < e2``),
            going down the scores as Lee et al.'s kernel does. This loop runs on the CPU
            and reads the scores back; without it the choice is one ``topk``.
    """
    if not non_crossing:
        chosen = scores.topk(k).indices
    else:
        order = scores.argsort(descending=True).tolist()
        start_list, end_list, finite = starts.tolist(), ends.tolist(), torch.isfinite(scores).tolist()
        max_end: dict[int, int] = {}  # start -> the furthest end of a kept span starting there
        min_start: dict[int, int] = {}  # end -> the earliest start of a kept span ending there
        kept: list[int] = []
        for index in order:
            if len(kept) == k or not finite[index]:
                break
            s, e = start_list[index], end_list[index]
            if any(max_end.get(j, -1) > e for j in range(s + 1, e + 1)) or any(
                min_start.get(j, s) < s for j in range(s, e)
            ):
                continue
            kept.append(index)
            max_end[s] = max(max_end.get(s, -1), e)
            min_start[e] = min(min_start.get(e, s), s)
        chosen = torch.tensor(kept, dtype=torch.long, device=scores.device)
    key = starts[chosen] * ends.numel() + ends[chosen]  # ends < numel: sorts by start, then end
    return chosen[key.argsort()]


def bucket_distance(distance: torch.Tensor) -> torch.Tensor:
    """Lee et al.'s buckets: 0-4 as themselves, then [5, 8), [8, 16), ... up to 64+."""
    log_bucket = torch.floor(torch.log2(distance.clamp(min=1).float())).long() + 3
    return torch.where(distance <= 4, distance, log_bucket).clamp(0, DISTANCE_BUCKETS - 1)


def ffnn(inputs: int, hidden: int, dropout: float) -> nn.Sequential:
    """One hidden layer (Joshi et al.'s ``ffnn_depth = 1``) to one score."""
    return nn.Sequential(nn.Linear(inputs, hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden, 1))


@dataclass
class CorefOutput:
    """The scores of one document.

    Attributes:
        top_starts, top_ends: ``(k,)`` the kept spans (token positions, ends inclusive).
        top_indices: ``(k,)`` their indices among the candidates.
        antecedents: ``(k, K)`` long, each kept span's candidate antecedents (indices
            into the kept spans).
        antecedent_mask: ``(k, K)`` bool, real antecedents (``j < i``).
        scores: ``(k, K + 1)``, column 0 the dummy antecedent (0), then ``s(i, j)``
            (``-inf`` where masked).
    """

    top_starts: torch.Tensor
    top_ends: torch.Tensor
    top_indices: torch.Tensor
    antecedents: torch.Tensor
    antecedent_mask: torch.Tensor
    scores: torch.Tensor


class CorefHead(nn.Module):
    """The coarse-to-fine scorer over one document's token features ``(T, hidden)``.

    Args:
        hidden: the encoder's width ``H``.
        max_span_width: the longest candidate span, in tokens (Joshi et al.: 30).
        feature_size: the width ``F`` of each feature embedding (span width, distance,
            segment distance, same speaker; Joshi et al.: 20).
        ffnn_size: the hidden width of the mention and fine antecedent scorers (Joshi et
            al.: 3000).
        dropout: on the span representations and the scorers' hidden layers (0.3).
        top_span_ratio: spans kept per document token (0.4).
        max_top_antecedents: coarse antecedents kept per span, ``K`` (50).
        non_crossing: keep no span crossing a better one (Lee et al.'s pruning).
    """

    def __init__(
        self,
        hidden: int,
        max_span_width: int = 30,
        feature_size: int = 20,
        ffnn_size: int = 3000,
        dropout: float = 0.3,
        top_span_ratio: float = 0.4,
        max_top_antecedents: int = 50,
        non_crossing: bool = True,
    ):
        super().__init__()
        self.max_span_width, self.top_span_ratio = max_span_width, top_span_ratio
        self.max_top_antecedents, self.non_crossing = max_top_antecedents, non_crossing
        self.span_dim = 3 * hidden + feature_size
        self.head_logit = nn.Linear(hidden, 1)
        self.width = nn.Embedding(max_span_width, feature_size)
        self.distance = nn.Embedding(DISTANCE_BUCKETS, feature_size)
        self.segment_distance = nn.Embedding(SEGMENT_DISTANCES, feature_size)
        self.same_speaker = nn.Embedding(2, feature_size)
        self.dropout = nn.Dropout(dropout)
        self.mention = ffnn(self.span_dim, ffnn_size, dropout)
        self.coarse = nn.Linear(self.span_dim, self.span_dim)
        self.fine = ffnn(3 * self.span_dim + 3 * feature_size, ffnn_size, dropout)
        # Joshi et al.'s initialisation (normal, std 0.02; zero biases): every score starts
        # near 0. PyTorch's default start gives scores of tens, whose first updates can
        # push all antecedent scores so low that the loss and its gradients vanish.
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear):
                nn.init.zeros_(module.bias)

    def span_embeddings(self, tokens: torch.Tensor) -> torch.Tensor:
        """``(T, H)`` -> ``(T * W, D)``: ``g`` of every span ``(t, t + w)`` (past the end:
        the tokens up to the end, to be masked by the caller).

        The head is a softmax over the span's tokens, built width by width with a running
        maximum (the online softmax): ``W`` steps of ``(T, H)``, never a ``(T, W, W, H)``
        gather.
        """
        length, width = tokens.shape[0], self.max_span_width
        logits = self.head_logit(tokens)[:, 0]  # (T,)
        heads, ends = [], []
        running_max = logits.new_full((length,), float("-inf"))
        numerator = tokens.new_zeros(tokens.shape)
        denominator = tokens.new_zeros(length)
        positions = torch.arange(length, device=tokens.device)
        for w in range(width):
            end = (positions + w).clamp(max=length - 1)
            inside = (positions + w) < length
            new_logit = logits[end].masked_fill(~inside, float("-inf"))
            new_max = torch.maximum(running_max, new_logit)
            keep, add = torch.exp(running_max - new_max), torch.exp(new_logit - new_max)
            numerator = numerator * keep[:, None] + add[:, None] * tokens[end]
            denominator = denominator * keep + add
            running_max = new_max
            heads.append(numerator / denominator[:, None])
            ends.append(tokens[end])
        head = torch.stack(heads, 1)  # (T, W, H)
        start = tokens[:, None, :].expand(length, width, tokens.shape[1])
        width_features = self.width.weight[None, :, :].expand(length, width, -1)
        spans = torch.cat([start, torch.stack(ends, 1), head, width_features], dim=-1)
        return self.dropout(spans.reshape(length * width, -1))

    def fine_scores(self, g: torch.Tensor, antecedents: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """``s_a(i, j) = FFNN([g_i, g_j, g_i * g_j, phi(i, j)])``, ``(k, K)``, for ``g`` ``(k, D)``,
        ``antecedents`` ``(k, K)`` and ``features`` ``phi`` ``(k, K, 3F)``.

        The first layer is applied to its four inputs apart, which is the same sum: the
        ``g_i`` and ``g_j`` parts once per span rather than once per pair, and no
        ``(k, K, 3D + 3F)`` concatenation (with Joshi et al.'s sizes, gigabytes a
        document). Per pair it costs a third of the multiply-adds.
        """
        first, rest = self.fine[0], self.fine[1:]
        width = g.shape[-1]
        w_i, w_j, w_pair, w_features = first.weight.split([width, width, width, features.shape[-1]], dim=1)
        hidden = (
            F.linear(g, w_i, first.bias)[:, None, :]
            + F.linear(g, w_j)[antecedents]
            + F.linear(g[:, None, :] * g[antecedents], w_pair)
            + F.linear(features, w_features)
        )
        return rest(hidden)[..., 0]

    def forward(
        self, tokens: torch.Tensor, sentence: torch.Tensor, segment: torch.Tensor, speaker: torch.Tensor
    ) -> CorefOutput:
        """Score one document.

        Args:
            tokens: ``(T, H)`` the document's token features (:func:`document_features`).
            sentence, segment, speaker: ``(T,)`` long, each token's sentence, encoder
                segment and speaker id.
        """
        length = tokens.shape[0]
        starts, ends, valid = candidate_spans(sentence, self.max_span_width)
        spans = self.span_embeddings(tokens)
        mention = self.mention(spans)[:, 0].masked_fill(~valid, float("-inf"))
        k = max(1, min(int(math.floor(self.top_span_ratio * length)), length))  # <= T valid one-token spans
        top = prune_spans(mention.detach(), starts, ends, k, self.non_crossing)
        k = top.shape[0]
        g, s_m = spans[top], mention[top]
        top_starts, top_ends = starts[top], ends[top]

        # Coarse: bilinear, over all earlier kept spans; keep the K best.
        order = torch.arange(k, device=tokens.device)
        earlier = order[None, :] < order[:, None]  # (k, k): j < i
        coarse = s_m[:, None] + s_m[None, :] + self.coarse(g) @ g.t()
        coarse = coarse.masked_fill(~earlier, float("-inf"))
        K = min(self.max_top_antecedents, k)
        coarse_top, antecedents = coarse.topk(K, dim=1)  # (k, K); the top-k is the model's one selection
        mask = earlier.gather(1, antecedents)

        # Fine: an FFNN over the pair and its features.
        offsets = order[:, None] - antecedents
        segments = (segment[top_starts][:, None] - segment[top_starts][antecedents]).clamp(0, SEGMENT_DISTANCES - 1)
        same = (speaker[top_starts][:, None] == speaker[top_starts][antecedents]).long()
        features = torch.cat(
            [self.distance(bucket_distance(offsets)), self.segment_distance(segments), self.same_speaker(same)], dim=-1
        )
        fine = self.fine_scores(g, antecedents, self.dropout(features))
        pair = (coarse_top + fine).masked_fill(~mask, float("-inf"))
        scores = torch.cat([pair.new_zeros(k, 1), pair], dim=1)
        return CorefOutput(top_starts, top_ends, top, antecedents, mask, scores)


def gold_clusters_of(
    starts: torch.Tensor,
    ends: torch.Tensor,
    gold_starts: torch.Tensor,
    gold_ends: torch.Tensor,
    gold_cluster: torch.Tensor,
) -> torch.Tensor:
    """``(k,)`` the gold cluster id (1, 2, ...) of each span, 0 for a span no gold mention is.

    Args:
        starts, ends: ``(k,)`` spans; gold_starts, gold_ends, gold_cluster: ``(G,)``.
    """
    same = (starts[:, None] == gold_starts[None, :]) & (ends[:, None] == gold_ends[None, :])
    return (same.long() * gold_cluster[None, :]).sum(dim=1)


def antecedent_loss(output: CorefOutput, cluster: torch.Tensor) -> torch.Tensor:
    """The negative marginal log-likelihood of the gold antecedents, summed over the kept spans.

    A span's gold antecedents are its candidate antecedents of the same gold cluster; a
    span with none (not a mention, or the first of its cluster among the candidates)
    has the dummy as its only gold antecedent: ``-log sum_{j gold} exp s(i, j) + log
    sum_j exp s(i, j)``, ``j`` over the dummy and the ``K`` candidates.

    Args:
        cluster: ``(k,)`` each kept span's gold cluster (:func:`gold_clusters_of`).
    """
    scores = output.scores.float()
    same = (cluster[output.antecedents] == cluster[:, None]) & (cluster[:, None] > 0) & output.antecedent_mask
    gold = torch.cat([~same.any(dim=1, keepdim=True), same], dim=1)
    gold_scores = scores.masked_fill(~gold, float("-inf"))
    return (torch.logsumexp(scores, dim=1) - torch.logsumexp(gold_scores, dim=1)).sum()


def predict_clusters(output: CorefOutput) -> list[list[tuple[int, int]]]:
    """Clusters of token spans ``(start, end)`` from each kept span's best antecedent
    (the dummy: no link), chained in document order as Lee et al. do."""
    best = output.scores.argmax(dim=1).tolist()
    antecedents = output.antecedents.tolist()
    spans = list(zip(output.top_starts.tolist(), output.top_ends.tolist(), strict=True))
    cluster_of: dict[tuple[int, int], int] = {}
    clusters: list[list[tuple[int, int]]] = []
    for i, column in enumerate(best):
        if column == 0:
            continue
        antecedent = spans[antecedents[i][column - 1]]
        if antecedent not in cluster_of:
            cluster_of[antecedent] = len(clusters)
            clusters.append([antecedent])
        index = cluster_of[antecedent]
        if spans[i] not in cluster_of:
            cluster_of[spans[i]] = index
            clusters[index].append(spans[i])
    return clusters
