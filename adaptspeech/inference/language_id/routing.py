"""Automatic routing: each utterance goes to the adapter (and CTC head / vocabulary) of the language a language
identifier finds in it.

Which system runs for a language (:func:`routed_to`):

* the fusion's target language, on a model with a SimAdapter fusion: the fusion;
* a language with an adapter: that adapter alone, with its own CTC head and vocabulary when it has them (what
  :meth:`set_target_language` would select);
* a language without an adapter (the identifier knows more languages than the model routes): the encoder without
  adapters, with a warning naming the language.

With ``top_k > 1`` the utterance is decoded once per candidate language (the ``k`` most probable) and the hypothesis
with the best ``log p_CTC(hypothesis | audio, language's system) + prior_weight * log p_LID(language | audio)`` is kept:
the re-ranking MMS's language-ID recipe does in fairseq. The CTC score is the forward-algorithm log-likelihood of the
hypothesis's token ids under the routed model's CTC output, one encoder call over the whole recording.

Routing is **per call**: :func:`routed_to` and :func:`batch_routed_by_lid` run their block inside a
:func:`~adaptspeech.adapters.routing.routing_call` with a :class:`~adaptspeech.adapters.routing.RoutingOverride`
(:func:`routing_override`) that every adapter layer and the CTC head read instead of the model's settings; they never
write ``config.active_languages`` / ``fusion_active`` and never switch a shared tokenizer (a per-language MMS
vocabulary is read from a per-call copy: :func:`routed_tokenizer`). Two threads (a server) or two interleaved streams
routed to different languages on one model therefore compute exactly what each computes alone, and an error inside a
routed block leaves the model as it was.

Long recordings are identified from their first :data:`DEFAULT_LID_SECONDS` seconds.

The recognition pass of an identified batch starts from what the language-ID pass computed before the first adapter
layer (the front end, the layers below it: :mod:`adaptspeech.heads.encoder_prefix`) wherever its model input is the
identified one (a recording decoded whole, not longer than what the identifier reads; the pipeline's batches).
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ...adapters.routing import RoutingOverride, routing_call

DEFAULT_LID_SECONDS = 30.0
"""Seconds of a recording the identifier reads (the start of a longer one)."""
BASE = "base"
ADAPTER = "adapter"
FUSION = "fusion"


def system_for(model: Any, language: str) -> str:
    """Which system runs for ``language``: :data:`FUSION`, :data:`ADAPTER` or :data:`BASE` (see the module)."""
    fusion = model.config.fusion
    if fusion is not None and fusion.target_language == language:
        return FUSION
    return ADAPTER if language in model.adapter_languages else BASE


def routing_override(model: Any, language: str) -> RoutingOverride:
    """The per-call routing that runs ``language``'s system (:func:`system_for`): the fusion, its adapter alone, or no
    adapter; ``language`` is the override's target (its CTC head when it has one)."""
    system = system_for(model, language)
    if system == FUSION:
        return RoutingOverride(tuple(model.config.fusion.languages), True, language)
    if system == ADAPTER:
        return RoutingOverride((language,), False, language)
    return RoutingOverride((), False, language)


def language_tokenizer(tokenizer: Any, language: str) -> Any:
    """``tokenizer`` reading ``language``'s vocabulary: itself for a flat vocabulary (or a nested one already set to
    ``language``), else a copy switched with ``set_target_lang`` (the shared tokenizer is never written; the copy
    shares the read-only nested vocabulary)."""
    from ...heads.ctc import language_vocab_size

    tokenizer = getattr(tokenizer, "tokenizer", tokenizer)
    _, nested = language_vocab_size(tokenizer, language)
    if not nested or getattr(tokenizer, "target_lang", None) == language:
        return tokenizer
    switched = copy.deepcopy(tokenizer, memo={id(tokenizer.vocab): tokenizer.vocab})
    switched.set_target_lang(language)
    return switched


def routed_tokenizer(model: Any, language: str, tokenizer: Any) -> Any:
    """The tokenizer that decodes ``language``'s system: for an adapter, ``language``'s vocabulary (a per-language MMS
    vocabulary read from a copy, :func:`language_tokenizer`), checked against the CTC head it runs with; else
    ``tokenizer`` itself.

    Raises:
        ValueError: the head's size differs from the vocabulary's (transformers #24223), naming both.
    """
    from ...heads.ctc import check_head_fits_vocabulary, language_vocab_size

    tokenizer = getattr(tokenizer, "tokenizer", tokenizer)
    if system_for(model, language) != ADAPTER:
        return tokenizer
    size, _ = language_vocab_size(tokenizer, language)
    if getattr(model, "ctc_head", None) is not None:
        check_head_fits_vocabulary(model.ctc_head.vocab_size_of(language), size, language, tokenizer)
    return language_tokenizer(tokenizer, language)


def routed_processor(model: Any, language: str, processor: Any) -> Any:
    """``processor`` with :func:`routed_tokenizer`'s tokenizer (itself when that is its own; else a shallow copy)."""
    tokenizer = routed_tokenizer(model, language, processor.tokenizer)
    if tokenizer is processor.tokenizer:
        return processor
    routed = copy.copy(processor)
    routed.tokenizer = tokenizer
    return routed


@contextlib.contextmanager
def routed_to(model: Any, language: str, tokenizer: Any = None) -> Iterator[str]:
    """Inside the block the calls of this thread / context run ``language``'s system (yielded: :func:`system_for`)
    through a per-call routing override; the model's settings are never written (see the module docstring).

    Args:
        tokenizer: the processor's tokenizer, checked against the head ``language`` runs with; decode with
            :func:`routed_tokenizer` / :func:`routed_processor` (a per-language MMS vocabulary is not switched in
            place).
    """
    override = routing_override(model, language)
    if tokenizer is not None:
        routed_tokenizer(model, language, tokenizer)
    system = system_for(model, language)
    if system == BASE:
        warnings.warn(f"language {language!r} was identified but the model has no adapter for it (it has "
                      f"{', '.join(model.adapter_languages) or 'none'}): decoded with the encoder without adapters",
                      stacklevel=3)
    with routing_call(override=override):
        yield system


@torch.no_grad()
def ctc_log_likelihoods(
    model: Any, batch: dict[str, torch.Tensor], texts: Sequence[str], tokenizer: Any
) -> torch.Tensor:
    """``log p_CTC(text_b | utterance_b)`` ``[B]`` under the model as routed now (forward algorithm).

    Args:
        batch: the collated model inputs of ``B`` utterances (no labels).
        texts: one hypothesis per utterance.
    """
    if getattr(model, "ctc_head", None) is None:
        raise ValueError(f"re-ranking the top languages scores hypotheses with the CTC head; this model has "
                         f"head={model.config.head!r}: use one language (--lid-top-k 1)")
    from ...decoding import evaluating

    inputs = batch[model.main_input_name].to(model.device)
    mask = batch.get("attention_mask")
    with evaluating(model):
        out = model(**{model.main_input_name: inputs}, attention_mask=None if mask is None else mask.to(model.device))
    log_probs = out.logits.float().log_softmax(-1).transpose(0, 1).cpu()  # [T, B, V]
    targets = [list(tokenizer(text).input_ids) for text in texts]
    flat = torch.tensor([i for ids in targets for i in ids], dtype=torch.long)
    lengths = torch.tensor([len(ids) for ids in targets], dtype=torch.long)
    losses = torch.nn.functional.ctc_loss(log_probs, flat, out.frame_lengths.cpu(), lengths,
                                          blank=model.config.pad_token_id, reduction="none", zero_infinity=False)
    return -losses


@dataclass(frozen=True)
class LanguageChoice:
    """The language an utterance was routed to.

    Args:
        language: the chosen language.
        probability: its language-ID posterior.
        candidates: with re-ranking, per candidate ``{"language", "lid_log_prob", "ctc_log_likelihood", "score"}``.
    """

    language: str
    probability: float
    candidates: tuple[dict[str, Any], ...] = ()

    def fields(self) -> dict[str, Any]:
        """The JSON fields of a transcription: ``language``, ``language_probability`` (and ``language_candidates``)."""
        out: dict[str, Any] = {"language": self.language, "language_probability": round(self.probability, 6)}
        if self.candidates:
            out["language_candidates"] = list(self.candidates)
        return out


def top_languages(log_probs: torch.Tensor, languages: Sequence[str], k: int) -> list[tuple[str, float]]:
    """The ``k`` most probable ``(language, log-probability)`` of one utterance's log-posterior ``[L]``."""
    values, indices = log_probs.topk(min(k, len(languages)))
    return [(languages[int(i)], float(v)) for v, i in zip(values, indices, strict=True)]


def transcribe_auto(
    model: Any,
    processor: Any,
    waveforms: Sequence[np.ndarray],
    identifier: Any,
    top_k: int = 1,
    prior_weight: float = 1.0,
    lid_seconds: float = DEFAULT_LID_SECONDS,
    hybrid: Any = None,
    **transcribe_options: Any,
) -> list[Any]:
    """:func:`~adaptspeech.inference.transcriber.transcribe` with each recording routed to the language
    ``identifier`` finds (see the module docstring); each result's ``extra`` holds :meth:`LanguageChoice.fields`.

    Args:
        identifier: a :class:`~adaptspeech.inference.language_id.identifiers.LanguageIdentifier`.
        top_k: candidate languages decoded and re-ranked (1: the most probable only).
        prior_weight: weight of the language-ID log-prior in the re-ranking score.
        lid_seconds: seconds of each recording the identifier reads.
        hybrid: a :class:`~adaptspeech.inference.language_id.hybrid.HybridScorer`: the ``top_k`` candidates are scored
            with its calibration on the identified input (one pass of each candidate's system above the shared encoder
            prefix; ``prior_weight`` is not used) and only the chosen language decodes the recording.
        **transcribe_options: passed to ``transcribe`` (method, chunking, timestamps, LM ...; not ``lang_ids``).
    """
    from ...data.collator import model_collator
    from ...data.feature_types import FeatureType
    from ...heads.lid import UtteranceTooShortError
    from ..long_form.recording import nothing_to_decode
    from ..long_form.stitching import Transcription
    from ..transcriber import transcribe

    if top_k < 1:
        raise ValueError(f"top_k must be at least 1, got {top_k}")
    rate = int(processor.feature_extractor.sampling_rate)
    kind = FeatureType.of(processor.feature_extractor)
    results = []
    for waveform in waveforms:
        if nothing_to_decode(model, waveform) is not None:  # transcribe says why, without a model call
            results.append(transcribe(model, processor, [waveform], **transcribe_options)[0])
            continue
        try:
            log_probs, prefix = identifier.log_probs_with_prefix([waveform[: int(lid_seconds * rate)]])
            log_probs = log_probs[0]
        except UtteranceTooShortError as err:
            reason = f"too short to identify its language ({str(err).removeprefix('utterance 0 of the batch has ')})"
            results.append(Transcription(text="", chunks=[] if transcribe_options.get("timestamps") else None,
                                         seconds=len(waveform) / rate, extra={"skipped": reason}))
            continue
        candidates = top_languages(log_probs, identifier.languages, top_k)
        if hybrid is not None and len(candidates) > 1:
            identified = waveform[: int(lid_seconds * rate)]
            language, entries = _hybrid_choice(model, processor, identified, kind, prefix, candidates, hybrid)
            with routed_to(model, language), model.reusing_encoder_prefix(prefix):
                best = transcribe(model, routed_processor(model, language, processor), [waveform],
                                  **transcribe_options)[0]
            lid_log_prob = next(entry["lid_log_prob"] for entry in entries if entry["language"] == language)
            best.extra.update(LanguageChoice(language, float(np.exp(lid_log_prob)), tuple(entries)).fields())
            results.append(best)
            continue
        decoded = []
        for language, lid_log_prob in candidates:  # an encoder call on the identified input starts from its prefix
            routed = routed_processor(model, language, processor)
            with routed_to(model, language), model.reusing_encoder_prefix(prefix):
                result = transcribe(model, routed, [waveform], **transcribe_options)[0]
                entry = {"language": language, "lid_log_prob": round(lid_log_prob, 6)}
                if len(candidates) > 1:
                    batch = model_collator(model, routed, ctc_labels=False)([{kind.input_name: kind.extract(
                        np.asarray(waveform, np.float32))}])
                    likelihood = float(ctc_log_likelihoods(model, batch, [result.text], routed.tokenizer)[0])
                    entry.update(ctc_log_likelihood=round(likelihood, 6),
                                 score=round(likelihood + prior_weight * lid_log_prob, 6))
            decoded.append((entry, result))
        best_entry, best = max(decoded, key=lambda pair: pair[0].get("score", 0.0))
        choice = LanguageChoice(best_entry["language"], float(np.exp(best_entry["lid_log_prob"])),
                                tuple(entry for entry, _ in decoded) if len(candidates) > 1 else ())
        best.extra.update(choice.fields())
        results.append(best)
    return results


def _hybrid_choice(model: Any, processor: Any, waveform: np.ndarray, kind: Any, prefix: Any,
                   candidates: list[tuple[str, float]], hybrid: Any) -> tuple[str, list[dict[str, Any]]]:
    """The language the hybrid score picks for one identified input, and every candidate's features and score (one
    pass of each candidate's system, and for the ``base`` text score one of the encoder without adapters, each
    starting from the language-ID pass's encoder prefix)."""
    from ...data.collator import model_collator
    from .hybrid import best_path_scores

    batch = model_collator(model, processor, ctc_labels=False)([{kind.input_name: kind.extract(
        np.asarray(waveform, np.float32))}])
    texts, per_frame = [], []
    for language, _ in candidates:
        routed = routed_processor(model, language, processor)
        with routed_to(model, language), model.reusing_encoder_prefix(prefix):
            text, value = best_path_scores(model, batch, routed.tokenizer)
        texts.append(text[0])
        per_frame.append(float(value[0]))
    base_text = None
    if hybrid.lms is not None and hybrid.text_score == "base":
        with model.without_adapters(), model.reusing_encoder_prefix(prefix):
            base_text = best_path_scores(model, batch, processor.tokenizer)[0][0]
    features = hybrid.features([p for _, p in candidates], per_frame, texts, [lang for lang, _ in candidates],
                               base_text)
    entries = [{"language": language, **{k: round(v, 6) for k, v in f.items()}, "score": round(hybrid.score(f), 6)}
               for (language, _), f in zip(candidates, features, strict=True)]
    best = max(entries, key=lambda entry: entry["score"])
    return best["language"], entries


AUTO = "auto"
"""The ``target_lang`` / ``--language`` value that identifies each utterance's language."""


@contextlib.contextmanager
def batch_routed_by_lid(model: Any, inputs: torch.Tensor, attention_mask: torch.Tensor | None,
                        tokenizer: Any = None) -> Iterator[dict[str, torch.Tensor]]:
    """Identify each utterance of a batch with the model's own language-ID head and run the block with the batch
    routed per call (the model's settings are never written): one language -> :func:`routed_to`; several languages
    that each have an adapter -> those adapters routed per utterance. A model call on the same batch inside the block
    starts from what the language-ID pass computed before the first adapter layer
    (:mod:`adaptspeech.heads.encoder_prefix`). Yields ``{"language_ids": [B] (positions in config.lid_languages),
    "language_log_probs": [B]}``; decode with :func:`routed_tokenizer` of the first row's language.

    Raises:
        ValueError: a batch mixing languages of which one runs the fusion or has no adapter (one line: use batch
            size 1).
    """
    logits, prefix = model.lid_logits_with_prefix(inputs, attention_mask)
    best, ids = logits.log_softmax(-1).max(-1)
    languages = [model.config.lid_languages[int(i)] for i in ids]
    extras = {"language_ids": ids.cpu(), "language_log_probs": best.cpu()}
    if len(set(languages)) == 1:
        with routed_to(model, languages[0], tokenizer), model.reusing_encoder_prefix(prefix):
            yield extras
        return
    systems = {lang: system_for(model, lang) for lang in dict.fromkeys(languages)}
    if any(system != ADAPTER for system in systems.values()):
        raise ValueError(f"target_lang='auto': this batch holds utterances of {', '.join(systems)} "
                         f"({', '.join(f'{k}: {v}' for k, v in systems.items())}); only adapters can be routed per "
                         "utterance in one batch: call the pipeline with batch_size=1")
    override = RoutingOverride(tuple(systems), False, None)
    with routing_call(languages, override=override), model.reusing_encoder_prefix(prefix):
        yield extras
