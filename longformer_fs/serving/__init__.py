"""Serving exported models without torch: what runs on a host that has onnxruntime, numpy
and HF's ``tokenizers`` only.

- :mod:`.beam_search`: fairseq's beam search (``SequenceGenerator``'s rules) in numpy over
  any decoder step; :class:`~.beam_search.GenerationSettings` is also ``summarize``'s.
- :mod:`.summarizer`: an LED exported by ``export-onnx`` (encoder, decoder and
  decoder-with-past files) summarizing texts (``longformer-fs summarize-onnx`` reads
  documents and PDFs for it).
- :mod:`.spans`: a QA model's file giving each token's start and end logits (``eval-qa``
  scores it).
- :mod:`.sessions`: the CPU sessions they open.

Nothing here imports torch or fairseq, directly or through the package: a test runs it in
an interpreter where torch cannot be imported.
"""
