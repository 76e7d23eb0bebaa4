"""Stage 0 of the MMS SimAdapter recipe: wrap an MMS checkpoint and import the source languages' MMS adapters.

Writes an adaptspeech model folder holding the MMS encoder (frozen in every later stage), one bottleneck adapter per
source language read from the checkpoint's ``adapter.<lang>.safetensors`` files (without their heads: SimAdapter
does not need them) and a fresh shared CTC head sized to the target language's vocabulary (the prepared
processor's). The stage files of this folder start from it (``model.init: pretrained``).

    python recipes/mms_simadapter/import_sources.py --checkpoint facebook/mms-1b-all \\
        --sources ces,pol,slk,ukr,rus --processor runs/mms_simadapter/prepared/processor \\
        --out runs/mms_simadapter/sources

Reading ``facebook/mms-1b-all`` needs the network once (the Hub caches the files); a local copy of the repository
works offline.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

#: MMS adapter names (ISO 639-3) by family, for choosing the sources of a new language (check a name against the
#: repository's file list: ``adapter.<code>.safetensors``)
FAMILIES: dict[str, tuple[str, ...]] = {
    "slavic": ("bel", "bul", "ces", "hrv", "mkd", "pol", "rus", "slk", "slv", "srp", "ukr"),
    "romance": ("cat", "fra", "glg", "ita", "por", "ron", "spa"),
    "germanic": ("dan", "deu", "eng", "isl", "nld", "nob", "swe"),
}


def import_sources(
    checkpoint: str,
    sources: Sequence[str],
    processor_dir: str | Path,
    out: str | Path,
    mms_language: str | None = None,
    revision: str | None = None,
) -> Path:
    """Wrap ``checkpoint``, load the ``sources``' MMS adapters without heads, size the shared CTC head to the
    processor's vocabulary, drop the built-in language unless it is a source, and save to ``out``.

    Returns:
        ``out``, an adaptspeech model folder (``AutoModelForCTC.from_pretrained(out)``).
    """
    from transformers import Wav2Vec2Processor

    from adaptspeech import AdaptSpeechForCTC

    tokenizer = Wav2Vec2Processor.from_pretrained(processor_dir).tokenizer
    special = {"vocab_size": len(tokenizer), "pad_token_id": tokenizer.pad_token_id}
    if tokenizer.bos_token_id is not None:
        special.update(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    model = AdaptSpeechForCTC.from_backbone(checkpoint, revision=revision, mms_language=mms_language, **special)
    builtin = model.config.active_languages[0]
    for language in sources:
        if language != builtin:
            model.load_adapter(language, checkpoint, revision=revision, load_head=False, activate=False)
    if builtin not in sources:
        model.remove_language_adapter(builtin)
    model.set_active_languages([])
    out = Path(out)
    model.save_pretrained(out)
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", default="facebook/mms-1b-all", help="MMS checkpoint (Hub id or folder)")
    parser.add_argument("--revision", default=None, help="Hub revision of the checkpoint")
    parser.add_argument("--sources", default=None, help="comma-separated MMS adapter names (default: --family's)")
    parser.add_argument("--family", choices=sorted(FAMILIES), default=None, help="take every source of a family")
    parser.add_argument("--mms-language", default=None, help="language of the checkpoint's built-in adapter")
    parser.add_argument("--processor", required=True, help="the target's prepared processor/ folder")
    parser.add_argument("--out", required=True, help="the adaptspeech model folder to write")
    args = parser.parse_args(argv)
    if bool(args.sources) == bool(args.family):
        parser.error("give exactly one of --sources and --family")
    sources = args.sources.split(",") if args.sources else list(FAMILIES[args.family])
    out = import_sources(args.checkpoint, sources, args.processor, args.out, args.mms_language, args.revision)
    print(f"{out}: MMS encoder with source adapters {', '.join(sources)}")


if __name__ == "__main__":
    main()
