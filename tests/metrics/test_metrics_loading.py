"""The shipped WER / CER modules load by path with the Hub switched off and no network at all."""

from __future__ import annotations

import socket
from pathlib import Path, PurePosixPath

import evaluate
import huggingface_hub.constants
import pytest
from helpers.paths import REPO

import adaptspeech.metrics as metrics
from adaptspeech.metrics import METRIC_NAMES, load_metric, metric_path


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Offline environment, and every socket connection refused and recorded."""
    for variable in ("HF_HUB_OFFLINE", "HF_EVALUATE_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.setenv(variable, "1")
    # these libraries read the variables once, at import time
    monkeypatch.setattr(evaluate.config, "HF_EVALUATE_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    attempts: list[str] = []

    def refuse(*args: object, **kwargs: object) -> None:
        attempts.append(repr(args))
        raise OSError(f"network access attempted in an offline test: {args!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    return attempts


def test_offline_load_and_compute(no_network: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(OSError, match="network access attempted"):
        socket.create_connection(("huggingface.co", 443))
    no_network.clear()
    monkeypatch.setattr(metrics, "_LOADED", {})  # force a fresh evaluate.load

    wer = load_metric("wer")
    cer = evaluate.load(str(metric_path("cer")))
    assert isinstance(wer, evaluate.EvaluationModule) and isinstance(cer, evaluate.EvaluationModule)
    assert wer.compute(predictions=["ana are pere"], references=["ana are mere"]) == pytest.approx(1 / 3)
    assert cer.compute(predictions=["ana are pere"], references=["ana are mere"]) == pytest.approx(1 / 12)
    assert no_network == []


@pytest.mark.parametrize("name", METRIC_NAMES)
def test_module_identity_and_cache(name: str) -> None:
    module = load_metric(name)
    assert module is load_metric(name)
    assert module.name == name
    assert type(module).__name__ == name.upper()
    assert set(module.features) == {"predictions", "references"}
    assert "empty or whitespace-only reference is kept" in " ".join(module.description.split())
    assert metric_path(name) == Path(metrics.__file__).resolve().parent / name
    assert (metric_path(name) / f"{name}.py").is_file()


@pytest.mark.parametrize("name", ["bleu", "WER", "", "wer/wer.py"])
def test_unknown_metric_is_refused_with_allowed_values(name: str) -> None:
    with pytest.raises(ValueError, match=r"unknown metric .*; allowed values: cer, wer"):
        load_metric(name)
    with pytest.raises(ValueError, match="allowed values: cer, wer"):
        metric_path(name)


def test_module_files_are_package_data() -> None:
    pyproject = REPO / "pyproject.toml"
    if not pyproject.is_file():
        pytest.skip("not running from a source checkout")
    tomllib = pytest.importorskip("tomllib")
    globs = tomllib.loads(pyproject.read_text())["tool"]["setuptools"]["package-data"]["adaptspeech"]
    for name in METRIC_NAMES:
        relative = PurePosixPath("metrics", name, f"{name}.py")
        assert any(relative.match(glob) for glob in globs), (relative, globs)
