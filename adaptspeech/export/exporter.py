"""``adaptspeech export``: one language of a saved CTC model (its adapter, or the SimAdapter fusion) as an ONNX folder
(:mod:`adaptspeech.runtime.folder` describes the layout) that runs without PyTorch.

What exports:

* every backbone (wav2vec2 post- and stable-layer-norm, hence the XLS-R / MMS shapes, wav2vec2-conformer, the fbank
  Conformer), through :mod:`.graph` (dynamic batch and length);
* the backbone's own attention and every swappable kind in :data:`EXPORTABLE_ATTENTION`; the others are refused
  (:data:`UNEXPORTABLE_ATTENTION` names each with its reason);
* CTC heads: ``ctc``, and the CTC branch of ``ctc_las`` (the graph stops at the CTC logits; the LAS decoder's
  autoregressive loop is not exported, so joint CTC/attention rescoring needs PyTorch); ``las`` alone is refused.

The folder is written into a hidden sibling and renamed into place, so an interrupted export leaves nothing
half-written (:func:`~adaptspeech.data.output_folder.atomic_output_folder`). ``overwrite`` replaces an earlier export
only: a file, a folder of other files, and a folder that is, holds or lies inside the model folder are refused.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import Wav2Vec2Processor

from ..data.feature_types import FeatureType
from ..data.output_folder import atomic_output_folder, check_output_folder
from ..lm.files import ALPHABET_NAME, LANGUAGE_MODEL_DIR
from ..runtime.features import GlobalCmvn
from ..runtime.folder import FORMAT_VERSION, FP32_GRAPH, INT8_GRAPH, SETTINGS_FILE, TOKENS_FILE
from ..saved_model import load_saved_model
from .card import write_card
from .graph import ExportableCTC, eager_attention, example_inputs, export_graph
from .quantize import DEFAULT_INT8_FORMAT, INT8_FORMATS, quantize_int8
from .tokens import token_table

#: swappable attention kinds whose export is tested to match PyTorch (tests/export/test_export_attention.py)
EXPORTABLE_ATTENTION: tuple[str, ...] = (
    "mhsa", "shared_qk", "ldsa", "synthesizer_dense", "synthesizer_dense_shared", "synthesizer_random", "rel_pos",
)
#: kinds refused, with the reason
UNEXPORTABLE_ATTENTION: dict[str, str] = {
    **{kind: "its hash buckets are sorted and gathered (onnxruntime has no Where kernel for the bucket ids' type)"
       for kind in ("lsh_simple", "lsh_simple_alsh", "lsh_sign_alsh", "lsh_xbox", "lsh_xbox_qnf")},
    "sparse_fixed": "the sparse layouts are built in Python from the sequence length",
    "sparse_strided": "the sparse layouts are built in Python from the sequence length",
}
QUANTIZATIONS = ("int8",)
EXPORT_OUTPUT = "adaptspeech export"
"""What the errors about ``--out`` call an export folder."""


class ExportError(ValueError):
    """A model or setting that cannot be exported; one line naming the setting and what would do."""


@dataclass(frozen=True)
class ExportResult:
    """What :func:`export_model` wrote: the folder, the graphs by precision and the language(s) inside."""

    folder: Path
    graphs: dict[str, Path]
    language: str | None
    fusion: list[str] | None


def choose_language(model: Any, language: str | None, fusion: bool) -> tuple[str | None, list[str] | None]:
    """Activate what the graph will hold: the fusion (its target language's head), or ``language``'s adapter (the
    only one when the model has a single language). Returns ``(language, fused languages or None)``.

    Raises:
        ExportError: no fusion with ``fusion``, or a ``language`` that is not the fusion's target; a language the
            model does not have (naming those it has); several
            languages and no ``language``.
    """
    languages = list(model.adapter_languages)
    if fusion:
        settings = model.config.fusion
        if settings is None:
            raise ExportError("--fusion: the model has no SimAdapter fusion (train one, or export one language with "
                              f"--language, one of {languages})")
        if language is not None and language != settings.target_language:
            raise ExportError(f"--language {language}: the model's SimAdapter fusion is a fusion for "
                              f"{settings.target_language} (its attention was trained for that head); export it with "
                              f"--fusion alone, or {language}'s adapter with --language {language} alone")
        model.set_fusion_active(True)
        return settings.target_language, list(settings.languages)
    if language is None:
        if len(languages) > 1:
            raise ExportError(f"the model has adapters for {len(languages)} languages ({', '.join(languages)}): pass "
                              "--language (or --fusion) to choose what the graph holds")
        if not languages:
            return None, None
        language = languages[0]
    if language not in languages:
        raise ExportError(f"--language {language}: the model has no adapter for it; it has "
                          f"{', '.join(languages) or 'none'}")
    model.set_target_language(language)
    return language, None


def check_exportable(model: Any) -> None:
    """Refuse a model whose graph would not be right: an attention kind ONNX cannot express, or no CTC head.

    Raises:
        ExportError: naming the kind (and the kinds that export) or the head.
    """
    kind = model.config.attention.kind
    if not model.config.attention.is_default and kind not in EXPORTABLE_ATTENTION:
        reason = UNEXPORTABLE_ATTENTION.get(kind, "its export is not tested")
        raise ExportError(f"attention kind {kind!r} cannot be exported to ONNX ({reason}); the kinds that export: "
                          f"default, {', '.join(EXPORTABLE_ATTENTION)}")
    if getattr(model, "ctc_head", None) is None:
        raise ExportError(f"head {model.config.head!r} has no CTC output: only CTC heads export (a ctc_las model "
                          "exports its CTC branch; the LAS decoder is not exported)")


def _feature_settings(processor: Any, model: Any) -> dict[str, Any]:
    features = FeatureType.of(processor.feature_extractor)
    return {
        "type": features.name,
        "framed": features.framed,
        "sampling_rate": features.sampling_rate,
        "n_mels": features.n_mels,
        "do_normalize": features.do_normalize,
        "normalization": features.normalization,
        "normalized_in_graph": features.do_normalize and features.normalizes_raw_units,
        "feature_size": features.feature_size,
        "unit_window": features.unit_window,
        "unit_hop": features.unit_hop,
        "global_cmvn": features.stats().to_dict() if features.global_normalization else None,
        "samples_per_frame": features.inputs_to_logits_ratio(model),
        "first_frame_units": _first_frame_units(model),
    }


def _first_frame_units(model: Any) -> int:
    """The fewest input units for which the front end gives one output frame. The front ends are chains of
    convolutions (wav2vec2's feature encoder, the fbank Conformer's subsampling), whose output length is then
    ``(units - first_frame_units) // units_per_frame + 1`` (:class:`~adaptspeech.runtime.long_form.FrameGeometry`):
    the runtime places a long recording's pieces on the model's frame grid with it."""
    return next(n for n in range(1, 1 << 20) if int(model._get_feat_extract_output_lengths(n)) >= 1)


def _max_frames(model: Any) -> int | None:
    """The longest encoder output the graph's relative position table covers (conformers), else None."""
    config = model.backbone.config
    if getattr(config, "position_embeddings_type", None) == "relative" and hasattr(config, "max_source_positions"):
        return int(config.max_source_positions)
    return None


def export_model(
    model_dir: str | os.PathLike,
    out: str | os.PathLike,
    language: str | None = None,
    fusion: bool = False,
    quantize: str | None = None,
    overwrite: bool = False,
    metrics: list[dict[str, Any]] | None = None,
    int8_format: str | None = None,
) -> ExportResult:
    """Export the saved model at ``model_dir`` into ``out``.

    Args:
        model_dir: a model folder (``adaptspeech train``'s ``model/``) with its processor.
        out: the folder to write: missing, empty, or an earlier export (replaced with ``overwrite`` only); not
            inside the model folder, nor holding it.
        language: the language whose adapter and head the graph holds.
        fusion: hold the SimAdapter fusion instead (its target language's head).
        quantize: ``"int8"`` also writes ``model.int8.onnx`` (:mod:`.quantize`).
        overwrite: replace an earlier export in ``out``.
        metrics: results for the model card (see :func:`adaptspeech.export.card.write_card`).
        int8_format: its format (:data:`.quantize.INT8_FORMATS`; None: 7-bit weights, the same logits on every x86
            CPU; ``"u8s8"`` for 8-bit weights on CPUs known to have VNNI).

    Raises:
        ExportError: see :func:`choose_language`, :func:`check_exportable`; a quantisation other than int8, an
            unknown ``int8_format``.
        FileExistsError, NotADirectoryError, OSError: an ``out`` refused by
            :func:`~adaptspeech.data.output_folder.check_output_folder` or that cannot be written (one line naming
            ``--out``); nothing is written.
    """
    if quantize is not None and quantize not in QUANTIZATIONS:
        raise ExportError(f"--quantize {quantize}: allowed values: {', '.join(QUANTIZATIONS)}")
    int8_format = int8_format or DEFAULT_INT8_FORMAT
    if int8_format not in INT8_FORMATS:
        raise ExportError(f"int8 format {int8_format}: allowed values: {', '.join(INT8_FORMATS)}")
    out, model_dir = Path(out), Path(model_dir)
    inputs = {"--model": model_dir}
    check_output_folder(out, SETTINGS_FILE, EXPORT_OUTPUT, overwrite=overwrite, inputs=inputs)  # before the model loads
    model = load_saved_model(model_dir, progress_bar=False).eval()
    check_exportable(model)
    if not (model_dir / "tokenizer_config.json").is_file():
        raise ExportError(f"--model {model_dir}: no tokenizer saved beside the model (tokens.txt needs it)")
    processor = Wav2Vec2Processor.from_pretrained(model_dir)
    language, fused = choose_language(model, language, fusion)
    table = token_table(processor.tokenizer)
    vocab_size = model.ctc_head.vocab_size_of(language) if language is not None else model.config.vocab_size
    if len(table) != vocab_size:
        raise ExportError(f"the CTC head of {language or 'the model'} has {vocab_size} outputs but the tokenizer in "
                          f"{model_dir} has {len(table)} tokens")
    feature = _feature_settings(processor, model)
    settings = {
        "format_version": FORMAT_VERSION,
        "language": language,
        "fusion": fused,
        "languages": list(model.adapter_languages),
        "backbone_type": model.config.backbone_type,
        "backbone_name_or_path": model.config.backbone_name_or_path,
        "backbone_revision": model.config.backbone_revision,
        "head": model.config.head,
        "attention": model.config.attention.kind,
        "feature": feature,
        "vocab_size": len(table),
        "max_frames": _max_frames(model),
        "tokenizer": {
            "blank_id": table.blank_id, "word_delimiter": table.word_delimiter,
            "skip_tokens": sorted(table.skip_tokens),
            "clean_up_tokenization_spaces": table.clean_up_tokenization_spaces,
            "do_lower_case": table.do_lower_case, "unk_token": table.unk_token,
        },
        "graph": {"inputs": ["x", "x_lengths"], "outputs": ["logits", "logits_lengths"], "normalizes_input":
                  feature.pop("normalized_in_graph")},
        "graphs": {"fp32": FP32_GRAPH},
    }
    with atomic_output_folder(out, SETTINGS_FILE, EXPORT_OUTPUT, overwrite=overwrite, inputs=inputs) as work:
        cmvn = GlobalCmvn.from_dict(feature["global_cmvn"]) if feature["global_cmvn"] else None  # what settings say
        module = ExportableCTC(model, normalize=settings["graph"]["normalizes_input"], global_cmvn=cmvn).eval()
        feature_size = int(feature["feature_size"]) if feature["framed"] else 1
        units = 200 if feature_size > 1 else int(feature["samples_per_frame"]) * 50
        with eager_attention(model):
            export_graph(module, example_inputs(model, feature_size, units), work / FP32_GRAPH)
        if quantize == "int8":
            quantize_int8(work / FP32_GRAPH, work / INT8_GRAPH, int8_format)
            settings["graphs"]["int8"] = INT8_GRAPH
            settings["int8_format"] = int8_format
        table.write(work / TOKENS_FILE)
        _copy_lm(model_dir, work)
        (work / SETTINGS_FILE).write_text(json.dumps(settings, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        write_card(work, settings, metrics or [])
    return ExportResult(out, {p: out / f for p, f in settings["graphs"].items()}, language, fused)


def _copy_lm(model_dir: Path, work: Path) -> None:
    """The model folder's saved n-gram LM (``alphabet.json`` and ``language_model/``), when it has one."""
    if (model_dir / LANGUAGE_MODEL_DIR).is_dir():
        shutil.copytree(model_dir / LANGUAGE_MODEL_DIR, work / LANGUAGE_MODEL_DIR)
        if (model_dir / ALPHABET_NAME).is_file():
            shutil.copy2(model_dir / ALPHABET_NAME, work / ALPHABET_NAME)

