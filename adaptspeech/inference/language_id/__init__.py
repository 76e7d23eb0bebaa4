"""Language identification at inference: who tells the language (:mod:`.identifiers`), automatic routing of each
utterance to its language's adapter (:mod:`.routing`) and hybrid language scoring (:mod:`.hybrid`)."""
