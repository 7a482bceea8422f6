"""Dataset preparation for longformer-fs (``longformer-fs prep ...``), one module per dataset.

What every preparation shares:

- :mod:`data_prep.fairseq_dataset`: the output directory and its manifest, staging, the
  mmap writer, the aligned files of a split, ``PrepError``;
- :mod:`data_prep.splits`: the one rule that cuts an input into train/valid/test;
- :mod:`data_prep.inputs`: input files checked for being what a command reads;
- :mod:`data_prep.tokenizer_pool`: the worker processes that tokenize in parallel, with
  :mod:`longformer_fs.tokenization` (text to a model's ids with character offsets: GPT-2's
  BPE or SentencePiece); :mod:`data_prep.gpt2_bpe`: BPE files trained for tests.

The datasets:

- :mod:`data_prep.char_corpus`: text8 and enwik8 as byte-level datasets (``prep text8``,
  ``prep enwik8``); :mod:`data_prep.demo_corpus`: the generated corpus of ``make demo``;
- :mod:`data_prep.doc_corpus`: long documents for masked-LM pretraining (``prep docs``),
  read by :mod:`data_prep.doc_sources` (text, JSONL, :mod:`data_prep.wikitext` dumps,
  :mod:`data_prep.pdf_papers`);
- :mod:`data_prep.summarization`: document/summary pairs for LED (``prep summarization``);
- the fine-tuning tasks: :mod:`data_prep.classification` (IMDB, Hyperpartisan),
  :mod:`data_prep.qa` (TriviaQA, SQuAD, read by :mod:`data_prep.qa_sources`), :mod:`data_prep.wikihop`,
  :mod:`data_prep.hotpotqa` and :mod:`data_prep.coref` (OntoNotes, CoNLL-2012).

Nothing here imports the plugin but what both sides agree on: :mod:`longformer_fs.conventions`
and :mod:`longformer_fs.tokenization`.
"""
