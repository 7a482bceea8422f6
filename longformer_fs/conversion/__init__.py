"""Released models in and out of ours.

One type, :class:`.released.ReleasedModel` (weights, config, dictionary, tokenizer), and
around it:

- **readers**, one per layout (:mod:`.readers`): a fairseq ``model.pt`` directory, or a
  directory in HF transformers' layout (:mod:`.hf_reader`, over :mod:`.hf_directory` and
  :mod:`.hf_tokenizer`);
- **transforms**, functions on the type: RoBERTa -> ``longformer_roberta`` (:mod:`.roberta`,
  the paper's §5), BART -> ``led`` (:mod:`.bart`, v2 §7), positions copied further out
  (:meth:`~.released.ReleasedModel.extend_positions`, also ``import-hf``'s, :mod:`.hf_import`);
- **one output step** for every writer (:mod:`.output`): staged, all or nothing, and never
  over another model without ``--force``. :meth:`~.released.ReleasedModel.write` writes a
  ``model.pt`` directory through it, and so does ``export-hf`` (:mod:`.hf`, :mod:`.hf_led`)
  an HF one.

:mod:`.hf_layout` holds the weight-name tables both directions read. Our own layout is the
model modules' (:mod:`longformer_fs.models`).
"""
