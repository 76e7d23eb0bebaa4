"""adaptspeech's data pipeline: Common Voice loading, audio and text processing, low-resource subsets,
multilingual mixing, batching, and an offline synthetic corpus in the Common Voice layout.

See ``docs/data.md`` for usage, the normalisation policy, the skip report and the synthetic builder.
"""

from .audio import BadClipError, load_audio, log_mel, mel_filterbank, num_frames
from .collator import IGNORE_INDEX, DataCollatorCTCWithPadding
from .common_voice import CV_COLUMNS, CV_SPLITS, load_common_voice, prepare_dataset, read_tsv
from .feature_types import FEATURE_TYPES, FeatureType, feature_type_of, feature_type_of_model
from .features import extract_features
from .prepared_corpus import PreparedCorpus, prepare_corpus
from .processor import build_processor
from .report import SKIP_REASONS, SkippedClip, SkipReport
from .subsets import (
    SubsetSize,
    TemperatureSampler,
    language_sampling_probabilities,
    low_resource_subset,
    speaker_disjoint_split,
    speakers,
    temperature_mix,
)
from .synthetic import DEFAULT_LANGUAGES, SyntheticConfig, build_synthetic_corpus, supported_languages
from .text import SPECIAL_TOKENS, build_vocab, count_oov, normalize_text

__all__ = [
    "CV_COLUMNS",
    "CV_SPLITS",
    "DEFAULT_LANGUAGES",
    "FEATURE_TYPES",
    "IGNORE_INDEX",
    "SKIP_REASONS",
    "SPECIAL_TOKENS",
    "BadClipError",
    "DataCollatorCTCWithPadding",
    "FeatureType",
    "PreparedCorpus",
    "SkipReport",
    "SkippedClip",
    "SubsetSize",
    "SyntheticConfig",
    "TemperatureSampler",
    "build_processor",
    "build_synthetic_corpus",
    "build_vocab",
    "count_oov",
    "extract_features",
    "feature_type_of",
    "feature_type_of_model",
    "language_sampling_probabilities",
    "load_audio",
    "load_common_voice",
    "log_mel",
    "low_resource_subset",
    "mel_filterbank",
    "normalize_text",
    "num_frames",
    "prepare_corpus",
    "prepare_dataset",
    "read_tsv",
    "speaker_disjoint_split",
    "speakers",
    "supported_languages",
    "temperature_mix",
]
