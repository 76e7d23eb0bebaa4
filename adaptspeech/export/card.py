"""The model card (``README.md``) of an exported folder: huggingface_hub's ``ModelCard`` with the metadata of
:func:`adaptspeech.model_card.card_data`, so search finds the export by language and the results show on the model
page."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from huggingface_hub import ModelCard

from ..model_card import METRIC_NAMES, card_data


def write_card(folder: Path, settings: dict[str, Any], metrics: list[dict[str, Any]]) -> Path:
    """Write ``folder/README.md`` for an export with ``settings`` (``adaptspeech_export.json``) and ``metrics``
    (see :func:`adaptspeech.model_card.eval_results`)."""
    language = settings.get("language")
    languages = settings.get("fusion") or ([language] if language else [])
    what = (f"SimAdapter fusion over {', '.join(settings['fusion'])} (head: {language})" if settings.get("fusion")
            else f"the {language} adapter" if language else "no adapter")
    name = f"adaptspeech-{settings['backbone_type']}-{language or 'base'}-onnx"
    base = settings.get("backbone_name_or_path")
    tags = ["adaptspeech", "onnx", "ctc", "sherpa-onnx", "adapters"]
    tags += ["int8"] if "int8" in settings["graphs"] else []
    data = card_data(name, languages, tags, base if base and not Path(base).exists() else None,
                     settings.get("backbone_revision"), metrics, library_name="onnx")
    graphs = ", ".join(f"`{file}` ({precision})" for precision, file in settings["graphs"].items())
    rows = "\n".join(f"| {m['dataset']} | {m.get('split', '')} | {METRIC_NAMES[m['metric'].lower()]} | {m['value']} |"
                     for m in metrics)
    results = f"| dataset | split | metric | value |\n|---|---|---|---|\n{rows}\n" if metrics else "Not given.\n"
    content = f"""---
{data.to_yaml()}
---

# {name}

A CTC speech recogniser exported by adaptspeech (`adaptspeech export`) with {what}: a
{settings['backbone_type']} encoder ({settings['feature']['type']} input at {settings['feature']['sampling_rate']} Hz)
as one ONNX graph ({graphs}) with dynamic batch and length, `tokens.txt` and `adaptspeech_export.json`.

## Results

{results}
## Usage

Without PyTorch (`pip install adaptspeech[runtime]`):

```bash
adaptspeech transcribe --onnx . clip.wav
```

With onnxruntime alone: feed `x` (float32 {'[batch, frames, n_mels] log-mel' if settings['feature']['framed']
else '[batch, samples] waveform'}, un-normalised) and `x_lengths` (int64 `[batch]`); take the argmax of `logits`
over the first `logits_lengths` frames, merge repeats, drop id {settings['tokenizer']['blank_id']} (the blank) and
look the ids up in `tokens.txt` (`▁` is a space).
"""
    ModelCard(content).save(folder / "README.md")
    return folder / "README.md"
