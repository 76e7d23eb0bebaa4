"""scripts/lid_compute_share.py at toy size: the head's FLOPs are the matrix products of its scorer and classifier
counted by hand, the LID pass stops at the pooled layer, the table and the target line are printed."""

from __future__ import annotations

import json
import sys

import torch
from helpers.paths import REPO

sys.path.insert(0, str(REPO / "scripts"))

import lid_compute_share


def test_the_head_flops_are_its_matrix_products(capsys, tmp_path) -> None:
    torch.set_num_threads(1)
    assert lid_compute_share.main(["--tiny", "--threads", "1", "--json", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    assert "| tiny | 1 s | 0 of 0..1 |" in out and "target: the head adds < 1% to the encoder's FLOPs:" in out
    (row,) = json.loads((tmp_path / "r.json").read_text())
    model = lid_compute_share.build("tiny", 0)
    frames = int(model._get_feat_extract_output_lengths(100))  # 1 s of fbank frames
    hidden, attention, languages = 32, 64, 6
    expected = 2 * frames * hidden * attention + 2 * frames * attention + 2 * (2 * hidden) * languages
    assert row["flops"]["head"] == expected
    assert row["lid_parameters"] == hidden * attention + attention + attention + 1 + 2 * hidden * languages + languages
    # the LID pass runs the front end and layer 0 of 2, without adapters: less than the routed encoder pass
    assert row["flops"]["head"] < row["flops"]["LID pass"] < row["flops"]["encoder"]


def test_routing_from_the_shared_prefix_leaves_out_the_front_end_s_flops(tmp_path) -> None:
    torch.set_num_threads(1)
    assert lid_compute_share.main(["--tiny", "--threads", "1", "--json", str(tmp_path / "r.json")]) == 0
    (row,) = json.loads((tmp_path / "r.json").read_text())
    assert row["prefix_start"] == 0  # adapters on every layer: the front end is what both passes share
    mel, hidden, kernel = 16, 32, 3
    frames = [50, 25]  # 100 fbank frames after each stride-2 convolution
    front_end = 2 * frames[0] * mel * hidden * kernel + 2 * frames[1] * hidden * hidden * kernel \
        + 2 * frames[1] * hidden * hidden  # conv1, conv2, projection
    flops = row["flops"]
    assert flops["encoder"] - flops["encoder from prefix"] == front_end
    assert flops["LID pass + prefix"] == flops["LID pass"]
    extra = row["routing_extra_flops"]
    assert extra["before"] == flops["LID pass"] / flops["encoder"]
    assert extra["after"] == (flops["LID pass"] - front_end) / flops["encoder"] < extra["before"]


def test_the_cost_of_k_candidates_is_stated_for_acoustic_and_hybrid_scoring(capsys, tmp_path) -> None:
    torch.set_num_threads(1)
    assert lid_compute_share.main(["--tiny", "--threads", "1", "--top-k", "1", "2", "--layer-mix", "--json",
                                   str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    assert "| tiny | 1 s | layers 0..0 (mix) | hybrid k=2 |" in out
    (row,) = json.loads((tmp_path / "r.json").read_text())
    flops = row["flops"]
    assert flops["candidate pass"] == flops["encoder from prefix"]  # the greedy path and CTC score: no products
    lid, step, encoder = flops["LID pass + prefix"], flops["encoder from prefix"], flops["encoder"]
    costs = row["top_k"]
    assert set(costs) == {"acoustic k=1", "acoustic k=2", "hybrid k=2"}
    assert costs["acoustic k=1"]["flops"] == row["routing_extra_flops"]["after"] == (lid + step - encoder) / encoder
    assert costs["acoustic k=2"]["flops"] == (lid + 4 * step - encoder) / encoder
    assert costs["hybrid k=2"]["flops"] == (lid + 3 * step - encoder) / encoder  # k candidates + the decoding
