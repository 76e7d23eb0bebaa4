"""Batching prepared utterances: padded inputs with bool masks, -100 labels, language ids, decoder targets."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..adapters.routing import effective_routing
from ..runtime.features import normalize_utterance
from .feature_types import DEFAULT_FEATURE_TYPE, FEATURE_TYPES, feature_type_of_model

IGNORE_INDEX = -100


@dataclass
class DataCollatorCTCWithPadding:
    """Collate rows of :func:`~adaptspeech.data.common_voice.prepare_dataset` into a training batch.

    Args:
        processor: the ``Wav2Vec2Processor`` (its tokenizer gives the ``[PAD]``, ``<s>`` and ``</s>`` ids, its
            feature extractor the padding value and, for on-the-fly fbank, the rate and ``n_mels``).
        language_to_id (`dict[str, int]`, *optional*): maps each row's ``language`` to the id in ``lang_ids``.
        feature_type (`str`, defaults to ``"waveform"``): the model's feature type (a name in
            :data:`~adaptspeech.data.feature_types.FEATURE_TYPES`): ``"waveform"`` pads ``input_values``; ``"fbank"``
            pads ``input_features`` (computed on the fly from ``input_values`` when a row has only those).
        add_decoder_targets (`bool`, defaults to `False`): also build the attention decoder's inputs/targets.
        pad_to_multiple_of (`int`, *optional*): round the input length up to a multiple of this.
        lid_language_to_id (`dict[str, int]`, *optional*): maps each row's ``language`` to its index in
            ``config.lid_languages``, given as ``lid_targets`` (training the language-ID head).
        ctc_labels (`bool`, defaults to `True`): give the rows' ``labels`` (off: a batch for the language-ID head
            alone, whose forward then skips the adapters and the output heads).
        lid_crop_seconds (`tuple[float, float]`, *optional*): ``(shortest, longest)``: cut each row's input to a
            random window of a length drawn uniformly from this range (whole rows when shorter; renormalised when the
            feature extractor normalises utterances), drawn with torch's global generator; only without
            ``ctc_labels`` (the transcript would no longer match the audio).

    Returns (from ``__call__``), with ``B`` rows, ``S`` samples, ``T`` frames, ``L`` the longest label sequence:
        - ``input_values`` ``[B, S]`` float32 (waveform) or ``input_features`` ``[B, T, n_mels]`` float32 (fbank),
          padded with the feature extractor's ``padding_value`` (0.0);
        - ``attention_mask`` ``[B, S or T]`` **bool**, True on real samples / frames (a long mask makes HF's
          encoder index by integer and costs most of the step);
        - ``labels`` ``[B, L]`` long, padded with -100 (when the rows have ``labels``);
        - ``lang_ids`` ``[B]`` long (when ``language_to_id`` is given);
        - ``lid_targets`` ``[B]`` long (when ``lid_language_to_id`` is given);
        - with ``add_decoder_targets``: ``decoder_input_ids`` ``[B, L + 1]`` = ``<s>`` + labels, padded with
          ``[PAD]``, and ``decoder_labels`` ``[B, L + 1]`` = labels + ``</s>``, padded with -100.
    """

    processor: Any
    language_to_id: Mapping[str, int] | None = None
    feature_type: str = DEFAULT_FEATURE_TYPE
    add_decoder_targets: bool = False
    pad_to_multiple_of: int | None = None
    lid_language_to_id: Mapping[str, int] | None = None
    ctc_labels: bool = True
    lid_crop_seconds: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        FEATURE_TYPES.check(self.feature_type, "feature_type")
        if self.lid_crop_seconds is not None and self.ctc_labels:
            raise ValueError(f"lid.crop_seconds {list(self.lid_crop_seconds)}: random crops cut the audio away from "
                             "its transcript; they are for a head trained alone (model.trainable: {lid: true})")
        tokenizer = self.processor.tokenizer
        if self.add_decoder_targets and (tokenizer.bos_token_id is None or tokenizer.eos_token_id is None):
            raise ValueError("add_decoder_targets needs a tokenizer with <s> and </s> tokens (see build_processor)")

    def __call__(self, features: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        if not features:
            raise ValueError("cannot collate an empty batch")
        kind = FEATURE_TYPES.get(self.feature_type).from_extractor(self.processor.feature_extractor)
        inputs = [kind.collate_input(row) for row in features]
        if self.lid_crop_seconds is not None:
            inputs = [random_crop(x, kind, self.lid_crop_seconds) for x in inputs]
        lengths = [x.shape[0] for x in inputs]
        longest = max(lengths)
        if self.pad_to_multiple_of:
            longest = -(-longest // self.pad_to_multiple_of) * self.pad_to_multiple_of
        pad_value = float(getattr(self.processor.feature_extractor, "padding_value", 0.0))
        padded = np.full((len(inputs), longest, *inputs[0].shape[1:]), pad_value, dtype=np.float32)
        mask = np.zeros((len(inputs), longest), dtype=bool)
        for i, x in enumerate(inputs):
            padded[i, : x.shape[0]] = x
            mask[i, : x.shape[0]] = True
        batch: dict[str, torch.Tensor] = {
            kind.input_name: torch.from_numpy(padded),
            "attention_mask": torch.from_numpy(mask),
        }
        if "labels" in features[0] and self.ctc_labels:
            labels = [list(map(int, row["labels"])) for row in features]
            batch["labels"] = _pad(labels, IGNORE_INDEX)
            if self.add_decoder_targets:
                tokenizer = self.processor.tokenizer
                batch["decoder_input_ids"] = _pad(
                    [[tokenizer.bos_token_id, *lab] for lab in labels], tokenizer.pad_token_id
                )
                batch["decoder_labels"] = _pad([[*lab, tokenizer.eos_token_id] for lab in labels], IGNORE_INDEX)
        if self.language_to_id is not None:
            batch["lang_ids"] = torch.tensor([self._language_id(row) for row in features], dtype=torch.long)
        if self.lid_language_to_id is not None:
            batch["lid_targets"] = torch.tensor([self._language_id(row, self.lid_language_to_id, "lid_language_to_id")
                                                for row in features], dtype=torch.long)
        return batch

    def _language_id(self, row: Mapping[str, Any], table: Mapping[str, int] | None = None,
                     name: str = "language_to_id") -> int:
        table = self.language_to_id if table is None else table
        language = row.get("language")
        if language not in table:
            raise KeyError(
                f"language {language!r} of clip {row.get('path', '?')} is not in {name}; "
                f"allowed values: {', '.join(table)}"
            )
        return int(table[language])


def _pad(sequences: Sequence[Sequence[int]], value: int) -> torch.Tensor:
    """``[B, max len]`` long tensor of ``sequences`` right-padded with ``value``."""
    out = torch.full((len(sequences), max(len(s) for s in sequences)), value, dtype=torch.long)
    for i, seq in enumerate(sequences):
        out[i, : len(seq)] = torch.tensor(seq, dtype=torch.long)
    return out


def random_crop(values: np.ndarray, kind: Any, seconds: tuple[float, float]) -> np.ndarray:
    """A random window of ``values`` ``[units, ...]`` (samples or frames of feature type ``kind``) whose length is
    drawn uniformly from ``seconds`` (in units; all of ``values`` when shorter), renormalised over itself when ``kind``
    normalises utterances; drawn with torch's global generator (seeded by the trainer)."""
    shortest, longest = (max(1, kind.num_units(round(s * kind.sampling_rate))) for s in seconds)
    length = int(torch.randint(shortest, longest + 1, ()).item())
    if values.shape[0] <= length:
        return values
    start = int(torch.randint(0, values.shape[0] - length + 1, ()).item())
    window = np.asarray(values[start:start + length], np.float32)
    return normalize_utterance(window, axis=0) if kind.do_normalize else window


def routes_languages(model: Any) -> bool:
    """True when the model routes each utterance to its language's adapter (needs ``lang_ids``), in the running call
    (its routing override, if any, else the model's settings)."""
    settings = getattr(model, "routing", None)
    routing = model.config if settings is None else effective_routing(settings)
    return len(routing.active_languages) > 1 and not routing.fusion_active


def model_collator(model: Any, processor: Any, lid_targets: bool = False,
                   ctc_labels: bool = True) -> DataCollatorCTCWithPadding:
    """The collator of ``model``'s batches: the features the model reads, and ``lang_ids`` when it routes languages
    (:func:`routes_languages`); with ``lid_targets`` each row's index in ``config.lid_languages`` (training the
    language-ID head), with ``ctc_labels=False`` no transcript labels (and the head's ``lid.crop_seconds`` random
    crops when it trains alone)."""
    lid_languages = model.config.lid_languages if lid_targets else None
    lid = model.config.lid if lid_targets else None
    return DataCollatorCTCWithPadding(
        processor,
        language_to_id=model.language_to_id if routes_languages(model) and ctc_labels else None,
        feature_type=feature_type_of_model(model),
        lid_language_to_id=None if lid_languages is None else {lang: i for i, lang in enumerate(lid_languages)},
        ctc_labels=ctc_labels,
        lid_crop_seconds=None if lid is None else lid.crop_seconds,
    )
