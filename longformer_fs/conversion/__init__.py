"""Released models in: other writers' checkpoints as ours (the way out is :mod:`longformer_fs.export`).

One type, :class:`.released.ReleasedModel` (weights, config, dictionary, tokenizer), and
around it:

- **readers**, one per layout (:mod:`.readers`): a fairseq ``model.pt`` directory, or a
  directory in HF transformers' layout (:mod:`.read_hf`, over :mod:`.hf_directory` and
  :mod:`longformer_fs.hf_format`);
- **transforms**, functions on the type: RoBERTa -> ``longformer_roberta`` (:mod:`.roberta`,
  the paper's §5), BART -> ``led`` (:mod:`.bart`, v2 §7), positions copied further out
  (:meth:`~.released.ReleasedModel.extend_positions`, also ``import-hf``'s, :mod:`.import_hf`);
- **one writer**, :meth:`~.released.ReleasedModel.write`: a ``model.pt`` directory through
  the output step every command shares (:mod:`longformer_fs.output`: staged, all or
  nothing, and never over another model without ``--force``).

HF's formats, which the way out shares (the weight-name tables, the tokenizer files read
and written), are :mod:`longformer_fs.hf_format`'s: conversion/ and export/ import nothing
of each other. Our own layout is the model modules' (:mod:`longformer_fs.models`).
"""
