"""The one decoding vocabulary: every method's name and the paths that serve it, torch-free.

Every command names a decoder with ``--method`` (and an n-gram LM with ``--lm``), whatever runs it:

==================== ============================== ======================= ===================================
method               PyTorch (``transcribe --model``, streaming               ONNX runtime (``transcribe --onnx``,
                     ``evaluate``)                  (``transcribe --stream``) ``python -m adaptspeech.runtime``)
==================== ============================== ======================= ===================================
``ctc_greedy``       yes                            yes                     yes
``ctc_beam``         yes (``--lm``)                 yes (``--lm``)          yes (``--lm``)
``attention_greedy`` yes                            no                      no
``attention_beam``   yes                            no                      no
``joint``            yes                            no                      no
==================== ============================== ======================= ===================================

:data:`METHOD_PATHS` is the table; :mod:`adaptspeech.decoding.registry` registers each method's function under these
names (and refuses a name not here), :class:`~adaptspeech.inference.streaming.recognizer.StreamingRecognizer` and
:class:`~adaptspeech.runtime.recognizer.OnnxRecognizer` check their ``method`` with :func:`check_method`, and the
command line lists each path's methods with :func:`methods_for`. It lives in the runtime, the ground floor, so that
the ONNX path reads it without torch.
"""

from __future__ import annotations

from dataclasses import dataclass

PYTORCH, STREAMING, ONNX = "pytorch", "streaming", "onnx"
DECODING_PATHS: dict[str, str] = {
    PYTORCH: "the PyTorch path (transcribe --model, evaluate)",
    STREAMING: "streaming (transcribe --stream)",
    ONNX: "the ONNX runtime (transcribe --onnx)",
}
"""Each path that decodes, with the words a message names it by."""

LM_METHOD = "ctc_beam"
"""The method an n-gram LM (``--lm``) decodes with on every path: the CTC prefix beam search (pyctcdecode's offline,
the streaming search's LM fusion); the default method when an LM is given."""


@dataclass(frozen=True)
class MethodPaths:
    """One method's name and the paths that serve it.

    Args:
        name: the method's name (``--method``, ``method=``).
        paths: the paths that decode with it (names of :data:`DECODING_PATHS`).
    """

    name: str
    paths: frozenset[str]


METHOD_PATHS: dict[str, MethodPaths] = {
    entry.name: entry
    for entry in (
        MethodPaths("ctc_greedy", frozenset({PYTORCH, STREAMING, ONNX})),
        MethodPaths("ctc_beam", frozenset({PYTORCH, STREAMING, ONNX})),
        MethodPaths("attention_greedy", frozenset({PYTORCH})),
        MethodPaths("attention_beam", frozenset({PYTORCH})),
        MethodPaths("joint", frozenset({PYTORCH})),
    )
}
"""Every decoding method, simplest first, with the paths that serve it."""

DEPRECATED_DECODERS: dict[str, tuple[str, bool]] = {"greedy": ("ctc_greedy", False), "beam": ("ctc_beam", False),
                                                    "lm": (LM_METHOD, True)}
"""The ONNX path's former ``--decoder`` names -> ``(method, with the export's own LM)``."""


def methods_for(path: str) -> tuple[str, ...]:
    """The methods ``path`` serves, simplest first."""
    return tuple(name for name, entry in METHOD_PATHS.items() if path in entry.paths)


def check_method(method: str, path: str, lm: bool = False) -> None:
    """Raise ``ValueError`` (one line naming the path and the methods it serves) unless ``path`` decodes with
    ``method``; with ``lm`` (an n-gram LM given), unless ``method`` is :data:`LM_METHOD`."""
    if path not in DECODING_PATHS:
        raise ValueError(f"decoding path {path!r}; allowed values: {', '.join(DECODING_PATHS)}")
    served = methods_for(path)
    if method not in served:
        known = "" if method in METHOD_PATHS else " (no such method)"
        raise ValueError(f"--method {method}{known}: not served by {DECODING_PATHS[path]}, which serves: "
                         f"{', '.join(served)}")
    if lm and method != LM_METHOD:
        raise ValueError(f"--method {method}: --lm needs the prefix beam search (--method {LM_METHOD}, the default "
                         "with it)")


def resolve_method(method: str | None, path: str, lm: bool = False, default: str = "ctc_greedy") -> str:
    """The method a command decodes with: ``method``, else :data:`LM_METHOD` with an LM, else ``default``; checked
    (:func:`check_method`)."""
    chosen = method or (LM_METHOD if lm else default)
    check_method(chosen, path, lm)
    return chosen
