"""Per-layer settings (windows, dilations) from one compact string, and per-head dilations."""

from __future__ import annotations

from typing import Sequence


def layer_values(spec: str | int | Sequence[int], num_layers: int, name: str = "attention windows") -> tuple[int, ...]:
    """One value per layer from "w", "w0,w1,..." or "w_bottom:w_top" (geometric).

    Used for windows and for dilations; ``name`` is the setting named in errors. A bare
    int is "w": Hydra types ``model.attention_window=32`` on the command line as one.
    """
    try:
        values = _parse(spec, num_layers, name)
    except ValueError as err:
        if str(err).startswith(name):
            raise
        raise ValueError(f"{name}: {spec!r} is not 'w', 'w0,w1,...' or 'lo:hi' with integers") from None
    if len(values) == 1:
        values = values * num_layers
    if len(values) != num_layers or min(values) < 0:
        raise ValueError(f"{name}: {spec!r} does not give {num_layers} values >= 0")
    return tuple(values)


def _parse(spec: str | int | Sequence[int], num_layers: int, name: str) -> list[int]:
    if isinstance(spec, int):
        values = [spec]
    elif not isinstance(spec, str):
        values = [int(x) for x in spec]
    elif ":" in spec:
        lo, hi = (int(x) for x in spec.split(":"))
        if lo < 1 or hi < lo:
            raise ValueError(f"{name}: {spec!r} needs 1 <= lo <= hi for a geometric lo:hi range")
        if num_layers == 1:
            values = [lo]
        else:  # bottom to top, evenly spaced in log scale, as the paper's growing windows
            ratio = (hi / lo) ** (1 / (num_layers - 1))
            values = [round(lo * ratio**i) for i in range(num_layers)]
    else:
        values = [int(x) for x in spec.split(",") if x.strip()]
    return values


def dilation_pattern(
    spec: str | Sequence[int], num_layers: int, num_heads: int, dilated_heads: int
) -> tuple[tuple[int, ...], ...]:
    """Per-layer, per-head dilations: the last ``dilated_heads`` heads of layer l get
    the layer's dilation (``spec`` in :func:`layer_values` syntax), the others 1.

    The paper dilates 2 heads of the upper layers of its character LM.
    """
    values = layer_values(spec, num_layers, "attention dilations")
    if not 0 <= dilated_heads <= num_heads or min(values) < 1:
        raise ValueError(f"--dilated-heads must be in [0, {num_heads}] and dilations >= 1")
    return tuple((1,) * (num_heads - dilated_heads) + (d,) * dilated_heads for d in values)
