"""``python -m adaptspeech.cli``: the same as the ``adaptspeech`` command."""

import sys

from . import main

sys.exit(main())
