"""Self-training labels: an untranscribed pool decoded, scored and filtered into a prepared folder
(:mod:`.labelling`), and the word confidence methods compared on a labelled split (:mod:`.confidence_comparison`)."""
