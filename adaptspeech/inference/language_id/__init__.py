"""Language identification at inference: who tells the language (:mod:`.identifiers`), automatic routing of each
utterance to its language's adapter (:mod:`.routing`) and hybrid language scoring (:mod:`.hybrid`)."""

TEXT_SCORES = ("own", "shared", "base")
"""Which hypotheses each candidate language's LM scores for ``lm_per_char``
(:func:`.hybrid.candidates_features`): ``own``, its own system's hypothesis; ``shared``, every candidate's
hypothesis, averaged (the mean over ``i`` of the ``k x k`` matrix ``LM_j(hyp_i)``, :func:`.hybrid.lm_matrix`), so
that no adapter's own spelling decides; ``base``, one hypothesis of the encoder without adapters (the multilingual
base and the shared CTC head)."""
