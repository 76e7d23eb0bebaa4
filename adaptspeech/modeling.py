"""adaptspeech models: a frozen-able HF speech encoder with per-language adapters, SimAdapter fusion, swappable
encoder attention and output heads, all built from :class:`AdaptSpeechConfig`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint
from transformers import AutoConfig, AutoModelForCTC, AutoModelForSpeechSeq2Seq, PreTrainedModel
from transformers import initialization as init

from . import feature_extraction  # noqa: F401  (registers the fbank feature extractor and the processor)
from .adapters.adapter_types import ADAPTER_MODULE_NAME
from .adapters.block import LanguageAdapterBlock, mark_initialized
from .adapters.fusion import guide_loss
from .adapters.mixin import LanguageAdapterMixin
from .adapters.mms import builtin_config_kwargs, builtin_language, take_builtin_adapter
from .adapters.routing import (
    AdapterRouting,
    checkpoint_with_routing,
    current_call,
    routing_call,
    row_languages_from_ids,
)
from .attention.chunking import chunk_attention, dynamic_chunk_training
from .attention.swap import swap_encoder_attention
from .backbones import backbone_type_of_model_type, get_backbone_spec
from .backbones.causal_conv import set_conv_lookahead
from .backbones.conv_padding import frame_padding, mask_convolution_padding
from .configuration import AdaptSpeechConfig
from .generation import AdaptSpeechGenerationMixin
from .heads import get_head
from .heads.ctc import CTCHead, chunk_distillation_kl
from .heads.encoder_prefix import encode_from_prefix, usable_prefix
from .heads.las import LASDecoder
from .heads.lid_model import LanguageIDMixin
from .inference.model_mixin import InferenceMixin
from .inference.streaming.encoding import StreamingMixin
from .modeling_outputs import AdaptSpeechOutput


class AdaptSpeechPreTrainedModel(InferenceMixin, StreamingMixin, LanguageIDMixin, LanguageAdapterMixin,
                                 PreTrainedModel):
    """Backbone + encoder surgery (attention swap, adapters, fusion) shared by all adaptspeech heads.

    Args:
        config (`AdaptSpeechConfig`): the model configuration.
        backbone (`PreTrainedModel`, *optional*): an already built (e.g. pretrained) backbone to use instead of
            building one from ``config.backbone_config``; see :meth:`from_backbone`.
    """

    config_class = AdaptSpeechConfig
    base_model_prefix = "adaptspeech"
    main_input_name = "input_values"
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _supports_flash_attn = True

    def __init__(self, config: AdaptSpeechConfig, backbone: PreTrainedModel | None = None) -> None:
        super().__init__(config)
        spec = config.backbone_spec
        self.main_input_name = spec.main_input_name
        pretrained = backbone is not None
        if backbone is None:
            backbone = spec.build_model(config.backbone_config)
        else:
            if getattr(backbone.config, "adapter_attn_dim", None) is not None:
                raise ValueError(
                    "the backbone still has MMS's built-in adapter (adapter_attn_dim="
                    f"{backbone.config.adapter_attn_dim}): wrap MMS checkpoints with from_backbone"
                )
            mark_initialized(backbone)  # pretrained weights: post_init must not touch them
        self.backbone = backbone
        mask_convolution_padding(spec.encoder_layers(backbone))  # conformer layers: padding never leaks (see module)
        if set_conv_lookahead(spec.encoder_layers(backbone), getattr(config.backbone_config, "conv_lookahead", None),
                              config.attention) and pretrained:
            mark_initialized(backbone)  # the new convolutions hold the pretrained weights: post_init must keep them
        self.routing = AdapterRouting()
        self.swapped_attention_layers = self._swap_attention()
        self.adapter_blocks: dict[int, LanguageAdapterBlock] = self._insert_adapter_blocks()
        for language, adapter_config in config.adapters.items():
            self._build_language_adapter(language, adapter_config)
        fusion = config.fusion
        if fusion is not None:
            for block in self.adapter_blocks.values():
                block.set_fusion(fusion)
        self.fusion_guide_weight = 0.0 if fusion is None else fusion.guide_weight
        self._build_lid_head()

    # --- surgery -------------------------------------------------------------------------------------------------
    def _encoder_layers(self) -> nn.ModuleList:
        return self.config.backbone_spec.encoder_layers(self.backbone)

    def _swap_attention(self) -> list[int]:
        if self.config.attention.is_default:
            return []
        layers = self._encoder_layers()
        swapped = swap_encoder_attention(
            layers, self.config.backbone_spec.attention_attr, self.config.attention_config()
        )
        for i in swapped:
            mark_initialized(getattr(layers[i], self.config.backbone_spec.attention_attr))
        return swapped

    def _insert_adapter_blocks(self) -> dict[int, LanguageAdapterBlock]:
        spec = self.config.backbone_spec
        layers = self._encoder_layers()
        blocks: dict[int, LanguageAdapterBlock] = {}
        for i in self.config.layers_with_adapters():
            block = LanguageAdapterBlock(self.config.hidden_size, i, self.routing)
            layers[i].add_module(ADAPTER_MODULE_NAME, block)
            block.attach(layers[i], spec.ffn_input_module(layers[i]))
            blocks[i] = block
        return blocks

    def _set_gradient_checkpointing(
        self, enable: bool = True, gradient_checkpointing_func: Any = None, **kwargs: Any
    ) -> None:
        """transformers' hook, with the checkpoint function wrapped so that a recomputed layer runs inside the
        routing call of its forward (per-utterance languages, fusion residual; see
        :mod:`adaptspeech.adapters.routing`)."""
        func = checkpoint_with_routing(gradient_checkpointing_func or checkpoint)
        super()._set_gradient_checkpointing(enable=enable, gradient_checkpointing_func=func, **kwargs)

    def post_init(self) -> None:
        super().post_init()
        self._place_all_added()
        self.sync_routing()

    def train(self, mode: bool = True) -> AdaptSpeechPreTrainedModel:
        """``nn.Module.train``, except that normalisation layers with running statistics (the conformer convolution
        module's BatchNorm) whose parameters are all frozen stay in eval mode: a frozen backbone must not drift
        through its running means and variances while adapters or the fusion train."""
        super().train(mode)
        if mode:
            for module in self.modules():
                if isinstance(module, nn.modules.batchnorm._BatchNorm):
                    params = list(module.parameters(recurse=False))
                    if params and not any(p.requires_grad for p in params):
                        module.eval()
        return self

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """Heads: normal(0, 0.02) weights and zero biases (the backbone initialises itself)."""
        if isinstance(module, nn.Linear):
            init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)

    # --- construction helpers ----------------------------------------------------------------------------------
    @classmethod
    def from_backbone(
        cls,
        name_or_path: str,
        revision: str | None = None,
        backbone_type: str | None = None,
        backbone_kwargs: dict[str, Any] | None = None,
        mms_language: str | None = None,
        **config_kwargs: Any,
    ) -> AdaptSpeechPreTrainedModel:
        """Wrap a pretrained HF checkpoint (e.g. ``facebook/wav2vec2-xls-r-300m``) with adapters and a new head.

        The checkpoint's name and revision (the resolved commit when the Hub reports one) are recorded in the
        config. ``backbone_type`` is inferred from the checkpoint's ``model_type`` when omitted.

        An MMS checkpoint (a wav2vec2 config with ``adapter_attn_dim``, e.g. ``facebook/mms-1b-all``) keeps what it
        computes: its built-in adapter becomes the language adapter ``mms_language`` (default: the checkpoint's
        ``tokenizer_config.json`` ``target_lang``, ``"eng"`` for ``facebook/mms-*``), its ``lm_head`` that
        language's CTC head (``config.language_heads``), the backbone's ``adapter_layer`` modules are removed (one
        adapter engine) and the language is active. Other languages' MMS adapters load with :meth:`load_adapter`.

        ``backbone_config`` (in ``config_kwargs``) may hold adaptspeech's own settings of the backbone only
        (``BackboneSpec.own_settings``, e.g. ``{"conv_lookahead": "chunk"}`` on a wav2vec2-conformer checkpoint): set
        on the checkpoint's own config; any other setting raises a ``ValueError``.
        """
        hf_config = None
        if backbone_type in (None, "wav2vec2"):  # config.json alone: the weights are loaded once, below
            hf_config = AutoConfig.from_pretrained(name_or_path, revision=revision)
        if backbone_type is None:
            backbone_type = backbone_type_of_model_type(hf_config.model_type, str(name_or_path))
        spec = get_backbone_spec(backbone_type)
        builtin = lm_head = None
        load_kwargs = dict(backbone_kwargs or {})
        if getattr(hf_config, "adapter_attn_dim", None) is not None:
            backbone, lm_head = spec.load_pretrained_with_head(name_or_path, revision=revision, **load_kwargs)
            builtin = take_builtin_adapter(backbone)
        else:
            backbone = spec.load_pretrained(name_or_path, revision=revision, **load_kwargs)
        if builtin is not None:
            mms_language = builtin_language(name_or_path, revision, mms_language)
            config_kwargs = builtin_config_kwargs(
                config_kwargs, mms_language, builtin, lm_head, spec.num_layers(backbone.config)
            )
        elif mms_language is not None:
            raise ValueError(
                f"mms_language={mms_language!r}: {name_or_path} has no built-in MMS adapter (no adapter_attn_dim on "
                "stable-layer-norm layers)"
            )
        resolved = getattr(backbone.config, "_commit_hash", None) or revision
        own = dict(config_kwargs.pop("backbone_config", None) or {})
        others = sorted(key for key in own if key not in spec.own_settings)
        if others:
            raise ValueError(f"backbone_config {others}: the checkpoint's own config is loaded; only adaptspeech's own "
                             f"settings of {backbone_type} ({', '.join(spec.own_settings) or 'none'}) go on top of it")
        config = AdaptSpeechConfig(
            backbone_type=backbone_type,
            backbone_config={**backbone.config.to_dict(), **own},
            backbone_name_or_path=str(name_or_path),
            backbone_revision=resolved,
            **config_kwargs,
        )
        model = cls(config, backbone=backbone)
        if builtin is not None:
            model._copy_mms_adapter(mms_language, builtin, lm_head)
        return model

    # --- shared forward pieces ---------------------------------------------------------------------------------
    def _get_feat_extract_output_lengths(self, input_lengths: torch.Tensor | int) -> torch.Tensor | int:
        return self.backbone._get_feat_extract_output_lengths(input_lengths)

    def freeze_feature_encoder(self) -> None:
        self.config.backbone_spec.freeze_feature_encoder(self.backbone)

    def encode(
        self,
        inputs: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        lang_ids: torch.Tensor | None = None,
        output_hidden_states: bool = False,
        collect_fusion_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...] | None, list[torch.Tensor]]:
        """Run the backbone with the adapters routed (from the language-ID pass's encoder prefix, inside
        :meth:`reusing_encoder_prefix` on the same batch: :mod:`adaptspeech.heads.encoder_prefix`).

        Args:
            inputs: waveforms [B, S] or filterbanks [B, S, F].
            attention_mask: [B, S], 1/True on real samples.
            lang_ids: [B] language index per utterance (positions in :attr:`adapter_languages`).

        Returns:
            ``(hidden [B, T, D], frame_mask [B, T] bool, hidden_states or None, fusion weights per layer)``.
        """
        spec = self.config.backbone_spec
        frames = spec.num_frames(self.backbone, inputs.shape[1])
        if frames <= 0:
            unit = "samples" if self.main_input_name == "input_values" else "feature frames"
            raise ValueError(f"{self.main_input_name} of {inputs.shape[1]} {unit} is too short for one output frame of "
                             "this model: drop the clip or pad it")
        rows = self.row_languages(lang_ids)  # or e.g. a PeftModel's `adapter_names` around this model
        padding = None
        if attention_mask is not None:
            attention_mask = attention_mask.to(torch.bool)
            padding = spec.frame_mask(self.backbone, attention_mask, frames, inputs.shape[0])
        chunks = dynamic_chunk_training(self.config.attention, frames, self.training)  # U2's per-batch chunks
        prefix = usable_prefix(self, inputs, attention_mask, output_hidden_states)  # the LID pass's shared part
        with routing_call(rows, collect_fusion_weights) as call, frame_padding(padding), chunks:
            if prefix is not None:
                hidden, hidden_states = encode_from_prefix(self, prefix), None
            else:
                outputs = self.backbone(inputs, attention_mask=attention_mask,
                                        output_hidden_states=output_hidden_states)
                hidden, hidden_states = outputs.last_hidden_state, getattr(outputs, "hidden_states", None)
        fusion_weights = [call.fusion_weights[i] for i in sorted(call.fusion_weights)]
        frame_mask = spec.frame_mask(self.backbone, attention_mask, hidden.shape[1], hidden.shape[0])
        return hidden, frame_mask, hidden_states, fusion_weights

    def row_languages(self, lang_ids: torch.Tensor | None) -> tuple[str, ...] | None:
        """The language of each utterance: from ``lang_ids`` ``[B]`` (positions in :attr:`adapter_languages`), else from
        an enclosing routing call (e.g. a PeftModel's ``adapter_names``); None when neither gives them.

        Raises:
            ValueError: an id outside the adapter languages.
        """
        rows = row_languages_from_ids(lang_ids, self.adapter_languages)
        outer = current_call()
        return outer.row_languages if rows is None and outer is not None else rows

    def fusion_losses(
        self, fusion_weights: list[torch.Tensor], frame_mask: torch.Tensor, device: torch.device
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """``(weighted L_reg, weighted guide loss)``, each None when it does not apply."""
        fusion = self.config.fusion  # typed once, when set: nothing is parsed per step
        if fusion is None or not self.config.fusion_active:
            return None, None
        reg = fusion.reg_weight * self.fusion_regularizer().to(device)
        guide = None
        if self.fusion_guide_weight > 0 and fusion_weights:
            target = fusion.target_index
            guide = (
                self.fusion_guide_weight
                * torch.stack([guide_loss(w, target, frame_mask) for w in fusion_weights]).sum()
            )
        return reg, guide


class AdaptSpeechForCTC(AdaptSpeechPreTrainedModel):
    """Encoder (with adapters / fusion / swapped attention) + CTC head, and the LAS decoder beside it when
    ``config.head == "ctc_las"``.

    Losses: ``loss_ctc`` for ``head="ctc"``; for ``"ctc_las"``, ``loss = ctc_weight * loss_ctc +
    (1 - ctc_weight) * loss_att`` (ESPnet's hybrid CTC/attention objective); the fusion terms are added to either.

    Example:
        ```python
        >>> config = AdaptSpeechConfig(backbone_type="fbank_conformer", adapter_languages=["ro", "cs", "pl"],
        ...                            vocab_size=40)
        >>> model = AdaptSpeechForCTC(config)
        >>> model.add_fusion(["ro", "cs", "pl"], target_language="ro")
        >>> model.set_trainable(adapters=["ro"], fusion=True)
        ```
    """

    #: the heads this class accepts
    supported_heads: tuple[str, ...] = ("ctc", "ctc_las")

    def __init__(self, config: AdaptSpeechConfig, backbone: PreTrainedModel | None = None) -> None:
        if config.head not in self.supported_heads:
            raise ValueError(
                f"{type(self).__name__} takes head {' or '.join(repr(h) for h in self.supported_heads)}, "
                f"the config has head={config.head!r}; use {get_head(config.head).model_class.__name__}"
            )
        super().__init__(config, backbone=backbone)
        head = get_head(config.head)
        self.ctc_head = None
        if head.has_ctc:
            self.ctc_head = CTCHead(
                config.hidden_size,
                config.vocab_size,
                blank_id=config.pad_token_id,
                dropout=config.final_dropout,
                reduction=config.ctc_loss_reduction,
                zero_infinity=config.ctc_zero_infinity,
                routing=self.routing,
            )
            for language, settings in config.language_heads.items():
                self.ctc_head.add_language_head(language, settings["vocab_size"])
        self.las_head = None
        if head.has_las:
            self.las_head = LASDecoder(config.las_config())
        self.post_init()

    @contextlib.contextmanager
    def _drawn_chunks(self, inputs: torch.Tensor) -> Iterator[int]:
        """Around a whole training forward: draws the batch's chunks (dynamic chunk training,
        :func:`~adaptspeech.attention.chunking.dynamic_chunk_training`, the same draw :meth:`encode` would make) and
        yields the chunk size, 0 for full context; every encoder call inside uses them."""
        frames = self.config.backbone_spec.num_frames(self.backbone, inputs.shape[1])
        with dynamic_chunk_training(self.config.attention, frames, self.training) as (chunk, _):
            yield chunk

    def _full_context_logits(
        self, inputs: torch.Tensor, attention_mask: torch.Tensor | None, lang_ids: torch.Tensor | None
    ) -> torch.Tensor:
        """The teacher of in-place distillation (``attention.chunk_distillation``): CTC logits [B, T, V] of the batch
        at full context, without gradient, in training mode and from the random state the chunked forward that
        follows starts from, so both see the same SpecAugment masks and the same dropout masks: they differ only
        in the chunks. The random state is restored afterwards (the run's random stream is the one without
        distillation)."""
        device = inputs.device
        devices = [] if device.type == "cpu" else [device]
        device_type = None if device.type == "cpu" else device.type
        with torch.no_grad(), torch.random.fork_rng(devices, device_type=device_type), chunk_attention(0):
            hidden, _, _, _ = self.encode(inputs, attention_mask, lang_ids)
            return self.ctc_head(hidden, row_languages=self.row_languages(lang_ids))

    def forward(
        self,
        input_values: torch.Tensor | None = None,
        input_features: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        lang_ids: torch.Tensor | None = None,
        output_fusion_weights: bool = False,
        output_hidden_states: bool = False,
        return_dict: bool = True,
        lid_targets: torch.Tensor | None = None,
    ) -> AdaptSpeechOutput:
        """Args:
        input_values: raw waveforms [B, S] (wav2vec2 backbones).
        input_features: log-mel filterbanks [B, S, F] (fbank backbone).
        attention_mask: [B, S], True on real samples / feature frames.
        labels: [B, L] token ids padded with -100 (no ``<s>``/``</s>``: the LAS head adds them).
        lang_ids: [B] language index per utterance, for per-utterance adapter routing.
        output_fusion_weights: return the SimAdapter attention per fused layer.
        lid_targets: [B] language index per utterance in ``config.lid_languages``: adds the language-ID
            cross-entropy ``loss_lid`` (the head reads the encoder without adapters); without ``labels`` only the
            language-ID pass runs.
        """
        inputs = input_values if input_values is not None else input_features
        if inputs is None:
            raise ValueError(f"pass {self.main_input_name} (the backbone's input)")
        loss_lid = lid_logits = None
        if lid_targets is not None:
            lid_logits = self.lid_logits(inputs, attention_mask)
            loss_lid = self.lid_head.loss(lid_logits, lid_targets.to(lid_logits.device))
            if labels is None:
                return AdaptSpeechOutput(loss=loss_lid, loss_lid=loss_lid, lid_logits=lid_logits)
        want_weights = output_fusion_weights or self.fusion_guide_weight > 0
        distill_weight = self.config.attention.chunk_distillation
        distil = bool(distill_weight) and self.training and labels is not None and self.ctc_head is not None
        teacher = None
        with self._drawn_chunks(inputs) if distil else contextlib.nullcontext(0) as chunk:
            if chunk:  # a chunked batch of in-place distillation: its full-context twin teaches it
                teacher = self._full_context_logits(inputs, attention_mask, lang_ids)
            hidden, frame_mask, hidden_states, fusion_weights = self.encode(
                inputs, attention_mask, lang_ids, output_hidden_states, collect_fusion_weights=want_weights
            )
            logits = None
            if self.ctc_head is not None:
                logits = self.ctc_head(hidden, row_languages=self.row_languages(lang_ids))
        frame_lengths = frame_mask.sum(-1)
        loss = loss_ctc = loss_att = loss_reg = loss_guide = attention_logits = loss_distill = None
        if labels is not None:
            if self.ctc_head is not None:
                loss_ctc = self.ctc_head.loss(logits, frame_lengths, labels)
            if self.las_head is not None:
                las = self.las_head(hidden, frame_mask, labels)
                loss_att, attention_logits = las.loss, las.logits
            if loss_ctc is not None and loss_att is not None:
                weight = self.config.ctc_weight
                loss = weight * loss_ctc + (1.0 - weight) * loss_att
            else:
                loss = loss_ctc if loss_ctc is not None else loss_att
            if teacher is not None:
                loss_distill = distill_weight * chunk_distillation_kl(teacher, logits, frame_mask)
            loss_reg, loss_guide = self.fusion_losses(fusion_weights, frame_mask, hidden.device)
            for term in (loss_distill, loss_reg, loss_guide, loss_lid):
                if term is not None:
                    loss = loss + term
        return AdaptSpeechOutput(
            loss=loss,
            loss_ctc=loss_ctc,
            loss_att=loss_att,
            loss_distill=loss_distill,
            loss_fusion_reg=loss_reg,
            loss_fusion_guide=loss_guide,
            logits=logits,
            attention_logits=attention_logits,
            frame_lengths=frame_lengths,
            encoder_hidden_states=hidden,
            hidden_states=hidden_states,
            fusion_weights=tuple(fusion_weights) if output_fusion_weights else None,
            loss_lid=loss_lid,
            lid_logits=lid_logits,
        )


class AdaptSpeechForJointCTCAttention(AdaptSpeechGenerationMixin, AdaptSpeechForCTC):
    """The same model with a Listen-Attend-Spell decoder: ``head="ctc_las"`` (joint) or ``"las"`` (attention only).

    Registered with ``AutoModelForSpeechSeq2Seq``; ``AutoModelForCTC`` also loads a ``ctc_las`` checkpoint (as
    :class:`AdaptSpeechForCTC`, with the LAS head). Decode with :mod:`adaptspeech.decoding`
    (:func:`adaptspeech.decoding.transcribe_batch` runs the model and any decoder on a batch).
    """

    supported_heads = ("ctc_las", "las")


AutoModelForCTC.register(AdaptSpeechConfig, AdaptSpeechForCTC)
AutoModelForSpeechSeq2Seq.register(AdaptSpeechConfig, AdaptSpeechForJointCTCAttention)
