"""Output heads. ``HEADS`` lists the head names a config may use."""

from ..registry import Registry
from .ctc import CTCHead

#: head name -> what it trains ("ctc": CTC only).
HEADS: Registry[str] = Registry("head")
HEADS.register("ctc")("ctc")

__all__ = ["HEADS", "CTCHead"]
