"""The model card (``README.md``) of an exported folder, written with huggingface_hub's ``ModelCard`` /
``ModelCardData`` / ``EvalResult``: the Hub reads its metadata (``language``, ``base_model``, ``pipeline_tag``,
tags, and a ``model-index`` with the WER / CER given), so search finds the export by language and the results show
on the model page."""

from __future__ import annotations

from pathlib import Path
from typing import Any

METRIC_NAMES = {"wer": "WER", "cer": "CER"}


def eval_results(metrics: list[dict[str, Any]]) -> list[Any]:
    """``EvalResult`` objects from ``[{"metric": "wer"|"cer", "value": float, "dataset": name, "split": split,
    "dataset_type": hub id (default: the name), "config": subset (optional)}, ...]``.

    Raises:
        ValueError: a metric other than wer / cer, or a missing field (naming the entry).
    """
    from huggingface_hub import EvalResult

    results = []
    for number, entry in enumerate(metrics, 1):
        metric = str(entry.get("metric", "")).lower()
        if metric not in METRIC_NAMES:
            raise ValueError(f"metric {number} ({entry}): metric must be one of {', '.join(METRIC_NAMES)}")
        if "value" not in entry or "dataset" not in entry:
            raise ValueError(f"metric {number} ({entry}): needs a value and a dataset")
        results.append(EvalResult(
            task_type="automatic-speech-recognition", task_name="Speech Recognition",
            dataset_type=str(entry.get("dataset_type", entry["dataset"])), dataset_name=str(entry["dataset"]),
            dataset_split=entry.get("split"), dataset_config=entry.get("config"),
            metric_type=metric, metric_name=f"{METRIC_NAMES[metric]} (%)", metric_value=float(entry["value"]),
        ))
    return results


def write_card(folder: Path, settings: dict[str, Any], metrics: list[dict[str, Any]]) -> Path:
    """Write ``folder/README.md`` for an export with ``settings`` (``adaptspeech_export.json``) and ``metrics``
    (see :func:`eval_results`)."""
    from huggingface_hub import ModelCard, ModelCardData

    language = settings.get("language")
    languages = settings.get("fusion") or ([language] if language else [])
    what = (f"SimAdapter fusion over {', '.join(settings['fusion'])} (head: {language})" if settings.get("fusion")
            else f"the {language} adapter" if language else "no adapter")
    name = f"adaptspeech-{settings['backbone_type']}-{language or 'base'}-onnx"
    base = settings.get("backbone_name_or_path")
    data = ModelCardData(
        model_name=name,
        language=languages or None,
        library_name="onnx",
        pipeline_tag="automatic-speech-recognition",
        tags=["adaptspeech", "onnx", "ctc", "sherpa-onnx", "adapters"] + (["int8"] if "int8" in settings["graphs"]
                                                                            else []),
        base_model=base if base and not Path(base).exists() else None,
        base_model_revision=settings.get("backbone_revision"),
        license="apache-2.0",
        eval_results=eval_results(metrics) or None,
    )
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
