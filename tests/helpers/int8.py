"""The bounds of the int8 graph tests (tests/export), as fractions of the float logits' spread (their largest per-row
standard deviation over the real frames).

- ``INT8_KERNEL_TOLERANCE``: the int8 graph against its exact integer graph
  (:func:`adaptspeech.export.quantize.exact_integer_graph`), which differ by float rounding only when no int8 kernel
  saturates (measured: 0 on AVX-512 VNNI and on emulated AVX2); the 8-bit weights of ``u8s8`` on x86 without VNNI
  were off by 0.23 to 1.1 of the spread.
- ``INT8_BOUND``: the int8 graph against the float graph. Once the first bound holds, this distance is the exact
  integer graph's, computed in float from the rounded integers: the same on every CPU. The rounding of 7-bit weights
  (a step of 1/64 of each output channel's largest weight) and 8-bit activations (1/255 of each call's range)
  moved the tests' random tiny models' logits by 0.06 to 0.14 of the spread (8-bit weights, half the step: 0.04 to
  0.12).
"""

INT8_KERNEL_TOLERANCE = 1e-3
INT8_BOUND = 0.2
