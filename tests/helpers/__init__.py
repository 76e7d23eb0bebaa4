"""The test suite's helpers, one module per concern, imported by every test as ``helpers.<module>`` (the root
``tests/conftest.py`` puts ``tests/`` on ``sys.path``):

- :mod:`helpers.paths`: the repository's folders (recipes, scripts, docs, the saved-format fixtures);
- :mod:`helpers.numerics`: how two code paths that compute the same floats are compared (and when exactly);
- :mod:`helpers.files`: a folder's files as bytes (to show that a refused or failed write left it as it was);
- :mod:`helpers.cli`: ``adaptspeech`` run in this process or as a subprocess, its one-line errors, a tiny stage spec,
  and the mean loss of a model over a prepared split;
- :mod:`helpers.attention`: loop references of a linear layer and a softmax, which output frames an input reaches;
- :mod:`helpers.decoders`: the transcripts the joint models overfit and every decoder's options;
- :mod:`helpers.lid`: two clearly different synthetic languages (tone bands) and their prepared folder, a stage that
  trains a language-ID head, a tiny transformers language-ID classifier, a model folder with a head;
- :mod:`helpers.lm`: the n-gram LM tests' text, a prepared ``dev`` folder and the ``lm tune`` command line;
- :mod:`helpers.mms`: tiny MMS checkpoints and adapter files written by transformers itself;
- :mod:`helpers.model_folders`: random tiny model folders (model + processor), a random labelling model over a prepared
  folder's vocabulary, and test audio for the inference tests (a long recording of synthetic clips joined by pauses,
  and the check that an export splits it as the PyTorch path does);
- :mod:`helpers.recipes`: the repository's recipe folders and the overrides that make a toy recipe run a few steps;
- :mod:`helpers.training`: prepared-style rows, ``TrainingArguments`` for a few CPU steps, a callback stopping a run.
- :mod:`helpers.without_torch`: Python in a subprocess where PyTorch and the other dependencies outside the
  ``runtime`` extra cannot be imported.

The library's own tiny models, which users, docs and scripts use too, are :mod:`adaptspeech.testing`.
"""
