"""Causal (or limited look-ahead) depthwise convolution in the conformer convolution module, for streaming.

transformers' ``Wav2Vec2ConformerConvolutionModule`` pads its depthwise convolution symmetrically ("same" padding,
``(k-1)/2`` frames on each side), so every frame looks ``(k-1)/2`` frames into the future of every layer: a chunked
encoder would wait for them at every layer. The setting ``backbone_config.conv_lookahead`` (the fbank Conformer and the
wav2vec2-conformer backbones) pads ``k - 1 - r`` frames on the left and ``r`` on the right instead: ``0`` is a causal
convolution (WeNet's ``causal: true``, ``lorder = k - 1``), ``r`` in ``1 .. (k-1)/2`` a limited look-ahead, ``None``
(the default) transformers' symmetric convolution. The kernel and its weights are unchanged (the state dict keeps its
keys and shapes), so a pretrained or symmetric model can be made causal and fine-tuned.

Streamed (:mod:`adaptspeech.stream_state`), a causal convolution continues from the last ``k - 1`` input frames of the
previous chunk instead of zeros, so chunk-by-chunk encoding equals the whole-sequence forward; a look-ahead ``r > 0``
would need the next chunk's frames and is refused for streaming.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from ..stream_state import current_stream


class ShiftedDepthwiseConv1d(nn.Conv1d):
    """A depthwise ``nn.Conv1d`` (``[B, D, T] -> [B, D, T]``) padded ``left`` frames before and ``right`` after."""

    def __init__(self, channels: int, kernel_size: int, lookahead: int, bias: bool = False) -> None:
        super().__init__(channels, channels, kernel_size, padding=0, groups=channels, bias=bias)
        self.left = kernel_size - 1 - lookahead
        self.right = lookahead

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        """``[B, D, T] -> [B, D, T]``; inside a stream the left padding is the previous chunk's last frames."""
        state = current_stream()
        if state is None:
            return super().forward(F.pad(hidden_states, (self.left, self.right)))
        if self.right:
            raise ValueError(
                f"backbone_config.conv_lookahead={self.right} looks into the next chunk: streaming needs a causal "
                "convolution (conv_lookahead: 0)"
            )
        past = state.get(self)
        if past is None:
            past = hidden_states.new_zeros(*hidden_states.shape[:2], self.left)
        extended = torch.cat([past, hidden_states], dim=-1)  # [B, D, k - 1 + C]
        state.put(self, extended[..., extended.shape[-1] - self.left :])
        return super().forward(extended)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, left={self.left}, right={self.right}"


def check_conv_lookahead(lookahead: object, kernel_size: int) -> None:
    """ValueError naming ``backbone_config.conv_lookahead`` unless it is None or an int in ``0 .. (k-1)/2``."""
    if lookahead is None:
        return
    if isinstance(lookahead, bool) or not isinstance(lookahead, int) or not 0 <= lookahead <= (kernel_size - 1) // 2:
        raise ValueError(
            f"backbone_config.conv_lookahead must be null (symmetric), 0 (causal) or a look-ahead of 1 .. "
            f"{(kernel_size - 1) // 2} frames (conv_depthwise_kernel_size={kernel_size}), got {lookahead!r}"
        )


def set_conv_lookahead(encoder_layers: nn.ModuleList, lookahead: int | None) -> int:
    """Give the depthwise convolution of every conformer layer ``lookahead`` frames of right context (0: causal);
    returns how many layers changed. ``None`` leaves transformers' symmetric convolution; layers without a
    ``conv_module`` (wav2vec2's) refuse any other value."""
    if lookahead is None:
        return 0
    convs = [getattr(layer, "conv_module", None) for layer in encoder_layers]
    if not convs or any(conv is None for conv in convs):
        raise ValueError(
            "backbone_config.conv_lookahead applies to conformer backbones (fbank_conformer, wav2vec2_conformer): "
            "these encoder layers have no convolution module"
        )
    for conv in convs:
        old = conv.depthwise_conv
        kernel = old.kernel_size[0]
        check_conv_lookahead(lookahead, kernel)
        new = ShiftedDepthwiseConv1d(old.in_channels, kernel, lookahead, bias=old.bias is not None)
        new.to(device=old.weight.device, dtype=old.weight.dtype)
        with torch.no_grad():
            new.weight.copy_(old.weight)
            if old.bias is not None:
                new.bias.copy_(old.bias)
        conv.depthwise_conv = new
    return len(convs)
