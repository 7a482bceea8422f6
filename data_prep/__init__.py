"""Corpus preparation for longformer-fs (``longformer-fs prep ...``).

- :mod:`data_prep.char_corpus`: text8 and enwik8 as fairseq byte-level datasets.
"""
