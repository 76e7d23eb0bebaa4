"""Write a tiny corpus in the Common Voice release layout (``<lang>/clips/*.mp3``, ``train/dev/test.tsv``,
``clip_durations.tsv``): tones and noise with short real sentences of each language; for dry runs and tests of the
real-data path without a download (see :mod:`adaptspeech.recipes.simadapter.cv_layout`).

    python scripts/write_cv_layout.py --out /tmp/cv --languages ru,cy,it,eu,pt,ro,cs,br,ar,uk --train 8 --seconds 2
"""

from __future__ import annotations

import argparse
import time

from adaptspeech.recipes.simadapter.cv_layout import write_common_voice_layout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the release folder to write")
    parser.add_argument("--languages", default="ru,cy,it,eu,pt,ro,cs,br,ar,uk")
    parser.add_argument("--train", type=int, default=8, help="training clips per language")
    parser.add_argument("--dev", type=int, default=2)
    parser.add_argument("--test", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=2.0, help="mean clip length")
    parser.add_argument("--format", choices=("mp3", "wav"), default="mp3")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    start = time.perf_counter()
    languages = [lang for lang in args.languages.split(",") if lang]
    clips = {"train": args.train, "dev": args.dev, "test": args.test}
    written = write_common_voice_layout(args.out, languages, clips, args.seconds, args.seed, args.format)
    total = sum(sum(split.values()) for split in written.values())
    print(f"{total} clips of {len(written)} languages in {time.perf_counter() - start:.1f} s -> {args.out}")


if __name__ == "__main__":
    main()
