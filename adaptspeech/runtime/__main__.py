"""``python -m adaptspeech.runtime --onnx DIR AUDIO...``: transcription without PyTorch (:mod:`.command`)."""

import sys

from .command import main

sys.exit(main())
