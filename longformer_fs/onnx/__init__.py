"""ONNX export of our models (issue #35, in progress): the band attention's lowering to
ONNX operators (:mod:`.band`), for ``torch.onnx.export``'s ``custom_translation_table``."""
