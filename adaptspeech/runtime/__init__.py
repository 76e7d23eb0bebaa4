"""The parts of adaptspeech that run without PyTorch: audio decoding (:mod:`.audio`), the numeric front end
(:mod:`.features`), CTC decoding (:mod:`.ctc`, :mod:`.prefix_beam`), the pause rule (:mod:`.pauses`), long recordings
on a frame grid (:mod:`.long_form`: its defaults, speech regions cut at pauses, cuts inside a long region, chunks,
stitching), the exported model folder (:mod:`.folder`, :mod:`.tokens`) and :class:`OnnxRecognizer`, which transcribes
with an exported ONNX graph on onnxruntime.

This is the package's ground floor: it imports nothing of adaptspeech but itself and, for ``--decoder lm``, the n-gram
LM decoder (:mod:`adaptspeech.lm.decoder`); tests/test_package_structure.py holds the rule. Nothing in this package
imports torch, and the torch code paths reuse it (the data preparation decodes audio with
:func:`~.audio.load_audio`, the torch CTC decoders collapse paths and search prefixes with the functions here), so
a model runs the same front end and decoders with or without PyTorch. ``pip install adaptspeech[runtime]`` adds
onnxruntime; PyTorch is not imported on this path (``docs/export.md``).
"""

from .recognizer import OnnxRecognizer, Recognition

__all__ = ["OnnxRecognizer", "Recognition"]
