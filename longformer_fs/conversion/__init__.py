"""Checkpoints in and out of our models.

- Released RoBERTa -> ``longformer_roberta`` (:mod:`.roberta`, the paper's §5) and BART ->
  ``led`` (:mod:`.bart`, v2 §7), from a fairseq release or an HF directory (:mod:`.source`);
- released Longformer and LED checkpoints in HF transformers' layout -> ours
  (:mod:`.hf_import`, reading :mod:`.hf_directory` and :mod:`.hf_tokenizer`);
- ``longformer_roberta`` and ``led`` -> HF transformers (:mod:`.hf`, :mod:`.hf_led`).

:mod:`.hf_layout` holds the weight-name tables both directions read, and :mod:`.output`
how every converter writes its directory (all or nothing). Our own layout is the model
modules' (:mod:`longformer_fs.models`).
"""
