"""fairseq's ``Model.from_pretrained`` for our models: the checkpoint's hub interface."""


class FromPretrained:
    """Mixed into each of our models, before fairseq's class (whose own ``from_pretrained``
    would build RoBERTa's or BART's interface)."""

    @classmethod
    def from_pretrained(cls, model_name_or_path, checkpoint_file="model.pt", data_name_or_path=None, **kwargs):
        """The hub interface of a checkpoint of this kind of model (see
        :func:`longformer_fs.hub.from_pretrained`, whose arguments these are)."""
        from ..hub import from_pretrained  # the hub builds on the models' packages, not the other way

        hub = from_pretrained(model_name_or_path, checkpoint_file, data_name_or_path, **kwargs)
        if not isinstance(hub.model, cls):
            raise ValueError(f"{model_name_or_path}: a {type(hub.model).__name__} checkpoint, not a {cls.__name__}")
        return hub
