"""What adaptspeech needs to know about a backbone, in one place.

A :class:`BackboneSpec` builds (or loads) an HF speech encoder and tells the model where its encoder layers are,
which attribute holds each layer's attention, which module's output is the layer's pre-FFN LayerNorm output (the
SimAdapter residual), and how input samples map to encoder frames. Specs are stateless and registered in
``BACKBONES``; adding an encoder family means writing one spec and registering it.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any, ClassVar

import torch
from torch import nn
from transformers import AutoConfig, PretrainedConfig, PreTrainedModel

from ..registry import Registry
from .stream_front_end import StreamFrontEnd

_LAYER_START: ContextVar[tuple[nn.ModuleList, int] | None] = ContextVar("adaptspeech_layer_start", default=None)


class StartableLayers(nn.ModuleList):
    """An encoder's layer list that, iterated inside :meth:`BackboneSpec.layers_from` in the same thread / context,
    yields its layers from the start layer on; everywhere else it is the plain ``nn.ModuleList`` it was (same
    modules, same parameter names)."""

    def __iter__(self) -> Iterator[nn.Module]:
        entry = _LAYER_START.get()
        layers = super().__iter__()
        if entry is not None and entry[0] is self:
            return itertools.islice(layers, entry[1], None)
        return layers


class BackboneSpec:
    """Base class: subclasses set the class attributes and override what differs."""

    #: registry name, also stored in ``AdaptSpeechConfig.backbone_type``.
    name: ClassVar[str]
    #: HF ``model_type`` of the backbone config.
    model_type: ClassVar[str]
    #: the model's main input (``input_values`` for raw waveforms, ``input_features`` for fbank).
    main_input_name: ClassVar[str] = "input_values"
    #: the attribute of each encoder layer holding its self-attention module.
    attention_attr: ClassVar[str] = "attention"
    #: the feature type the backbone reads (:mod:`adaptspeech.data.feature_types`) where its ``main_input_name``
    #: alone does not tell (None: the type reading that input).
    feature_type: ClassVar[str | None] = None
    #: adaptspeech's own settings of ``backbone_config`` beyond the HF config class's (read by adaptspeech, e.g.
    #: ``conv_lookahead`` of the conformer convolution); the only ones a stage may put on a checkpoint's own config
    #: (``model.init: backbone``).
    own_settings: ClassVar[tuple[str, ...]] = ()

    # --- construction ----------------------------------------------------------------------------------------
    def build_config(self, backbone_config: dict[str, Any] | PretrainedConfig | None) -> PretrainedConfig:
        """Turn a dict (or None for the defaults) into the backbone's HF config."""
        if isinstance(backbone_config, PretrainedConfig):
            return backbone_config
        data = dict(backbone_config or {})
        data.pop("model_type", None)
        return AutoConfig.for_model(self.model_type, **data)

    def build_model(self, config: PretrainedConfig) -> PreTrainedModel:
        """A randomly initialised backbone from its config."""
        raise NotImplementedError(f"{type(self).__name__} must implement build_model")

    def load_pretrained(self, name_or_path: str, revision: str | None = None, **kwargs: Any) -> PreTrainedModel:
        """Load pretrained backbone weights (a Hub id or a local folder)."""
        raise NotImplementedError(f"{type(self).__name__} must implement load_pretrained")

    # --- structure ---------------------------------------------------------------------------------------------
    def encoder_layers(self, model: nn.Module) -> nn.ModuleList:
        return model.encoder.layers

    def encoder_module(self, model: nn.Module) -> nn.Module:
        """The module that runs the encoder layers on the front end's output ``[B, T, D]`` (called with it and the
        frame mask; :mod:`adaptspeech.heads.encoder_prefix` calls it again with the same arguments)."""
        return model.encoder

    @contextlib.contextmanager
    def layers_from(self, model: nn.Module, start: int) -> Iterator[None]:
        """Inside the block the encoder module runs its layers from ``start`` only, for the calls of this thread /
        context (the layer list becomes a :class:`StartableLayers` the first time; nothing else of the module
        changes, so another thread's forward runs every layer)."""
        layers = self.encoder_module(model).layers
        if type(layers) is nn.ModuleList:
            layers.__class__ = StartableLayers
        if not isinstance(layers, StartableLayers):
            raise TypeError(f"the encoder's layers are a {type(layers).__name__}; layers_from needs an nn.ModuleList")
        token = _LAYER_START.set((layers, start))
        try:
            yield
        finally:
            _LAYER_START.reset(token)

    def finish_encoder(self, model: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
        """What the backbone's forward does to the encoder module's output ``[B, T, D]`` (wav2vec2's optional output
        adapter, ``add_adapter``)."""
        adapter = getattr(model, "adapter", None)
        return hidden if adapter is None else adapter(hidden)

    def ffn_input_module(self, layer: nn.Module) -> nn.Module:
        """The module whose output is the layer's pre-FFN LayerNorm output."""
        raise NotImplementedError(f"{type(self).__name__} must implement ffn_input_module")

    def hidden_size(self, config: PretrainedConfig) -> int:
        return config.hidden_size

    def num_heads(self, config: PretrainedConfig) -> int:
        return config.num_attention_heads

    def num_layers(self, config: PretrainedConfig) -> int:
        return config.num_hidden_layers

    # --- streaming ----------------------------------------------------------------------------------------------
    def stream_front_end(self, model: PreTrainedModel) -> StreamFrontEnd:
        """The front end as a stream (:class:`~.stream_front_end.StreamFrontEnd`: input ``[B, C, n]`` in, encoder-input
        frames ``[B, m, D]`` out, equal to the whole-sequence front end); ValueError where it cannot stream."""
        raise ValueError(f"the {self.name} backbone cannot stream: {self.stream_refusal(model)}")

    def stream_refusal(self, model: PreTrainedModel) -> str:
        """Why this backbone's front end or encoder cannot stream."""
        return "no streaming front end is defined for it (streaming backbones: fbank_conformer, wav2vec2_conformer)"

    def stream_encoder(self, model: PreTrainedModel) -> tuple[nn.ModuleList, nn.Module]:
        """``(encoder layers, final layer norm)`` that a stream runs after the front end (conformer encoders)."""
        return model.encoder.layers, model.encoder.layer_norm

    # --- lengths and masks -------------------------------------------------------------------------------------
    def output_lengths(self, model: PreTrainedModel, input_lengths: torch.Tensor) -> torch.Tensor:
        """Number of encoder frames for each input length [B] -> [B]."""
        return model._get_feat_extract_output_lengths(input_lengths).to(torch.long)

    def num_frames(self, model: PreTrainedModel, num_units: int) -> int:
        """Encoder frames of an input of ``num_units`` samples / feature frames, in Python integers (a symbolic size
        stays symbolic while a graph is exported): the convolution lengths ``(L - k) // s + 1`` of the config's
        ``conv_kernel`` / ``conv_stride`` where it has them, else the model's own length function."""
        config = model.config
        kernels, strides = getattr(config, "conv_kernel", None), getattr(config, "conv_stride", None)
        if kernels is None or strides is None or getattr(config, "add_adapter", False):
            return int(model._get_feat_extract_output_lengths(num_units))
        for kernel, stride in zip(kernels, strides):
            num_units = (num_units - kernel) // stride + 1
        return num_units

    def frame_mask(
        self, model: PreTrainedModel, attention_mask: torch.Tensor | None, num_frames: int, batch_size: int
    ) -> torch.Tensor:
        """Encoder-frame padding mask [B, T] (bool, True on real frames) from the input mask [B, S]."""
        if attention_mask is None:
            return torch.ones(batch_size, num_frames, dtype=torch.bool, device=model.device)
        lengths = self.output_lengths(model, attention_mask.sum(-1))
        return torch.arange(num_frames, device=lengths.device)[None, :] < lengths[:, None]

    def freeze_feature_encoder(self, model: PreTrainedModel) -> None:
        """Freeze the convolutional front end (no-op where there is none)."""
        self.set_feature_encoder_trainable(model, False)

    def set_feature_encoder_trainable(self, model: PreTrainedModel, trainable: bool) -> None:
        """Set the front end's ``requires_grad`` and transformers' ``Wav2Vec2FeatureEncoder._requires_grad`` together.

        The flag matters on its own: while it is on, transformers marks the *waveform* as requiring grad in training
        mode, so autograd records the 7 convolutions at 16 kHz and back-propagates down to the audio even when no
        front-end parameter trains (measured: 0.88x instead of 0.66x of full fine-tuning's step time for an adapter
        on XLS-R 300M's shape, scripts/bench_training_step.py)."""
        encoder = getattr(model, "feature_extractor", None)
        if encoder is not None and hasattr(encoder, "_requires_grad"):
            for param in encoder.parameters():
                param.requires_grad = trainable
            encoder._requires_grad = trainable
        elif not trainable and hasattr(model, "freeze_feature_encoder"):
            model.freeze_feature_encoder()


BACKBONES: Registry[type[BackboneSpec]] = Registry("backbone")


def get_backbone_spec(name: str) -> BackboneSpec:
    """Instantiate the registered spec ``name``."""
    return BACKBONES.get(name)()


def backbone_type_of_model_type(model_type: str, origin: str = "the checkpoint") -> str:
    """The registered backbone whose HF config has ``model_type`` (ValueError naming ``origin`` and the supported
    model types otherwise)."""
    for name in BACKBONES.names():
        if BACKBONES.get(name).model_type == model_type:
            return name
    supported = ", ".join(BACKBONES.get(name).model_type for name in BACKBONES.names())
    raise ValueError(f"{origin}: model_type {model_type!r} is not a supported backbone; supported: {supported}")
