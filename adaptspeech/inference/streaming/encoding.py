"""The encoder as a stream: ``model.encode_chunk(inputs, cache) -> (hidden_states, cache)``.

Input arrives in pieces of any length (filterbank frames ``[B, n, F]`` for the fbank Conformer, samples ``[B, n]`` for
the wav2vec2-conformer). The front end (:meth:`~adaptspeech.backbones.base.BackboneSpec.stream_front_end`) turns them
into encoder-input frames as soon as its convolutions' windows are complete; the encoder runs on whole chunks of
``chunk_size`` frames (the rest waits for the next call, or for ``final=True``, which flushes the front end's right
padding and the last partial chunk). Each chunk runs the encoder layers' ordinary ``forward`` inside
:func:`~adaptspeech.stream_state.streaming`: the swapped attention continues from its cached keys / values
(:meth:`~adaptspeech.attention.base.EncoderAttention.forward_chunk`, the last ``num_left_chunks`` chunks), the causal
depthwise convolution from its last ``k - 1`` input frames, the dynamic chunk convolution from its last ``(k - 1) / 2``
(:mod:`adaptspeech.backbones.causal_conv`); the feed-forward
blocks, layer norms, language adapters and the SimAdapter fusion work frame by frame and run unchanged, through the
same hooks as in a whole-utterance forward. Chunk by chunk thus equals the whole-utterance forward under the same chunk
mask (``with chunk_attention(chunk_size, num_left_chunks): model(...)``; tested to 1e-5).

A stream keeps its own routing: the per-utterance languages (``lang_ids``) and the
:class:`~adaptspeech.adapters.routing.RoutingOverride` of the block it was started in (or given to
:meth:`~StreamingMixin.start_stream`) travel in its :class:`EncoderStream` and route every chunk, so interleaved
streams routed to different languages, in one thread or several, never change one another or the model's settings.

The cache's size is bounded when ``num_left_chunks >= 0``: per layer ``num_left_chunks * chunk_size`` keys and values
and ``k - 1`` (causal) or ``(k - 1) / 2`` (dynamic chunk) convolution frames, plus the front end's remainder and the
frames of an incomplete chunk.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import torch

from ...adapters.routing import RoutingOverride, current_override, routing_call
from ...attention.chunking import chunk_attention, streaming_kinds
from ...backbones.causal_conv import conv_stream_refusal
from ...backbones.stream_front_end import StreamFrontEnd
from ...stream_state import StreamState, streaming

#: the warning for a model trained without chunk masks (its attention never saw a chunk boundary in training)
UNCHUNKED_WARNING = (
    "this model was trained without chunk masks (attention.dynamic_chunks / attention.chunk_size unset): streaming it "
    "decodes with chunk masks it never saw in training, so expect more than the +0.2-0.6% (masked) / +2-7% (end to "
    "end) relative CER a dynamic-chunk model loses at 640-160 ms chunks (docs/streaming.md); train with "
    "attention.dynamic_chunks: true"
)


@dataclass
class EncoderStream:
    """What one stream carries between :meth:`StreamingMixin.encode_chunk` calls.

    Attributes:
        chunk_size: encoder frames per chunk; num_left_chunks: previous chunks each chunk sees (-1: all).
        front_end: the front end's buffers. state: the attention and convolution caches of every layer.
        pending: encoder-input frames ``[B, n, D]`` waiting for a whole chunk (None: none).
        row_languages: the language of each utterance for the adapters (None: the model's active languages).
        override: the stream's routing (None: the model's settings).
        frames_out: encoder frames emitted so far. finished: True after ``final=True``.
    """

    chunk_size: int
    num_left_chunks: int
    front_end: StreamFrontEnd
    state: StreamState = field(default_factory=StreamState)
    pending: torch.Tensor | None = None
    row_languages: tuple[str, ...] | None = None
    override: RoutingOverride | None = None
    frames_out: int = 0
    finished: bool = False

    def cached_elements(self) -> int:
        """Elements held by the attention and convolution caches (to check that the state stays bounded)."""
        total = 0
        for cache in self.state.values():
            tensors = cache if isinstance(cache, tuple) else (cache,)
            total += sum(t.numel() for t in tensors)
        return total


class StreamingMixin:
    """Mixed into :class:`~adaptspeech.modeling.AdaptSpeechPreTrainedModel`: the encoder chunk by chunk."""

    def streaming_refusal(self) -> str | None:
        """Why this model cannot stream (naming the setting that would let it), or None when it can."""
        config = self.config
        attention = config.attention
        kinds = ", ".join(streaming_kinds())
        if attention.is_default or attention.kind not in streaming_kinds():
            return (
                f"attention.kind={attention.kind!r} cannot stream (the encoder attention must continue from a cache of "
                f"previous chunks); kinds that can: {kinds}"
            )
        layers = self._encoder_layers()
        missing = sorted(set(range(len(layers))) - set(self.swapped_attention_layers))
        if missing:
            return (
                f"attention.layers leaves layers {missing} with the backbone's own attention, which cannot stream; set "
                "attention.layers: null (every layer)"
            )
        setting = getattr(config.backbone_config, "conv_lookahead", None)
        for index, layer in enumerate(layers):
            conv = getattr(getattr(layer, "conv_module", None), "depthwise_conv", None)
            refusal = None if conv is None else conv_stream_refusal(conv, setting)
            if refusal is not None:
                return f"layer {index}'s depthwise convolution {refusal}"
        try:
            config.backbone_spec.stream_front_end(self.backbone)
        except ValueError as error:
            return str(error)
        return None

    def frame_milliseconds(self) -> float:
        """Milliseconds of audio per encoder frame (40 for the fbank Conformer, 20 for wav2vec2)."""
        return self.config.inputs_to_logits_ratio / 16.0

    def check_stream_chunks(self, chunk_size: int, warn: bool = True) -> None:
        """Refuse a model that cannot stream or a chunk larger than the model's maximum; warn (unless ``warn`` is
        False) when the model was trained without chunks."""
        refusal = self.streaming_refusal()
        if refusal is not None:
            raise ValueError(f"this model cannot stream: {refusal}")
        attention = self.config.attention
        if not isinstance(chunk_size, int) or chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive number of encoder frames, got {chunk_size!r}")
        limit = attention.max_chunk_size if attention.dynamic_chunks else attention.chunk_size
        if limit and chunk_size > limit:
            ms = self.frame_milliseconds()
            setting = "attention.max_chunk_size" if attention.dynamic_chunks else "attention.chunk_size"
            raise ValueError(
                f"a chunk of {chunk_size} frames ({chunk_size * ms:.0f} ms) is larger than the model's maximum, "
                f"{setting}={limit} ({limit * ms:.0f} ms)"
            )
        if warn and not attention.dynamic_chunks and not attention.chunk_size:
            warnings.warn(UNCHUNKED_WARNING, UserWarning, stacklevel=3)

    def start_stream(
        self,
        chunk_size: int,
        num_left_chunks: int = -1,
        row_languages: tuple[str, ...] | None = None,
        warn: bool = True,
        override: RoutingOverride | None = None,
    ) -> EncoderStream:
        """A new :class:`EncoderStream` (checked by :meth:`check_stream_chunks`) routed by ``override`` (None: the
        override of the enclosing routing call, if any, else the model's settings) for its whole life."""
        self.check_stream_chunks(chunk_size, warn)
        if num_left_chunks < -1:
            raise ValueError(f"num_left_chunks must be -1 (all) or >= 0, got {num_left_chunks}")
        front_end = self.config.backbone_spec.stream_front_end(self.backbone)
        return EncoderStream(chunk_size, num_left_chunks, front_end, row_languages=row_languages,
                             override=current_override() if override is None else override)

    @torch.no_grad()
    def encode_chunk(
        self,
        inputs: torch.Tensor,
        cache: EncoderStream | None = None,
        final: bool = False,
        chunk_size: int = 16,
        num_left_chunks: int = -1,
        lang_ids: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, EncoderStream]:
        """Encode the next piece of a stream.

        Args:
            inputs: the next input frames: filterbanks ``[B, n, F]`` or samples ``[B, n]`` (``n`` any, 0 included).
            cache: the stream's state from the previous call, or None to start one (with ``chunk_size``,
                ``num_left_chunks`` and ``lang_ids``, read only then).
            final: the end of the stream: flush the front end and encode the last, partial chunk.
            chunk_size: encoder frames per chunk (16 frames of 40 ms = 640 ms).
            num_left_chunks: previous chunks each chunk attends to (-1: all; bounded memory needs >= 0).
            lang_ids: ``[B]`` language index per utterance, for the adapters.

        Returns:
            ``(hidden_states [B, m, D], cache)``: the encoder output of the ``m`` frames completed by this call (a
            multiple of ``chunk_size`` unless ``final``).
        """
        if self.training:
            raise ValueError("encode_chunk runs in evaluation mode: call model.eval() first")
        if cache is None:
            cache = self.start_stream(chunk_size, num_left_chunks, self.row_languages(lang_ids))
        if cache.finished:
            raise ValueError("this stream was finalised (final=True); start a new one with cache=None")
        front_in = inputs.transpose(1, 2) if inputs.dim() == 3 else inputs[:, None]  # time last
        parts = [cache.pending]
        if front_in.shape[-1]:
            parts.append(cache.front_end.push(front_in))
        if final:
            parts.append(cache.front_end.flush())
            cache.finished = True
        present = [part for part in parts if part is not None]
        pending = torch.cat(present, dim=1) if present else None
        outputs = []
        if pending is not None:
            size = cache.chunk_size
            ready = pending.shape[1] if final else pending.shape[1] // size * size
            for start in range(0, ready, size):
                outputs.append(self._encode_stream_chunk(pending[:, start : start + size], cache))
            cache.pending = pending[:, ready:] if ready < pending.shape[1] else None
        if outputs:
            hidden = torch.cat(outputs, dim=1)
        else:
            batch = inputs.shape[0]
            hidden = inputs.new_zeros(batch, 0, self.config.hidden_size)
        cache.frames_out += hidden.shape[1]
        return hidden, cache

    def _encode_stream_chunk(self, frames: torch.Tensor, cache: EncoderStream) -> torch.Tensor:
        """One chunk ``[B, C, D]`` of encoder-input frames through the layers and the final norm -> ``[B, C, D]``."""
        layers, final_norm = self.config.backbone_spec.stream_encoder(self.backbone)
        hidden = frames
        with (
            streaming(cache.state),
            chunk_attention(cache.chunk_size, cache.num_left_chunks),
            routing_call(cache.row_languages, override=cache.override),
        ):
            for layer in layers:
                hidden = _layer_output(layer(hidden, attention_mask=None, relative_position_embeddings=None))
        return final_norm(hidden)


def _layer_output(output: Any) -> torch.Tensor:
    """A transformers encoder layer returns its hidden states, or a tuple starting with them."""
    return output[0] if isinstance(output, tuple) else output
