"""Tiny models for tests, examples, benchmarks and smoke runs: seconds on a CPU, nothing downloaded.

- :mod:`adaptspeech.testing.tiny_models`: tiny :class:`~adaptspeech.AdaptSpeechConfig` settings of every backbone,
  random inputs for them and a random tiny model folder (re-exported here).
- :mod:`adaptspeech.testing.tones`: a synthetic "tone speech" corpus and a tiny joint CTC/LAS model trained on it
  (``from adaptspeech.testing.tones import ...``).
"""

from .tiny_models import TINY_BACKBONES, save_tiny_model, tiny_config, tiny_inputs

__all__ = ["TINY_BACKBONES", "save_tiny_model", "tiny_config", "tiny_inputs"]
