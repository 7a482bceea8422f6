"""Corpus preparation for longformer-fs (``longformer-fs prep ...``).

- :mod:`data_prep.fairseq_dataset`: what every preparation shares: the output directory
  and its manifest, staging, fairseq's special ids, the mmap writer, ``PrepError``;
- :mod:`data_prep.splits`: the one rule that cuts an input into train/valid/test;
- :mod:`data_prep.inputs`: input files checked for being what a command reads;
- :mod:`data_prep.char_corpus`: text8 and enwik8 as byte-level datasets;
- :mod:`data_prep.demo_corpus`: the generated corpus of ``make demo``;
- :mod:`data_prep.doc_corpus`: long-document corpora for masked-LM pretraining, read by
  :mod:`data_prep.doc_sources` (text, JSONL, :mod:`data_prep.wikitext` dumps,
  :mod:`data_prep.pdf_papers`) and tokenized by :mod:`data_prep.gpt2_bpe`.
"""
