"""Our checkpoints out, in the formats others serve and load: every exporter starts from a
:class:`~longformer_fs.checkpoint.Checkpoint` (its kind and its head, :mod:`longformer_fs.heads`)
and writes through the one output step (:mod:`longformer_fs.output`: staged, all or
nothing, never over another model without ``--force``).

- HF transformers (``export-hf``): :mod:`.hf` for ``longformer_roberta``, the class of its
  head; :mod:`.hf_led` for ``led``. HF's formats (weight names, tokenizer files) are shared
  with the way in (:mod:`longformer_fs.hf_format`); export/ imports nothing of conversion/.
- ONNX (``export-onnx``, ``docs/deploy.md``): :mod:`.onnx` traces, checks and writes the
  file; :mod:`.onnx_served` is the graph a file serves; :mod:`.onnx_trace` the tracing step
  both ONNX plans share; :mod:`.onnx_translations` is what
  the exporter writes our way: the band attention op (lowered by :mod:`.onnx_band`) and
  a GELU onnxruntime fuses; :mod:`.onnx_led` writes an LED as optimum's encoder and
  decoder files (served by :mod:`longformer_fs.serving`); :mod:`.onnx_quantize` is
  ``--quantize int8``.

A new format is a module here over the same two: read the checkpoint with ``Checkpoint``,
write with :func:`~longformer_fs.output.guarded_output` (a directory) or
:func:`~longformer_fs.output.guarded_file` (one file).
"""
