"""The folder ``adaptspeech export`` writes, read without torch: its files, its settings and their checks.

Layout::

    OUT/
      model.onnx              fp32 graph (adaptspeech.export.graph: inputs x, x_lengths; outputs logits, logits_lengths)
      model.int8.onnx         the same with int8 linear-layer weights (``--quantize int8``)
      tokens.txt              SYMBOL ID a line (sherpa-onnx's format; the word delimiter written ▁)
      adaptspeech_export.json the settings below
      alphabet.json, language_model/   the model folder's n-gram LM, when it has one
      README.md               the model card
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .features import FRONT_ENDS, FrontEnd, GlobalCmvn, frame_params
from .long_form import FrameGeometry
from .tokens import TokenTable, read_symbols, table_from_symbols

SETTINGS_FILE = "adaptspeech_export.json"
TOKENS_FILE = "tokens.txt"
FP32_GRAPH = "model.onnx"
INT8_GRAPH = "model.int8.onnx"
FORMAT_VERSION = 1
PRECISIONS = ("fp32", "int8")


class ExportFolderError(ValueError):
    """An exported folder that cannot be used: one line naming the folder, the file and the fault."""


@dataclass(frozen=True)
class ExportedModel:
    """An exported folder's settings (``adaptspeech_export.json``) and token table.

    Attributes:
        path: the folder.
        settings: the JSON settings (``feature`` holds ``type``, ``framed``, ``sampling_rate``, ``n_mels``,
            ``do_normalize``, ``normalization``, ``global_cmvn``, ``samples_per_frame``, ``first_frame_units``, and
            in folders that write them ``feature_size``, ``unit_window``, ``unit_hop``;
            ``graph.normalizes_input``: whether the graph normalises its input, else the runtime does;
            ``graphs`` maps precision -> file;
            ``max_frames`` the longest output the graph's position table covers, or null).
        table: the token table of ``tokens.txt`` and the tokenizer settings.
    """

    path: Path
    settings: dict[str, Any]
    table: TokenTable

    @property
    def feature(self) -> dict[str, Any]:
        return self.settings["feature"]

    @property
    def global_cmvn(self) -> GlobalCmvn | None:
        """The training set's statistics the graph normalises its input with (``normalization: global``), or None
        (per-utterance normalisation, and folders exported before the setting existed): what
        :meth:`GlobalCmvn.apply` computes in numpy on :func:`~.features.log_mel_numpy` frames is the graph's
        normalised input."""
        stats = self.feature.get("global_cmvn")
        return None if stats is None else GlobalCmvn.from_dict(stats, f"{self.path / SETTINGS_FILE}: global_cmvn")

    @property
    def framed(self) -> bool:
        """The graph reads log-mel frames ``[B, S, n_mels]`` (else waveforms ``[B, S]``)."""
        return bool(self.feature["framed"])

    @property
    def feature_size(self) -> int:
        """Width of one input unit of a framed graph (``n_mels``, or ``2 n_mels`` for stacked frames)."""
        return int(self.feature.get("feature_size", self.feature["n_mels"]))

    @property
    def front_end(self) -> FrontEnd:
        """The numpy front end of the folder's feature type (:data:`~.features.FRONT_ENDS`)."""
        return FRONT_ENDS[self.feature["type"]]

    @property
    def runtime_normalizes(self) -> bool:
        """The runtime normalises the graph's input (the feature type normalises and the graph does not: w2v-BERT's
        stacked filterbank, normalised per mel bin before stacking)."""
        return bool(self.feature["do_normalize"]) and not self.settings["graph"].get("normalizes_input", True)

    @property
    def sampling_rate(self) -> int:
        return int(self.feature["sampling_rate"])

    @property
    def seconds_per_frame(self) -> float:
        return float(self.feature["samples_per_frame"]) / self.sampling_rate

    @property
    def geometry(self) -> FrameGeometry | None:
        """The graph's frame geometry (input units, output frames), or None for a folder exported before
        ``first_frame_units`` was written (its recordings are then read whole)."""
        first = self.feature.get("first_frame_units")
        if first is None:
            return None
        if "unit_window" in self.feature:
            window, hop = int(self.feature["unit_window"]), int(self.feature["unit_hop"])
        elif self.framed:
            window, hop, _ = frame_params(self.sampling_rate)
        else:
            window, hop = 1, 1
        samples = int(self.feature["samples_per_frame"])
        per_frame = samples // hop

        def output_frames(units: int) -> int:
            return 0 if units < first else (units - first) // per_frame + 1

        return FrameGeometry(samples, hop, window, output_frames, self.sampling_rate)

    @property
    def max_frames(self) -> int | None:
        """The longest output the graph covers (the conformers' position table), or None: any length."""
        value = self.settings.get("max_frames")
        return None if value is None else int(value)

    def graph(self, precision: str | None = None) -> Path:
        """The graph file of ``precision`` (``fp32`` / ``int8``; None: int8 when exported, else fp32).

        Raises:
            ExportFolderError: that precision was not exported (naming the ones that were).
        """
        graphs = self.settings["graphs"]
        if precision is None:
            precision = "int8" if "int8" in graphs else "fp32"
        if precision not in graphs:
            raise ExportFolderError(f"{self.path}: no {precision} graph exported; it holds {sorted(graphs)}")
        return self.path / graphs[precision]


def read_export(path: str | os.PathLike) -> ExportedModel:
    """Read and check an exported folder (the graph's output size is checked when a session loads it:
    :func:`check_vocabulary`).

    Raises:
        ExportFolderError: no settings file, an unreadable one, another format version, a missing graph or
            ``tokens.txt``, or tokens that disagree with the settings.
    """
    folder = Path(path)
    settings_file = folder / SETTINGS_FILE
    if not settings_file.is_file():
        raise ExportFolderError(f"{folder}: no {SETTINGS_FILE} there (pass a folder written by `adaptspeech export`)")
    try:
        settings = json.loads(settings_file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ExportFolderError(f"{settings_file}: unreadable ({err})") from None
    if settings.get("format_version") != FORMAT_VERSION:
        raise ExportFolderError(f"{settings_file}: format_version {settings.get('format_version')!r}; this "
                                f"adaptspeech reads {FORMAT_VERSION}")
    for precision, name in settings.get("graphs", {}).items():
        if not (folder / name).is_file():
            raise ExportFolderError(f"{folder}: the {precision} graph {name} is missing")
    feature_type = settings.get("feature", {}).get("type")
    if feature_type not in FRONT_ENDS:
        raise ExportFolderError(f"{settings_file}: feature type {feature_type!r}; this runtime computes "
                                f"{', '.join(FRONT_ENDS)}")
    tokens_file = folder / TOKENS_FILE
    if not tokens_file.is_file():
        raise ExportFolderError(f"{folder}: {TOKENS_FILE} is missing")
    try:
        symbols = read_symbols(tokens_file)
        tok = settings["tokenizer"]
        table = table_from_symbols(symbols, tok["blank_id"], tok["word_delimiter"], tok["skip_tokens"],
                                   clean_up_tokenization_spaces=tok["clean_up_tokenization_spaces"],
                                   do_lower_case=tok["do_lower_case"], unk_token=tok["unk_token"])
    except (KeyError, ValueError) as err:
        raise ExportFolderError(f"{tokens_file}: {err}") from None
    if len(table) != settings.get("vocab_size"):
        raise ExportFolderError(f"{tokens_file} holds {len(table)} tokens, {SETTINGS_FILE} says vocab_size "
                                f"{settings.get('vocab_size')}")
    return ExportedModel(folder, settings, table)


def check_vocabulary(model: ExportedModel, graph: Path, output_size: Any, input_shape: list[Any]) -> None:
    """Refuse a graph whose logits are not ``len(tokens)`` wide, or whose input rank disagrees with the feature
    settings (``output_size`` / ``input_shape``: the session's declared ``logits`` last dimension and ``x`` shape).

    Raises:
        ExportFolderError: naming the graph, the sizes and the file they come from.
    """
    if isinstance(output_size, int) and output_size != len(model.table):
        raise ExportFolderError(f"{graph}: the graph outputs {output_size} labels but {TOKENS_FILE} holds "
                                f"{len(model.table)} tokens: tokens.txt belongs to another export")
    rank = 3 if model.framed else 2
    if len(input_shape) != rank:
        raise ExportFolderError(f"{graph}: the graph reads input of rank {len(input_shape)} but {SETTINGS_FILE} says "
                                f"feature type {model.feature['type']!r} (rank {rank})")
    if model.framed and isinstance(input_shape[2], int) and input_shape[2] != model.feature_size:
        raise ExportFolderError(f"{graph}: the graph reads {input_shape[2]} features a unit but {SETTINGS_FILE} says "
                                f"{model.feature_size} (n_mels {model.feature['n_mels']})")
