"""Output heads. ``HEADS`` lists the head names a config may use."""

from ..registry import Registry
from .ctc import CTCHead

#: head name -> what it trains: "ctc" (CTC only), "las" (attention decoder only), "ctc_las" (both, with
#: loss = ctc_weight * CTC + (1 - ctc_weight) * attention).
HEADS: Registry[str] = Registry("head")
HEADS.register("ctc")("ctc")
HEADS.register("las")("las")
HEADS.register("ctc_las")("ctc_las")

__all__ = ["HEADS", "CTCHead"]
