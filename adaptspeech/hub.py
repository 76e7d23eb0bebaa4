"""Publishing one language's adapter (or a fusion) on the Hugging Face Hub.

:func:`prepare_adapter_folder` writes everything that would be uploaded (``adapter.<lang>.safetensors``, its JSON
config, the fusion files when asked, and a model card ``README.md`` naming the base model and its revision, the
languages and the metrics); :func:`push_folder` uploads that folder. The two are separate so that the folder can be
checked, and loaded back with ``model.load_adapter(lang, folder)``, without any network.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from huggingface_hub import HfApi, ModelCard

from .hub_connection import hub_offline, hub_reachable
from .model_card import card_data, metrics_from_rates

MODEL_CARD_TEMPLATE = """---
{front_matter}
---

# {title}

{summary}

- **Base model:** `{base_model}` (revision `{revision}`, backbone type `{backbone_type}`)
- **Adapter:** {adapter_desc}
- **Encoder layers with adapters:** {layers}
- **Trainable parameters of this adapter:** {num_params:,}

## Metrics

{metrics_table}

## Use

```python
import adaptspeech
from adaptspeech import AdaptSpeechForCTC

model = AdaptSpeechForCTC.from_backbone("{base_model}", revision={revision_arg}, vocab_size={vocab_size})
{load_lines}
```
"""


class PushError(RuntimeError):
    """An upload that could not happen; the message is one line."""


def _metrics_table(metrics: Mapping[str, Any] | None) -> str:
    if not metrics:
        return "No metrics were recorded with this adapter."
    lines = ["| metric | value |", "| --- | --- |"]
    for key, value in metrics.items():
        lines.append(f"| {key} | {value:.4g} |" if isinstance(value, float) else f"| {key} | {value} |")
    return "\n".join(lines)


def prepare_adapter_folder(
    model: Any,
    folder: str | os.PathLike,
    language: str | None = None,
    include_fusion: bool = False,
    metrics: Mapping[str, Any] | None = None,
    include_head: bool = False,
    dataset: str = "test set",
) -> Path:
    """Write the files of one language's adapter (and/or the fusion) plus a model card into ``folder``.

    Args:
        model: an adaptspeech model.
        folder: where to write.
        language: the adapter to publish (None with ``include_fusion`` publishes the fusion alone).
        include_fusion: also write ``fusion.safetensors`` / ``fusion.json``; the card then lists the fused languages.
        metrics: e.g. ``{"test_cer": 0.061, "test_wer": 0.21}``, shown in the card.
        include_head: save the CTC head with the adapter (a language with its own vocabulary).
        dataset: the dataset the metrics were measured on: ``SPLIT_wer`` / ``SPLIT_cer`` metrics become the card's
            ``model-index`` (:mod:`adaptspeech.model_card`).
    """
    if language is None and not include_fusion:
        raise ValueError("name a language to publish, or include_fusion=True to publish the fusion")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = model.config
    num_params = 0
    languages: list[str] = []
    load_lines: list[str] = []
    if language is not None:
        model.save_adapter(language, folder, include_head=include_head)
        num_params += model.trainable_parameters()["groups"][f"adapter:{language}"]["total"]
        languages.append(language)
        load_lines.append(f'model.load_adapter("{language}", "<this repo>")')
        adapter_desc = config.adapters[language].describe()
    else:
        adapter_desc = "SimAdapter fusion only"
    if include_fusion:
        model.save_fusion(folder)
        fused = list(config.fusion.languages)
        num_params += model.trainable_parameters()["groups"]["fusion"]["total"]
        languages.extend(lang for lang in fused if lang not in languages)
        adapter_desc += f"; SimAdapter fusion over {', '.join(fused)}"
        load_lines += [f"# load the adapters of {', '.join(fused)} first, then", 'model.load_fusion("<this repo>")']
    base = config.backbone_name_or_path or f"(built from config: {config.backbone_type})"
    tags = ["automatic-speech-recognition", "adapters", "adaptspeech"] + (["simadapter"] if include_fusion else [])
    data = card_data(f"adaptspeech-adapter-{'-'.join(languages)}", languages, tags, config.backbone_name_or_path,
                     config.backbone_revision, metrics_from_rates(metrics, dataset), library_name="adaptspeech")
    card = MODEL_CARD_TEMPLATE.format(
        front_matter=data.to_yaml(),
        base_model=base,
        title=f"adaptspeech adapter: {', '.join(languages)}",
        summary=(
            "Per-language bottleneck adapter"
            + (" with SimAdapter fusion" if include_fusion else "")
            + " for a frozen speech encoder, trained with [adaptspeech](https://pypi.org/project/adaptspeech/)."
        ),
        revision=config.backbone_revision or "unrecorded",
        backbone_type=config.backbone_type,
        adapter_desc=adapter_desc,
        layers=", ".join(str(i) for i in sorted(model.adapter_blocks)),
        num_params=num_params,
        metrics_table=_metrics_table(metrics),
        revision_arg=json.dumps(config.backbone_revision),
        vocab_size=config.vocab_size,
        load_lines="\n".join(load_lines),
    )
    ModelCard(card).save(folder / "README.md")
    return folder


def push_folder(
    folder: str | os.PathLike,
    repo_id: str,
    token: str | None = None,
    private: bool = False,
    commit_message: str = "Upload adaptspeech adapter",
) -> str:
    """Upload ``folder`` to ``repo_id``; returns the commit URL.

    Raises:
        PushError: with a one-line message when offline (``HF_HUB_OFFLINE`` or no route to the Hub) or when the
            upload fails (authentication, permissions).
    """
    folder = Path(folder)
    if not folder.is_dir() or not any(folder.iterdir()):
        raise PushError(f"nothing to push: {folder} is missing or empty")
    if hub_offline():
        raise PushError(f"cannot push to {repo_id}: HF_HUB_OFFLINE is set (the folder {folder} is ready to upload)")
    if not hub_reachable():
        raise PushError(f"cannot push to {repo_id}: the Hub is unreachable (no network); {folder} is ready to upload")
    api = HfApi(token=token)
    try:
        api.create_repo(repo_id, private=private, exist_ok=True)
        info = api.upload_folder(folder_path=str(folder), repo_id=repo_id, commit_message=commit_message)
    except Exception as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise PushError(f"push to {repo_id} failed: {first}") from err
    return str(getattr(info, "commit_url", info))
