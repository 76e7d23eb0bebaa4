"""Long recordings and their transcripts -> training clips (``adaptspeech prepare align``), one concern per module:

- :mod:`.lines`: the transcript's lines, normalised and spelled in the model's labels (uroman or a star for the rest);
- :mod:`.posteriors`: a CTC model folder (ours, or a transformers checkpoint) and a recording's log-probabilities,
  computed piecewise;
- :mod:`.segmentation`: the lines placed on the frames with ctc-segmentation, in blocks of bounded memory;
- :mod:`.filters`: NeMo's filters (score, CER, duration, length ratio);
- :mod:`.corpus`: clips + the Common Voice layout ``prepare`` reads, the report, resumable on a folder.

Needs the ``align`` extra (``pip install adaptspeech[align]``: ctc-segmentation, uroman).
"""
