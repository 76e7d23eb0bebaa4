"""Options of the LSH / ALSH kinds (:mod:`adaptspeech.attention.lsh`, section 3.2 of Wu et al. 2022,
"Input-independent attention weights are expressive enough")."""

from __future__ import annotations

from dataclasses import dataclass

from ...settings import is_int
from .base import KindOptions, require_positive_int


@dataclass
class LSHOptions(KindOptions):
    """Settings every LSH kind reads.

    Args:
        lsh_num_keys (`int`, defaults to 64): ``C``, the most keys a query attends to (the top ``C`` keys sharing its
            hash, eq. 3).
        lsh_seed (`int`, defaults to 0): seed of the random projections ``a`` (a buffer, saved with the module).
    """

    lsh_num_keys: int = 64
    lsh_seed: int = 0

    def __post_init__(self) -> None:
        require_positive_int("lsh_num_keys", self.lsh_num_keys)
        if not is_int(self.lsh_seed) or self.lsh_seed < 0:
            raise ValueError(f"attention.lsh_seed must be an integer >= 0, got {self.lsh_seed!r}")


@dataclass
class SignALSHOptions(LSHOptions):
    """Settings of ``lsh_sign_alsh``.

    Args:
        sign_alsh_u (`float`, defaults to 0.75): ``U`` in ``T(x) = U x / M`` (eq. 4), in ``(0, 1)``.
        sign_alsh_m (`int`, defaults to 2): ``m``, extra dimensions of ``S`` and ``R`` (eqs. 5-6).
    """

    sign_alsh_u: float = 0.75
    sign_alsh_m: int = 2

    def __post_init__(self) -> None:
        super().__post_init__()
        require_positive_int("sign_alsh_m", self.sign_alsh_m)
        u = self.sign_alsh_u
        if isinstance(u, bool) or not isinstance(u, (int, float)) or not 0 < u < 1:
            raise ValueError(f"attention.sign_alsh_u must be a number in (0, 1), got {u!r}")
