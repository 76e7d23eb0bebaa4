"""``adaptspeech train`` under DDP: two CPU processes (gloo) through the same entry point, launched by torchrun and by
``accelerate launch`` with ``configs/accelerate/cpu_ddp_2proc.yaml`` (the fbank Conformer, and w2v-BERT 2.0 on its
stacked filterbank)."""

from __future__ import annotations

import json
import math
import socket
import sys
from pathlib import Path

import pytest
import torch
from helpers.cli import cli, load_prepared_split, mean_loss, run_command, stage_spec, write_yaml
from helpers.paths import REPO
from safetensors.torch import load_file
from transformers import set_seed

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.testing import TINY_BACKBONES
from adaptspeech.training.model_setup import build_model

pytestmark = pytest.mark.slow

BN_STATISTICS = ("running_mean", "running_var", "num_batches_tracked")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _check_replicas(folder: Path, model: AdaptSpeechForCTC) -> None:
    """Both ranks wrote their final state; every parameter is bit-identical across ranks and equal to the saved
    model. Buffers may differ only in BatchNorm statistics: DDP broadcasts rank 0's buffers at the start of every
    forward, and the last step updates each rank's own (rank 0's are the ones saved)."""
    rank0, rank1 = (load_file(folder / f"rank{r}.safetensors") for r in (0, 1))
    params = dict(model.named_parameters())
    assert set(params) <= set(rank0) and set(rank0) == set(rank1)
    for name, param in params.items():
        assert torch.equal(rank0[name], rank1[name]), f"{name} differs between the ranks"
        assert torch.equal(rank0[name], param.detach()), f"{name}: rank 0 is not what was saved"
    differing = [k for k in rank0 if k not in params and not torch.equal(rank0[k], rank1[k])]
    assert all(k.rsplit(".", 1)[-1] in BN_STATISTICS for k in differing), differing


def _initial_model(spec: dict, processor) -> AdaptSpeechForCTC:
    """The model run_stage starts from: same seed, same construction."""
    set_seed(spec["seed"])
    return build_model(spec["model"], processor)


def test_torchrun_two_processes_agree_and_the_loss_goes_down(prepared_corpus, tmp_path):
    spec = stage_spec(prepared_corpus, tmp_path / "run", max_steps=10)
    config = write_yaml(tmp_path / "stage.yaml", spec)
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    train = cli("train", "--config", str(config), "--no-progress", "--rank-weights", str(tmp_path / "r"))
    done = run_command([*launcher, *train[1:]], cwd=tmp_path)  # torchrun ... -m adaptspeech.cli train ...
    assert "stage tiny: 10 steps" in done.stdout  # printed once, by rank 0

    model = AdaptSpeechForCTC.from_pretrained(tmp_path / "run" / "model")
    _check_replicas(tmp_path / "r", model)

    summary = json.loads((tmp_path / "run" / "stage_summary.json").read_text())
    history = json.loads((tmp_path / "run" / "log_history.json").read_text())
    assert summary["global_step"] == 10
    # the data were sharded over 2 processes: one step consumes 2 x 4 utterances
    steps_per_epoch = math.ceil(summary["train_rows"] / (2 * 4))
    assert history[0]["step"] == 1 and history[0]["epoch"] == pytest.approx(1 / steps_per_epoch, rel=1e-3)

    rows, processor = load_prepared_split(prepared_corpus)
    initial = _initial_model(spec, processor)
    before, after = mean_loss(initial, rows, processor), mean_loss(model, rows, processor)
    assert after < 0.9 * before, (before, after)


#: the prepared corpus fixture of each backbone the accelerate test runs
CORPORA = {"fbank_conformer": "prepared_corpus", "wav2vec2_bert": "prepared_w2v_bert_corpus"}


@pytest.mark.parametrize("backbone", list(CORPORA))
def test_accelerate_launch_with_layerdrop_routed_adapters_and_checkpointing(backbone, request, tmp_path):
    """LayerDrop and per-utterance routing over three adapters leave parameters unused, and activation checkpointing
    makes transformers switch ``find_unused_parameters`` off: plain DDP fails with "Expected to have finished
    reduction"; ``run_stage`` turns it back on, so the run completes with agreeing replicas and a frozen backbone
    (the fbank Conformer, and a tiny w2v-BERT on the corpus prepared as stacked filterbanks)."""
    prepared_corpus = request.getfixturevalue(CORPORA[backbone])
    spec = stage_spec(prepared_corpus, tmp_path / "run", max_steps=8, per_device_train_batch_size=2,
                      activation_checkpointing=True)
    if backbone != "fbank_conformer":
        spec["model"]["config"] = {"backbone_type": backbone, "backbone_config": dict(TINY_BACKBONES[backbone])}
    spec["model"]["config"]["backbone_config"]["layerdrop"] = 0.5
    spec["model"].update(
        add_adapters={lang: {"bottleneck": 8} for lang in ("ro", "cs", "pl")},
        active_languages=["ro", "cs", "pl"],
        trainable={"adapters": ["ro", "cs", "pl"], "head": True},
    )
    config = write_yaml(tmp_path / "stage.yaml", spec)
    launcher = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
                str(REPO / "configs" / "accelerate" / "cpu_ddp_2proc.yaml"), "--main_process_port", str(_free_port())]
    run_command([*launcher, *cli("train", "--config", str(config), "--no-progress", "--rank-weights",
                                 str(tmp_path / "r"))[1:]], cwd=tmp_path)

    model = AdaptSpeechForCTC.from_pretrained(tmp_path / "run" / "model")
    _check_replicas(tmp_path / "r", model)
    assert json.loads((tmp_path / "run" / "stage_summary.json").read_text())["global_step"] == 8

    _, processor = load_prepared_split(prepared_corpus)
    initial = dict(_initial_model(spec, processor).named_parameters())
    groups = model._named_groups()
    for name, param in groups["backbone"]:
        assert torch.equal(param, initial[name]), f"frozen {name} changed"
    for lang in ("ro", "cs", "pl"):
        assert any(not torch.equal(p, initial[n]) for n, p in groups[f"adapter:{lang}"]), f"adapter {lang} untrained"
