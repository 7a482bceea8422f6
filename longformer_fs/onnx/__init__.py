"""ONNX export of our models (``export-onnx``, ``docs/deploy.md``): :mod:`.served`, the graph
a file serves; :mod:`.band`, the band attention's lowering to ONNX operators (for
``torch.onnx.export``'s ``custom_translation_table``); :mod:`.export`, the command's work
(trace, self-check, guarded write)."""
