"""Live recognition: :class:`~.recognizer.StreamingRecognizer`, the encoder as a stream (:mod:`.encoding`), a
stream's features (:mod:`.features`), PCM / WAV byte streams (:mod:`.pcm`) and endpointing on a voice activity
detector (:mod:`.vad_endpointing`)."""
