"""fairseq adapter: the ``polynomial_decay_groups`` learning-rate schedule.

fairseq's ``polynomial_decay`` (warmup, then linear decay) over ``optimization.lr``, with
every group of a ``composite`` optimizer following it in proportion to its own peak
rate (``lr_float``): coreference trains its task layers at 20 times the encoder's rate
throughout, as the original implementation did. fairseq's own route, ``pass_through``
to a scheduler per group, has no ``warmup_updates``/``total_num_update`` at the top
level, which the Makefile's fitted schedule sets.
"""

from fairseq.optim import FairseqOptimizer
from fairseq.optim.lr_scheduler import register_lr_scheduler
from fairseq.optim.lr_scheduler.polynomial_decay_schedule import (
    PolynomialDecayLRSchedule,
    PolynomialDecayLRScheduleConfig,
)


class _PerGroupRates(FairseqOptimizer):
    """What a scheduler sees of a ``composite`` optimizer: ``set_lr(lr)`` gives each group
    ``lr x its peak / base``, its peak being the group's ``lr_float`` (or ``optimization.lr``)."""

    def __init__(self, optimizer, base: float):
        super().__init__(optimizer.cfg)
        composite = optimizer
        while not hasattr(composite, "optimizers_config"):  # through fairseq's fp16 wrappers
            inner = getattr(composite, "fp32_optimizer", None) or getattr(composite, "wrapped_optimizer", None)
            if inner is None:
                raise ValueError(
                    "lr_scheduler polynomial_decay_groups: needs optimizer composite (a learning rate per "
                    f"parameter group), got {type(optimizer).__name__}"
                )
            composite = inner
        self.outer = optimizer
        self.groups = [
            (composite.optimizers[name], float(cfg.lr[0]) / base) for name, cfg in composite.optimizers_config.items()
        ]

    def set_lr(self, lr):
        for optimizer, scale in self.groups:
            optimizer.set_lr(lr * scale)

    def get_lr(self):
        return self.outer.get_lr()  # the default group's


@register_lr_scheduler("polynomial_decay_groups", dataclass=PolynomialDecayLRScheduleConfig)
class PolynomialDecayGroupsSchedule(PolynomialDecayLRSchedule):
    """fairseq's ``polynomial_decay`` over ``optimization.lr``, with every group of the
    ``composite`` optimizer following it in proportion: a group whose peak is 20 times
    ``optimization.lr`` runs at 20 times the scheduled rate at every update."""

    def __init__(self, cfg, optimizer):
        super().__init__(cfg, _PerGroupRates(optimizer, cfg.lr[0]))
