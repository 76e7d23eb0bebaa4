"""The figures of a recipe run: the fusion heatmap (and the sums it averages) and the training curves."""

import struct

import numpy as np

from adaptspeech.recipes.plots import plot_fusion_heatmap, plot_training_curves


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_heatmap_adds_a_source_only_panel_when_the_target_is_named(tmp_path):
    weights = np.array([[0.1, 0.2, 0.7], [0.3, 0.1, 0.6]])
    one = png_size(plot_fusion_heatmap(weights, ["cs", "pl", "sk"], tmp_path / "one.png"))
    two = png_size(plot_fusion_heatmap(weights, ["cs", "pl", "sk"], tmp_path / "two.png", target="sk"))
    assert two[0] > 1.8 * one[0] and two[1] == one[1]


def test_training_curves_plot_every_run(tmp_path):
    histories = {"base": [{"step": i, "loss": 5 / i} for i in range(1, 20)] + [{"step": 19, "eval_cer": 0.3}],
                 "fusion": [{"step": 1, "loss": 1.0}, {"step": 2, "loss": 0.9}]}
    width, height = png_size(plot_training_curves(histories, tmp_path / "c.png"))
    assert width > height > 100


def test_fusion_weights_in_bfloat16_reach_numpy_and_the_heatmap(tmp_path):
    """Under bf16 autocast (or on a GPU) the fusion weights are tensors numpy cannot read directly: the sums and the
    plot move them to the CPU in float32 first."""
    import torch

    from adaptspeech.recipes.plots import fusion_weight_sums, to_numpy

    probs = torch.tensor([[[0.25, 0.75], [0.5, 0.5], [0.9, 0.1]]], dtype=torch.bfloat16)  # [B=1, T=3, N=2]
    with np.testing.assert_raises(TypeError):
        probs.numpy()  # what the old code did
    mask = torch.tensor([[True, True, False]])  # the third frame is padding
    sums = fusion_weight_sums([probs, probs.flip(-1)], mask)
    assert sums.dtype == np.float64 and sums.shape == (2, 2)
    np.testing.assert_allclose(sums, [[0.75, 1.25], [1.25, 0.75]])
    mean = torch.tensor(sums / 2, dtype=torch.bfloat16)
    np.testing.assert_allclose(to_numpy(mean), sums / 2)
    assert png_size(plot_fusion_heatmap(mean, ["cs", "sk"], tmp_path / "bf16.png", target="sk"))[0] > 100
