"""What ``from_pretrained`` loads, and what it says when it cannot."""

import pytest
import torch
from helpers import fake_checkpoint, ok

from longformer_fs import from_pretrained
from longformer_fs.fairseq_format import CheckpointError


def test_each_model_class_gives_its_hub_interface(tiny_char_lm, longformer_hub, tmp_path):
    from longformer_fs.hub.char_lm import CharLMHubInterface
    from longformer_fs.hub.encoder import LongformerHubInterface
    from longformer_fs.models.longformer_lm import LongformerLanguageModel
    from longformer_fs.models.longformer_roberta import LongformerRobertaModel

    assert isinstance(LongformerLanguageModel.from_pretrained(tiny_char_lm[0]), CharLMHubInterface)
    ok("import-hf", longformer_hub, "--out", tmp_path / "mlm")
    hub = LongformerRobertaModel.from_pretrained(tmp_path / "mlm", "model.pt", ".")  # fairseq's own arguments
    assert isinstance(hub, LongformerHubInterface) and hub.encode("hello").tolist()[0] == 0
    with pytest.raises(ValueError, match="a LongformerLanguageModel checkpoint, not a LongformerRobertaModel"):
        LongformerRobertaModel.from_pretrained(tiny_char_lm[0])


def test_the_dictionary_and_tokenizer_given_by_hand_read_text_as_hf_does(longformer_hub, tmp_path):
    """A model directory holding only model.pt: its dictionary from ``data_name_or_path``
    (relative to the model's directory, as fairseq reads it) and GPT-2's BPE files from
    ``encoder_json=`` and ``vocab_bpe=``. The oracle is the released model's own HF tokenizer
    and model: the same ids, the same logits."""
    from transformers import AutoTokenizer, LongformerForMaskedLM

    ok("import-hf", longformer_hub, "--out", tmp_path / "model")
    files = tmp_path / "model" / "files"
    files.mkdir()
    for name in ("dict.txt", "encoder.json", "vocab.bpe"):
        (tmp_path / "model" / name).rename(files / name)
    with pytest.raises(FileNotFoundError):
        from_pretrained(tmp_path / "model", encoder_json=files / "encoder.json", vocab_bpe=files / "vocab.bpe")
    hub = from_pretrained(tmp_path / "model", "model.pt", "./files", encoder_json=files / "encoder.json",
                          vocab_bpe=files / "vocab.bpe")  # fmt: skip
    text = "Every command has --help; make help lists the make targets and their variables."
    expected = AutoTokenizer.from_pretrained(str(longformer_hub))(text)["input_ids"]
    tokens = hub.encode(text)
    assert tokens.tolist() == expected and len(expected) > 12
    theirs = LongformerForMaskedLM.from_pretrained(longformer_hub).eval()
    with torch.no_grad():
        torch.testing.assert_close(hub.model(tokens[None])[0], theirs(tokens[None]).logits, atol=1e-4, rtol=1e-4)


def test_what_cannot_be_loaded_is_said_in_one_line(tiny_roberta, tmp_path):
    ok("convert-roberta", tiny_roberta, "--out", tmp_path / "converted", "--max-positions", "256")
    with pytest.raises(FileNotFoundError, match="tokenizer: no encoder.json and vocab.bpe .* pass encoder_json="):
        from_pretrained(tmp_path / "converted")
    with pytest.raises(ValueError, match="GPT-2's BPE takes both encoder_json= and vocab_bpe="):
        from_pretrained(tmp_path / "converted", encoder_json=tmp_path / "encoder.json")
    fake_checkpoint(tmp_path / "lstm", "lstm", {"w": torch.zeros(1)})
    with pytest.raises(
        ValueError, match="is a 'lstm' model, not one of ours \\(longformer_roberta, led, longformer_lm\\)"
    ):
        from_pretrained(tmp_path / "lstm")
    data = (tmp_path / "converted" / "model.pt").read_bytes()
    (tmp_path / "cut").mkdir()
    (tmp_path / "cut" / "model.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="model.pt is truncated or corrupt"):
        from_pretrained(tmp_path / "cut")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        from_pretrained(tmp_path / "nowhere")
