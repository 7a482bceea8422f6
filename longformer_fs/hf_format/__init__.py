"""HF transformers' formats, which both directions share: :mod:`longformer_fs.conversion`
reads released models in them, :mod:`longformer_fs.export` writes ours out in them, and
neither imports the other.

- :mod:`.weight_names`: where each weight of our models sits in HF's layout, one table per
  model family, read both ways;
- :mod:`.tokenizer_files`: HF's tokenizer files read (a byte-level BPE or a SentencePiece
  model), and written as the files ``prep`` takes;
- :mod:`.gpt2_numbering`: GPT-2's ids of a byte-level BPE's pieces, which HF's files no
  longer hold;
- :mod:`.token_ids`: a tokenizer's ids against a model's (the check, ``dict.txt``'s lines,
  the SentencePiece layout a ``dict.txt`` follows);
- :mod:`.tokenizer_out`: an HF tokenizer for a model's ids, written.
"""
