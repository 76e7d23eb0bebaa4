"""Who tells the language: the model's own language-ID head, or a separate transformers
``Wav2Vec2ForSequenceClassification`` folder (the MMS-LID format, ``facebook/mms-lid-126`` ...) whose labels are
mapped to the model's languages.

Both answer :meth:`LanguageIdentifier.log_probs` ``[B, L]`` over :attr:`LanguageIdentifier.languages`; the table
:data:`LANGUAGE_IDENTIFIERS` names them (``"head"``, ``"sequence_classification"``).

A separate model's labels are read from its ``config.id2label``: a label that is one of the routed model's
languages stands for it; others are mapped by ``label_map`` (``{"ron": "ro"}``); labels that stand for none of the
model's languages are left out and the posterior is renormalised over the rest. A ``label_map`` entry naming a label
the separate model does not have, or a language the routed model cannot route, is refused naming it; so is a model
whose labels cover none of the languages.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...registry import Registry


class LanguageIDError(ValueError):
    """A language-ID setting that cannot work (one line naming it)."""


class LanguageIdentifier:
    """Base: ``languages`` and :meth:`log_probs` of waveforms or of a collated batch of the routed model's inputs."""

    languages: list[str]

    def log_probs(self, waveforms: Sequence[np.ndarray]) -> torch.Tensor:
        """Waveforms ``[S_i]`` at 16 kHz -> log-posteriors ``[B, L]`` over :attr:`languages`."""
        raise NotImplementedError

    def log_probs_batch(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """A collated batch of the routed model's inputs -> log-posteriors ``[B, L]`` over :attr:`languages`."""
        raise NotImplementedError

    def log_probs_with_prefix(self, waveforms: Sequence[np.ndarray]) -> tuple[torch.Tensor, Any]:
        """:meth:`log_probs` and the routed model's encoder prefix of these waveforms
        (:class:`~adaptspeech.heads.encoder_prefix.EncoderPrefix`; None where the identifier is another model)."""
        return self.log_probs(waveforms), None


LANGUAGE_IDENTIFIERS: Registry[type[LanguageIdentifier]] = Registry("language identifier")


@LANGUAGE_IDENTIFIERS.register("head")
@dataclass
class HeadIdentifier(LanguageIdentifier):
    """The routed model's own language-ID head (:mod:`adaptspeech.heads.lid`).

    Args:
        model: an adaptspeech model with ``lid_head``.
        processor: its processor (its feature extractor makes the model's input from a waveform).
    """

    model: Any
    processor: Any
    languages: list[str] = field(init=False)

    def __post_init__(self) -> None:
        if getattr(self.model, "lid_head", None) is None:
            raise LanguageIDError(
                "--language auto: the model has no language-ID head; train one with a stage whose model.trainable.lid "
                "is true (docs/lid.md) or pass --lid-model DIR (a Wav2Vec2ForSequenceClassification folder)"
            )
        self.languages = list(self.model.config.lid_languages)

    def log_probs(self, waveforms: Sequence[np.ndarray]) -> torch.Tensor:
        return self.log_probs_with_prefix(waveforms)[0]

    @torch.no_grad()
    def log_probs_with_prefix(self, waveforms: Sequence[np.ndarray]) -> tuple[torch.Tensor, Any]:
        from ...data.collator import model_collator
        from ...data.feature_types import FeatureType

        kind = FeatureType.of(self.processor.feature_extractor)
        rows = [{kind.input_name: kind.extract(np.asarray(w, np.float32))} for w in waveforms]
        collator = model_collator(self.model, self.processor, ctc_labels=False)
        return self._identify(collator(rows), keep_prefix=True)

    def log_probs_batch(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        return self._identify(batch, keep_prefix=False)[0]

    @torch.no_grad()
    def _identify(self, batch: Mapping[str, torch.Tensor], keep_prefix: bool) -> tuple[torch.Tensor, Any]:
        """``(log-posteriors [B, L], the encoder prefix or None)`` of a collated batch, in evaluation mode."""
        model = self.model
        inputs = batch[model.main_input_name].to(model.device)
        mask = batch.get("attention_mask")
        mask = None if mask is None else mask.to(model.device)
        was_training = model.training
        model.eval()
        try:
            if keep_prefix:
                logits, prefix = model.lid_logits_with_prefix(inputs, mask)
            else:
                logits, prefix = model.lid_logits(inputs, mask), None
        finally:
            model.train(was_training)
        return logits.log_softmax(-1).cpu(), prefix


@LANGUAGE_IDENTIFIERS.register("sequence_classification")
@dataclass
class SequenceClassificationIdentifier(LanguageIdentifier):
    """A transformers audio classifier folder (``Wav2Vec2ForSequenceClassification``, the MMS-LID format) with its
    feature extractor, its labels mapped to the routed model's languages.

    Args:
        model: the classifier (``config.id2label`` names its labels).
        feature_extractor: its feature extractor (16 kHz waveforms -> ``input_values``).
        model_languages: the languages the routed model can route (its adapter languages).
        label_map: classifier label -> model language, for labels that are not spelled as the language.
        where: the folder, for messages.
    """

    model: Any
    feature_extractor: Any
    model_languages: Sequence[str]
    label_map: Mapping[str, str] = field(default_factory=dict)
    where: str = "--lid-model"
    languages: list[str] = field(init=False)
    label_ids: list[int] = field(init=False)

    def __post_init__(self) -> None:
        id2label = {int(i): str(label) for i, label in self.model.config.id2label.items()}
        labels = set(id2label.values())
        unknown = sorted(set(self.label_map) - labels)
        if unknown:
            shown = ", ".join(sorted(labels)[:12]) + (" ..." if len(labels) > 12 else "")
            raise LanguageIDError(f"{self.where}: the label map names label(s) {unknown} the model does not have; its "
                                  f"labels: {shown}")
        targets = sorted(set(self.label_map.values()) - set(self.model_languages))
        if targets:
            raise LanguageIDError(f"{self.where}: the label map maps to {targets}, which the model has no adapter for; "
                                  f"its languages: {', '.join(self.model_languages)}")
        chosen: dict[str, int] = {}
        for index in sorted(id2label):
            label = id2label[index]
            language = self.label_map.get(label, label if label in self.model_languages else None)
            if language is not None and language not in chosen:
                chosen[language] = index
        if not chosen:
            shown = ", ".join(sorted(labels)[:12]) + (" ..." if len(labels) > 12 else "")
            raise LanguageIDError(
                f"{self.where}: none of its {len(labels)} labels ({shown}) is one of the model's languages "
                f"({', '.join(self.model_languages)}); map them with --lid-label-map LABEL=LANGUAGE,..."
            )
        self.languages = list(chosen)
        self.label_ids = list(chosen.values())

    @classmethod
    def from_folder(cls, folder: str | Path, model_languages: Sequence[str],
                    label_map: Mapping[str, str] | None = None) -> SequenceClassificationIdentifier:
        """Load ``folder`` with ``AutoModelForAudioClassification`` and ``AutoFeatureExtractor``.

        Raises:
            LanguageIDError: a file; no local folder and no Hub model that can be reached; a folder that does not load
                as an audio classifier, or whose labels do not fit.
        """
        from transformers import AutoFeatureExtractor, AutoModelForAudioClassification

        from ...hub_connection import hub_offline, hub_reachable

        if Path(folder).is_file():
            raise LanguageIDError(f"--lid-model {folder}: a file, not a folder (a Wav2Vec2ForSequenceClassification "
                                  "folder, or its Hub id)")
        if not Path(folder).is_dir() and (hub_offline() or not hub_reachable()):  # not the Hub's retries
            reason = "HF_HUB_OFFLINE is set" if hub_offline() else "no connection to the Hub"
            raise LanguageIDError(f"--lid-model {folder}: neither a local folder nor a model on the Hub that can be "
                                  f"reached (offline: {reason})")
        try:
            model = AutoModelForAudioClassification.from_pretrained(folder).eval()
            extractor = AutoFeatureExtractor.from_pretrained(folder)
        except (OSError, ValueError, KeyError) as err:
            if not Path(folder).is_dir():  # tried as a Hub id
                raise LanguageIDError(f"--lid-model {folder}: neither a local folder nor a model on the Hub that can "
                                      "be loaded (no such model, or no access)") from None
            raise LanguageIDError(f"--lid-model {folder}: not an audio classification folder "
                                  f"(Wav2Vec2ForSequenceClassification with its feature extractor): "
                                  f"{' '.join(str(err).split())[:200]}") from None
        return cls(model, extractor, list(model_languages), dict(label_map or {}), where=f"--lid-model {folder}")

    @torch.no_grad()
    def log_probs(self, waveforms: Sequence[np.ndarray]) -> torch.Tensor:
        rate = int(getattr(self.feature_extractor, "sampling_rate", 16000))
        inputs = self.feature_extractor([np.asarray(w, np.float32) for w in waveforms], sampling_rate=rate,
                                        padding=True, return_tensors="pt", return_attention_mask=True)
        device = next(self.model.parameters()).device
        logits = self.model(**{k: v.to(device) for k, v in inputs.items()}).logits.float()
        return logits[:, self.label_ids].log_softmax(-1).cpu()

    def log_probs_batch(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        if "input_values" not in batch:
            raise LanguageIDError(f"{self.where} reads waveforms; this data holds {', '.join(batch)} (prepare it "
                                  "with --feature-type waveform, or use the model's own language-ID head)")
        mask = batch.get("attention_mask")
        values = batch["input_values"]
        lengths = [int(m.sum()) for m in mask] if mask is not None else [values.shape[1]] * len(values)
        return self.log_probs([v[:n].numpy() for v, n in zip(values, lengths, strict=True)])


def parse_label_map(text: str | None) -> dict[str, str]:
    """``"ron=ro,ces=cs"`` -> ``{"ron": "ro", "ces": "cs"}``.

    Raises:
        LanguageIDError: an entry without ``=``, or a label given twice (naming them).
    """
    mapping: dict[str, str] = {}
    entries: dict[str, str] = {}
    for entry in filter(None, (part.strip() for part in (text or "").split(","))):
        label, sep, language = entry.partition("=")
        if not sep or not label.strip() or not language.strip():
            raise LanguageIDError(f"--lid-label-map: {entry!r} is not LABEL=LANGUAGE")
        label = label.strip()
        if label in mapping:
            raise LanguageIDError(f"--lid-label-map: label {label!r} is given twice ({entries[label]!r}, {entry!r}); "
                                  "give each label once")
        mapping[label], entries[label] = language.strip(), entry
    return mapping
