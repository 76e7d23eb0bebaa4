"""n-gram language models for CTC decoding: build an ARPA model from text (:mod:`.build`, with kaldingram's
Kneser-Ney estimator), decode CTC output with it through pyctcdecode and KenLM (:mod:`.decoder`), save it beside a
model as a ``Wav2Vec2ProcessorWithLM`` so transformers' pipeline applies it (:mod:`.processor`; the files of a saved
LM, checked when read: :mod:`.files`), and tune its weights (:mod:`.tune`).

Installation: ``kaldingram``, ``ufal.kenlm`` (KenLM's Python module as wheels) and ``pygtrie`` install with pip from
the ``lm`` extra; ``pyctcdecode`` declares ``numpy<2``, so it is installed with ``pip install --no-deps
pyctcdecode==0.5.0`` (``run.sh`` does it); it works with numpy 2.
"""
