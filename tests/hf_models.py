"""Model directories in HF transformers' layout, built with transformers and HF tokenizers
themselves, as the hub serves them: for import-hf and the converters' HF sources.

- :func:`english`: real English text on this machine (the project's docs, and the system's
  licence texts where there are some);
- :func:`train_tokenizer`: a RoBERTa-style byte-level BPE trained on it, saved by
  transformers (``tokenizer.json``); fairseq's specials first, ``<mask>`` last;
- :func:`multilingual`: real text in five scripts, the translations in the system's gettext
  catalogues; :func:`train_xlmr_tokenizer`: a SentencePiece model laid out as XLM-R's, saved
  as the hub serves XLM-R's (``sentencepiece.bpe.model`` and transformers' ``tokenizer.json``);
- :func:`save_model`: a transformers model, its weights moved well away from their
  initialisation, saved in one of the hub's weight formats with one of its tokenizer layouts.
"""

import gettext
import json
import shutil
from collections import Counter, defaultdict
from pathlib import Path

import torch
from helpers import ROOT

SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]


def english() -> list[str]:
    """Documents of real English prose: docs/*.md and README.md, and the licence texts."""
    paths = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
    licences = Path("/usr/share/common-licenses")
    if licences.is_dir():
        paths += sorted(p for p in licences.iterdir() if p.is_file())[:12]
    return [p.read_text(encoding="utf-8", errors="ignore") for p in paths]


SCRIPTS = {"Latin": ("fr", "de"), "Cyrillic": ("ru", "uk"), "CJK": ("ja", "zh_CN", "ko"), "Arabic": ("ar",),
           "Devanagari": ("hi",)}  # fmt: skip
CATALOGUES = Path("/usr/share/locale")


def translations(locale: str, most: int) -> list[str]:
    """Up to ``most`` non-empty translated strings of ``locale``'s catalogues, in file order."""
    texts = []
    for path in sorted((CATALOGUES / locale / "LC_MESSAGES").glob("*.mo")):
        with path.open("rb") as f:
            catalogue = gettext.GNUTranslations(f)._catalog
        texts += [text for key, text in catalogue.items() if key and text.strip()]
        if len(texts) >= most:
            break
    return texts[:most]


def multilingual(per_locale: int = 600) -> dict[str, list[str]]:
    """``{script: texts}``: real text nobody here wrote, in Latin, Cyrillic, CJK, Arabic
    and Devanagari scripts (fails, naming the directory, where the catalogues are missing)."""
    found = {}
    for script, locales in SCRIPTS.items():
        found[script] = [t for locale in locales for t in translations(locale, per_locale)]
        assert len(found[script]) >= 100 * len(locales), f"{script}: few translations in {CATALOGUES}"
    return found


def train_xlmr_tokenizer(texts: list[str], out: Path, size: int = 3000, family: str = "xlm-roberta") -> Path:
    """A SentencePiece model trained on ``texts`` with XLM-R's layout (its own ``<unk> <s>
    </s>`` first), saved into ``out`` as the hub serves XLM-R's (or, with ``family``
    ``camembert``, CamemBERT's, whose tokenizer numbers the same model another way):
    ``sentencepiece.bpe.model``, and transformers' own tokenizer files made from it.
    Returns ``out``."""
    import sentencepiece
    from transformers import CamembertTokenizer, XLMRobertaTokenizer

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(texts), model_prefix=str(out / "spm"), vocab_size=size, hard_vocab_limit=False,
        character_coverage=0.9995, minloglevel=2,
    )  # fmt: skip
    (out / "spm.model").rename(out / "sentencepiece.bpe.model")
    (out / "spm.vocab").unlink()
    hf_class = {"xlm-roberta": XLMRobertaTokenizer, "camembert": CamembertTokenizer}[family]
    hf_class.from_pretrained(str(out)).save_pretrained(str(out))
    return out


def renumbered(tokenizer: Path, out: Path, family: str) -> Path:
    """The SentencePiece model of ``tokenizer`` (an XLM-R directory) as ``family``'s hub
    directory lays it out (``camembert``: its own numbering of the same pieces)."""
    from transformers import CamembertTokenizer, XLMRobertaTokenizer

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(Path(tokenizer) / "sentencepiece.bpe.model", out / "sentencepiece.bpe.model")
    hf_class = {"xlm-roberta": XLMRobertaTokenizer, "camembert": CamembertTokenizer}[family]
    hf_class.from_pretrained(str(out)).save_pretrained(str(out))
    return out


def byte_level_bpe(texts: list[str], size: int, min_frequency: int = 2) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """A byte-level BPE of ``size`` tokens trained on ``texts`` as HF's trainer trains one
    (:data:`SPECIALS`, then the 256 byte characters, then each merge's result; pairs seen
    fewer than ``min_frequency`` times are not merged), but the same in every run: among
    pairs of equal count the first in order is merged, where HF's trainer takes whichever
    its hash order puts first, which changes from process to process (and with it every
    model built over the tokenizer, and the searches some tests calibrate on them).

    Returns:
        ``{token: id}`` and the merges in order.
    """
    from tokenizers import pre_tokenizers

    split = pre_tokenizers.ByteLevel(add_prefix_space=False)
    counts = Counter(piece for text in texts for piece, _ in split.pre_tokenize_str(text))
    vocab = {token: i for i, token in enumerate([*SPECIALS, *sorted(pre_tokenizers.ByteLevel.alphabet())])}
    words, frequency = [list(word) for word in counts], list(counts.values())
    pairs, holders = Counter(), defaultdict(set)  # pair -> count; pair -> the words that held it
    for i, word in enumerate(words):
        for pair in zip(word, word[1:], strict=False):
            pairs[pair] += frequency[i]
            holders[pair].add(i)
    merges = []
    while len(vocab) < size and pairs and max(pairs.values()) >= min_frequency:
        best = max(pairs.values())
        a, b = min(pair for pair, count in pairs.items() if count == best)
        merges.append((a, b))
        vocab[a + b] = len(vocab)
        for i in sorted(holders.pop((a, b))):
            word, f = words[i], frequency[i]
            for pair in zip(word, word[1:], strict=False):
                pairs[pair] -= f
            merged, j = [], 0
            while j < len(word):
                if word[j : j + 2] == [a, b]:
                    merged.append(a + b)
                    j += 2
                else:
                    merged.append(word[j])
                    j += 1
            words[i] = merged
            for pair in zip(merged, merged[1:], strict=False):
                pairs[pair] += f
                holders[pair].add(i)
        for pair in [pair for pair, count in pairs.items() if count <= 0]:
            del pairs[pair]
    return vocab, merges


def train_tokenizer(texts: list[str], out: Path, size: int = 600) -> Path:
    """A RoBERTa-style tokenizer trained on ``texts`` (:func:`byte_level_bpe`: the same in
    every run), saved by transformers into ``out``."""
    from tokenizers import AddedToken, ByteLevelBPETokenizer
    from transformers import RobertaTokenizerFast

    bpe = ByteLevelBPETokenizer(*byte_level_bpe(texts, size))
    bpe.add_special_tokens(SPECIALS)  # ids 0 to 3 already, as the trainer gives them
    bpe.add_special_tokens([AddedToken("<mask>", lstrip=True)])  # last, taking the space before it, as in RoBERTa
    tokenizer = RobertaTokenizerFast(
        tokenizer_object=bpe._tokenizer, bos_token="<s>", eos_token="</s>", sep_token="</s>", cls_token="<s>",
        unk_token="<unk>", pad_token="<pad>", mask_token="<mask>",
    )  # fmt: skip
    tokenizer.save_pretrained(out)
    return Path(out)


def vocab_size(tokenizer_dir: Path) -> int:
    data = json.loads((Path(tokenizer_dir) / "tokenizer.json").read_text())
    return max([*data["model"]["vocab"].values(), *(t["id"] for t in data["added_tokens"])]) + 1


def write_vocab_merges(tokenizer_dir: Path, out: Path) -> None:
    """The older layout of the same tokenizer: ``vocab.json`` (every token, added ones too)
    and ``merges.txt``, as roberta-base ships them."""
    data = json.loads((Path(tokenizer_dir) / "tokenizer.json").read_text())
    vocab = dict(data["model"]["vocab"])
    for added in data["added_tokens"]:
        vocab.setdefault(added["content"], added["id"])
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    (out / "merges.txt").write_text("#version: 0.2\n" + "".join(m + "\n" for m in merges))


def scaled(model, seed: int = 0, std: float = 0.5):
    """``model`` with every parameter moved by N(0, std^2) noise, far from its initialisation
    (zero biases and unit layer norms would hide a swapped or dropped tensor), in eval mode."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * std)
    return model.eval()


def save_model(model, tokenizer_dir: Path, out: Path, weights: str = "safetensors", tokenizer: str = "json") -> Path:
    """Save ``model`` as the hub does.

    Args:
        weights: ``safetensors``, ``bin`` (pytorch_model.bin), or ``sharded-safetensors`` /
            ``sharded-bin`` (shards of about 20 kB and their index).
        tokenizer: ``json`` (tokenizer.json), ``pair`` (vocab.json + merges.txt) or ``both``.
    """
    out = Path(out)
    sharded = weights.startswith("sharded")
    model.save_pretrained(out, safe_serialization="safetensors" in weights, max_shard_size="20KB" if sharded else "5GB")
    if "bin" in weights and (out / "model.safetensors").exists():  # transformers 5 writes safetensors only
        state = {k: v.contiguous() for k, v in model.state_dict().items()}
        _save_bin(state, out, sharded)
    if tokenizer in ("json", "both"):
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copyfile(Path(tokenizer_dir) / name, out / name)
    if tokenizer in ("pair", "both"):
        write_vocab_merges(tokenizer_dir, out)
    return out


def _save_bin(state: dict, out: Path, sharded: bool) -> None:
    """``pytorch_model.bin``, or its shards and index, in place of the safetensors files
    (transformers 5 writes only safetensors; the hub still serves .bin checkpoints)."""
    for path in out.glob("model*.safetensors*"):
        path.unlink()
    if not sharded:
        torch.save(state, out / "pytorch_model.bin")
        return
    keys, weight_map = sorted(state), {}
    for number, start in enumerate(range(0, len(keys), 8), 1):
        name = f"pytorch_model-{number:05d}.bin"
        torch.save({k: state[k] for k in keys[start : start + 8]}, out / name)
        weight_map.update({k: name for k in keys[start : start + 8]})
    (out / "pytorch_model.bin.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


# ---------------------------------------------------------------- a fairseq release in HF's layout


def hf_vocab(encoder_json: Path, dict_txt: Path, mask: bool) -> dict:
    """HF's vocab.json of a fairseq model: a piece's id is its GPT-2 id's line in dict.txt
    plus the four specials, ``<mask>`` last (how roberta-base's vocab.json was made)."""
    gpt2 = json.loads(Path(encoder_json).read_text())
    row = {int(line.split()[0]): n for n, line in enumerate(Path(dict_txt).read_text().splitlines())}
    vocab = {s: i for i, s in enumerate(SPECIALS)} | {piece: 4 + row[i] for piece, i in gpt2.items() if i in row}
    if mask:
        vocab["<mask>"] = 4 + len(row)
    return vocab


def _save_as_hub(model, weights: dict, tied: str, release: Path, bpe: Path, out: Path, mask: bool):
    """``model`` holding ``weights`` (the keys it lacks all name ``tied`` copies), saved in
    ``out`` with the release's vocab.json and merges.txt; returns it, in eval mode."""
    missing, unexpected = model.load_state_dict(weights, strict=False)
    assert not unexpected and all(tied in k for k in missing), (missing, unexpected)
    model.save_pretrained(out)
    (out / "vocab.json").write_text(json.dumps(hf_vocab(bpe / "encoder.json", release / "dict.txt", mask=mask)))
    shutil.copyfile(bpe / "vocab.bpe", out / "merges.txt")
    return model.eval()


def roberta_as_hf(release: Path, bpe: Path, out: Path):
    """A fairseq RoBERTa release (model.pt, dict.txt; GPT-2-style files in ``bpe``) as
    transformers' RobertaForMaskedLM in ``out``, with vocab.json and merges.txt: what the
    hub serves as roberta-base. Returns the HF model."""
    from transformers import RobertaConfig, RobertaForMaskedLM

    state = torch.load(release / "model.pt", map_location="cpu", weights_only=False)["model"]
    fs, hf = "encoder.sentence_encoder.", "roberta."
    tokens, positions = state[fs + "embed_tokens.weight"], state[fs + "embed_positions.weight"]
    layers = 1 + max(int(k.split(".")[3]) for k in state if k.startswith(fs + "layers."))
    config = RobertaConfig(
        vocab_size=tokens.shape[0], hidden_size=tokens.shape[1], num_hidden_layers=layers,
        num_attention_heads=4, intermediate_size=state[fs + "layers.0.fc1.weight"].shape[0],
        max_position_embeddings=positions.shape[0], type_vocab_size=1, layer_norm_eps=1e-5,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    weights = {
        hf + "embeddings.word_embeddings.weight": tokens,
        hf + "embeddings.position_embeddings.weight": positions,
        hf + "embeddings.token_type_embeddings.weight": torch.zeros(1, tokens.shape[1]),
        "lm_head.decoder.weight": tokens,
        "lm_head.decoder.bias": state["encoder.lm_head.bias"],
    }
    for p in ("weight", "bias"):
        weights[f"{hf}embeddings.LayerNorm.{p}"] = state[f"{fs}layernorm_embedding.{p}"]
        for name in ("dense", "layer_norm", "bias"):
            key = f"encoder.lm_head.{name}" + ("" if name == "bias" else f".{p}")
            weights[key.replace("encoder.", "")] = state[key]
        for i in range(layers):
            for ours, theirs in (("self_attn.q_proj", "attention.self.query"),
                                 ("self_attn.k_proj", "attention.self.key"),
                                 ("self_attn.v_proj", "attention.self.value"),
                                 ("self_attn.out_proj", "attention.output.dense"),
                                 ("self_attn_layer_norm", "attention.output.LayerNorm"), ("fc1", "intermediate.dense"),
                                 ("fc2", "output.dense"), ("final_layer_norm", "output.LayerNorm")):  # fmt: skip
                weights[f"{hf}encoder.layer.{i}.{theirs}.{p}"] = state[f"{fs}layers.{i}.{ours}.{p}"]
    return _save_as_hub(RobertaForMaskedLM(config), weights, "position_ids", release, bpe, out, mask=True)


def bart_as_hf(release: Path, bpe: Path, out: Path):
    """A fairseq BART (model.pt, dict.txt, trained for translation: no <mask> row) as
    transformers' BartForConditionalGeneration in ``out``, with vocab.json and merges.txt.
    Returns the HF model."""
    from transformers import BartConfig, BartForConditionalGeneration

    state = torch.load(release / "model.pt", map_location="cpu", weights_only=False)["model"]
    tokens = state["encoder.embed_tokens.weight"]
    count = lambda side: 1 + max(int(k.split(".")[2]) for k in state if k.startswith(f"{side}.layers."))  # noqa: E731
    config = BartConfig(
        vocab_size=tokens.shape[0], d_model=tokens.shape[1], encoder_layers=count("encoder"),
        decoder_layers=count("decoder"), encoder_attention_heads=4, decoder_attention_heads=4,
        encoder_ffn_dim=state["encoder.layers.0.fc1.weight"].shape[0],
        decoder_ffn_dim=state["decoder.layers.0.fc1.weight"].shape[0],
        max_position_embeddings=state["encoder.embed_positions.weight"].shape[0] - 2, dropout=0.0,
        scale_embedding=False, forced_eos_token_id=None,
    )  # fmt: skip
    weights = {"model.shared.weight": tokens, "lm_head.weight": tokens}
    weights["final_logits_bias"] = torch.zeros(1, len(tokens))
    for key, value in state.items():  # BART's names are fairseq's under "model."
        if key.endswith((".version", "embed_tokens.weight", "output_projection.weight")):
            continue
        weights["model." + key] = value
    return _save_as_hub(BartForConditionalGeneration(config), weights, "embed_tokens", release, bpe, out, mask=False)
