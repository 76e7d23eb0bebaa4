"""The language-ID head on an adaptspeech model: building it from ``config.lid_languages``, adding / removing it,
and computing its logits on the encoder **without adapters** (the shared, frozen encoder every language's adapter
sits on; the language is what is being found out)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from ..adapters.routing import NO_ADAPTERS, routing_call
from .encoder_prefix import EncoderPrefix, call_scoped_hooks, capturing_prefix, reusing_prefix, shared_start
from .lid import LIDConfig, LIDHead


class LanguageIDMixin:
    """Adds ``lid_head`` (None without ``config.lid_languages``) and :meth:`lid_logits` to an adaptspeech model."""

    lid_head: LIDHead | None

    def _build_lid_head(self) -> None:
        config = self.config
        self.lid_head = None
        if config.lid_languages:
            self.lid_head = LIDHead(config.hidden_size, list(config.lid_languages), config.lid,
                                    num_layers=config.num_encoder_layers)

    def add_lid_head(self, languages: list[str], **settings: Any) -> LIDHead:
        """A new (untrained) language-ID head over ``languages`` with ``settings`` (``pooling``, ``layer``, the
        pooling's options; :class:`~adaptspeech.heads.lid.LIDConfig`), recorded in the config.

        Raises:
            ValueError: the model already has one, or a setting is refused (the model is left unchanged).
        """
        if self.lid_head is not None:
            raise ValueError(f"the model already has a language-ID head over {self.config.lid_languages}; "
                             "remove_lid_head first")
        lid = LIDConfig.from_dict(dict(settings))
        checked = self.config._check_lid_languages(list(languages))
        lid.resolved_layer(self.config.num_encoder_layers)
        self.config.lid_languages, self.config.lid = checked, lid
        self._build_lid_head()
        self._place([self.lid_head])
        return self.lid_head

    def remove_lid_head(self) -> None:
        """Drop the language-ID head (and its settings from the config)."""
        self.lid_head = None
        self.config.lid_languages = None
        self.config.lid = None

    @contextlib.contextmanager
    def without_adapters(self) -> Iterator[None]:
        """Run the encoder with no adapter and no fusion inside the block: a routing override for the calls of this
        thread / context only (the model's settings are never written; other threads are not affected)."""
        with routing_call(override=NO_ADAPTERS):
            yield

    def lid_logits(self, inputs: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Language-ID logits.

        Args:
            inputs: waveforms [B, S] or filterbanks [B, S, F].
            attention_mask: [B, S], True on real samples / feature frames.

        Returns:
            ``[B, L]`` float32, over ``config.lid_languages``.

        Raises:
            ValueError: the model has no language-ID head; an utterance too short for the pooled statistics
                (:class:`~adaptspeech.heads.lid.UtteranceTooShortError`).
        """
        return self._lid_pass(inputs, attention_mask, keep_prefix=False)[0]

    def lid_logits_with_prefix(
        self, inputs: torch.Tensor, attention_mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, EncoderPrefix]:
        """:meth:`lid_logits` and what its pass computed before the first adapter layer: a recognition pass over the
        same batch inside :meth:`reusing_encoder_prefix` starts from it (:mod:`adaptspeech.heads.encoder_prefix`).

        Returns:
            ``(logits [B, L], prefix)``.
        """
        logits, prefix = self._lid_pass(inputs, attention_mask, keep_prefix=True)
        assert prefix is not None
        return logits, prefix

    def reusing_encoder_prefix(self, prefix: EncoderPrefix | None) -> contextlib.AbstractContextManager[None]:
        """Inside the block an encoder pass over ``prefix``'s batch (equal inputs and mask) starts from ``prefix``
        instead of computing the front end and the layers below the first adapter again (None: no effect)."""
        return reusing_prefix(prefix)

    def _lid_pass(
        self, inputs: torch.Tensor, attention_mask: torch.Tensor | None, keep_prefix: bool
    ) -> tuple[torch.Tensor, EncoderPrefix | None]:
        """``(logits [B, L], the encoder prefix or None)``: the encoder without adapters up to the pooled layer (with
        the layer mix: the outputs of layers 0 .. that layer, stacked ``[K, B, T, D]``)."""
        if self.lid_head is None:
            raise ValueError("the model has no language-ID head: train one with a stage whose model.trainable.lid is "
                             "true (docs/lid.md), or pass a separate language-ID model")
        spec = self.config.backbone_spec
        layer = self.config.lid.resolved_layer(self.config.num_encoder_layers)
        start = shared_start(self, layer)
        pooled = list(range(layer + 1)) if self.config.lid.layer_mix else [layer]
        captured: list[torch.Tensor] = []
        signal = _LayerReachedSignal()

        def capture(module: Any, args: Any, output: Any) -> None:
            captured.append(output[0] if isinstance(output, tuple) else output)
            if len(captured) == len(pooled):
                raise signal  # the layers above the pooled one are not run

        recording = capturing_prefix(self, start) if keep_prefix else contextlib.nullcontext({})
        layers = spec.encoder_layers(self.backbone)
        try:  # the hooks act on this call only: another thread's forward passes the layers untouched
            with call_scoped_hooks() as scoped, self.without_adapters(), recording as calls, \
                    _full_depth(spec.encoder_module(self.backbone)):
                handles = [layers[i].register_forward_hook(scoped(capture)) for i in pooled]
                try:
                    self.encode(inputs, attention_mask)
                finally:
                    for handle in handles:
                        handle.remove()
        except _LayerReachedSignal as reached:
            if reached is not signal:
                raise
        hidden = captured[-1]
        mask = None if attention_mask is None else attention_mask.to(torch.bool)
        frame_mask = spec.frame_mask(self.backbone, mask, hidden.shape[1], hidden.shape[0])
        logits = self.lid_head(torch.stack(captured) if self.config.lid.layer_mix else hidden, frame_mask)
        prefix = None
        if keep_prefix:
            layer_input = None if start == 0 else calls.get("layer_input", hidden if start == layer + 1 else None)
            prefix = EncoderPrefix(inputs, attention_mask, start, calls["args"], calls["kwargs"], layer_input)
        return logits, prefix


@contextlib.contextmanager
def _full_depth(encoder: torch.nn.Module) -> Iterator[None]:
    """LayerDrop off while the block runs ``encoder`` in training mode: ``layerdrop > 0`` skips encoder layers at
    random, and a skipped pooled layer never reaches the capture hook (the pass would end without its output, or stack
    fewer layers than the layer mix weighs); the language-ID head learns on the full encoder it reads at inference.
    The encoder's config is the one transformers' loop reads at every call; it is set back on leaving (written only in
    training mode, where one loop drives the model; inference never drops layers and changes nothing)."""
    config = getattr(encoder, "config", None)
    layerdrop = float(getattr(config, "layerdrop", 0.0) or 0.0)
    if not encoder.training or layerdrop <= 0.0:
        yield
        return
    config.layerdrop = 0.0
    try:
        yield
    finally:
        config.layerdrop = layerdrop


class _LayerReachedSignal(Exception):  # noqa: N818 - a signal, not an error
    """Raised by the capture hook once the pooled layer has run (stops the encoder there)."""
