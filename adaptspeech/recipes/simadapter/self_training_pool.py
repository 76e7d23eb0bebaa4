"""The pool of a SimAdapter recipe's self-training (the section's ``pool``): checked, built once (the synthetic corpus's
unlabelled clips of the target, or a Common Voice release's ``other.tsv``) and what its clips say where the corpus
knows it (:mod:`~adaptspeech.recipes.simadapter.self_training` runs the rounds on it)."""

from __future__ import annotations

import json
from pathlib import Path

from ...data.common_voice import find_language_dir, read_tsv
from ...data.pool_overlap import check_pool_rows, held_out
from ...data.pools import (
    OTHER_TSV_SOURCE,
    POOL_MARKER,
    feature_extractor_for,
    load_pool,
    prepare_common_voice_other,
)
from ...data.synthetic import UNLABELLED_SENTENCES, build_synthetic_corpus
from ...data.text import normalize_text
from ...progress import log
from ..spec import RecipeError
from .self_training_settings import SelfTrainingSettings
from .spec import SimAdapterRecipe

#: the folder under the recipe's output_dir that holds everything self-training writes
FOLDER = "self_training"


def check_pool_setting(spec: SimAdapterRecipe, settings: SelfTrainingSettings) -> None:
    """Refuse a ``self_training.pool`` that is no pool folder or holds another language than the target (read from
    its ``pool_config.json`` alone: checked before the corpus is prepared and anything trains)."""
    if not settings.pool:
        return
    marker = Path(settings.pool) / POOL_MARKER
    if not marker.is_file():
        raise RecipeError(f"self_training.pool {settings.pool}: no {POOL_MARKER}, not a pool written by `adaptspeech "
                          "prepare audio-folder` / `common-voice-other`")
    language = json.loads(marker.read_text()).get("language")
    if language != spec.target:
        raise RecipeError(f"self_training.pool {settings.pool}: a pool of {language!r}, the recipe's target is "
                          f"{spec.target!r}")


def ensure_pool(spec: SimAdapterRecipe, settings: SelfTrainingSettings, prepared: Path) -> Path:
    """The pool folder of the target: ``settings.pool``, else (built once into ``self_training/pool``) the synthetic
    corpus's ``pool_clips`` unlabelled clips, or the Common Voice release's ``other.tsv``; refused when it shares a
    clip or a sentence with the prepared dev / test splits."""
    held = held_out(prepared, spec.target)
    if settings.pool:
        check_pool_setting(spec, settings)
        rows, _ = load_pool(settings.pool)
        try:
            check_pool_rows(rows, held, f"self_training.pool {settings.pool}")
        except ValueError as err:
            raise RecipeError(str(err)) from None
        return Path(settings.pool)
    folder = spec.output_dir / FOLDER / "pool"
    record = {"pool_clips": settings.pool_clips, "corpus": spec.corpus.to_dict(), "target": spec.target}
    marker = folder.parent / "pool_record.json"
    if (folder / POOL_MARKER).is_file() and marker.is_file() and json.loads(marker.read_text()) == record:
        return folder
    corpus = spec.corpus
    if corpus.type == "synthetic":
        root = Path(corpus.root or spec.output_dir / "corpus")
        build_synthetic_corpus(root, [spec.target], corpus.clips_per_language,
                               seed=spec.seed if corpus.seed is None else corpus.seed, num_workers=corpus.workers,
                               progress=spec.progress, unlabelled_clips=settings.pool_clips, **corpus.synthetic)
    else:
        if not corpus.root:
            raise RecipeError("self_training.pool: give a pool folder (the corpus has no root to read other.tsv from)")
        root = Path(corpus.root)
    extractor = feature_extractor_for(processor_dir=str(prepared / "processor"))
    pool = prepare_common_voice_other(root, spec.target, folder, extractor, held=held, progress=spec.progress,
                                      overwrite=True)  # the recipe's own pool folder, of other settings
    marker.write_text(json.dumps(record, indent=1))
    log(f"self-training pool: {pool.summary['segments']} segments, {60 * pool.summary['hours']:.1f} min -> {folder}")
    return folder


def held_aside_sentences(spec: SimAdapterRecipe, pool: Path) -> dict[str, str] | None:
    """What each pool clip says (normalised), when the corpus knows it (the synthetic corpus's
    ``unlabelled_sentences.tsv``; read only to measure the labels' error), else None."""
    source = str(json.loads((pool / POOL_MARKER).read_text()).get("source", ""))
    if not source.endswith(OTHER_TSV_SOURCE):  # an audio folder's pool: nobody knows what its clips say
        return None
    root = Path(source.removesuffix(OTHER_TSV_SOURCE))
    if not root.is_dir():
        return None
    tsv = find_language_dir(root, spec.target) / UNLABELLED_SENTENCES
    if not tsv.is_file():
        return None
    columns = read_tsv(tsv)
    return {p: normalize_text(s, spec.target) for p, s in zip(columns["path"], columns["sentence"], strict=True)}
