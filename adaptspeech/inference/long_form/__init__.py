"""The stages of a long recording, from the recording on the model's frame grid to stitched text and timestamps
(the order: :mod:`adaptspeech.inference`); :mod:`adaptspeech.inference.transcriber` runs them."""
