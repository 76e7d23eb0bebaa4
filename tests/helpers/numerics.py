"""How the tests compare floats.

Exact equality (``torch.equal``) is kept for literally the same computation: a save / load round trip into the same
classes, the same modules called again on the same input, values copied, gathered or masked without arithmetic,
integers and masks. Two code paths that compute the same numbers (the native adapter block and the peft layer, a
wrapped layer and the plain one, a batch and one utterance alone, an identity that adds zeros) round differently: the
order of a sum depends on the CPU's vector width (AVX-512, AVX2 or none), on the BLAS / oneDNN kernel chosen for a
shape or a memory layout, and on the thread count, so they are compared with :func:`assert_paths_agree`.
"""

from __future__ import annotations

import torch

#: two float32 paths through a tiny model (width 32, 2 layers, logits around 1): a Sapphire Rapids CPU (AVX-512) gave
#: 0.65522 where the same model's other path gave 0.65521; a wrong weight, mask or routing moves the logits by 1e-2 or
#: more (the tests that check that something acts use 1e-3).
PATHS_RTOL, PATHS_ATOL = 1e-4, 1e-5


def assert_paths_agree(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """``actual`` equals ``expected`` up to the float32 rounding of two code paths (``PATHS_RTOL``, ``PATHS_ATOL``)."""
    torch.testing.assert_close(actual, expected, rtol=PATHS_RTOL, atol=PATHS_ATOL)
