"""``AdaptSpeechConfig``: the single source of truth for an adaptspeech model.

Its sub-settings are typed once, when set (at construction, by ``from_pretrained``, or assigned later): the adapter
defaults (:class:`~adaptspeech.adapters.AdapterDefaults`), each language's adapter (its type's
:class:`~adaptspeech.adapters.LanguageAdapterConfig`), the fusion (:class:`~adaptspeech.adapters.FusionConfig`) and
the encoder attention (:class:`~adaptspeech.attention.AttentionConfig`); nothing re-parses them when they are read.
:meth:`AdaptSpeechConfig.to_dict` writes them in the layout of adaptspeech 0.1.0's ``config.json``, which loads as it
did.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from transformers import AutoConfig, PretrainedConfig

from .adapters.adapter_types import LanguageAdapterConfig, fusable_types, get_adapter_type
from .adapters.config import AdapterDefaults, FusionConfig, check_language_code
from .attention.config import AttentionConfig
from .backbones import BACKBONES, get_backbone_spec
from .heads import HEADS
from .heads.las_config import LASConfig
from .heads.lid import LIDConfig
from .settings import unknown_settings_message

if TYPE_CHECKING:
    from .backbones.base import BackboneSpec
    from .heads.las_config import LASConfig


def _typed_adapter_defaults(config: AdaptSpeechConfig, value: Any) -> AdapterDefaults:
    return AdapterDefaults.parse(value if value is not None else {})


def _typed_adapters(config: AdaptSpeechConfig, value: Any) -> dict[str, LanguageAdapterConfig]:
    """Language -> typed settings; a mapping is read over ``config.adapter_defaults`` (settings of another adapter
    type in it are ignored: 0.1.0 saved every type's settings for each language)."""
    defaults = config.adapter_defaults
    return {
        check_language_code(lang): settings
        if isinstance(settings, LanguageAdapterConfig)
        else defaults.settings(settings or {})
        for lang, settings in (value or {}).items()
    }


def _typed_fusion(config: AdaptSpeechConfig, value: Any) -> FusionConfig | None:
    return None if value is None else FusionConfig.parse(value)


def _typed_attention(config: AdaptSpeechConfig, value: Any) -> AttentionConfig:
    return AttentionConfig.parse(value if value is not None else {})


def _typed_lid(config: AdaptSpeechConfig, value: Any) -> LIDConfig:
    return LIDConfig.parse(value if value is not None else {})


#: the sub-settings held typed: name -> how a value given for it becomes typed (in this order in ``__init__``).
_TYPED_SETTINGS: dict[str, Callable[[AdaptSpeechConfig, Any], Any]] = {
    "adapter_defaults": _typed_adapter_defaults,
    "adapters": _typed_adapters,
    "fusion": _typed_fusion,
    "attention": _typed_attention,
    "lid": _typed_lid,
}


class AdaptSpeechConfig(PretrainedConfig):
    r"""Configuration of :class:`~adaptspeech.AdaptSpeechForCTC` (and the joint CTC/attention model).

    Args:
        backbone_type (`str`, defaults to ``"wav2vec2"``): one of ``BACKBONES.names()``: ``"wav2vec2"`` (both
            layer-norm variants; XLS-R, MMS), ``"wav2vec2_conformer"``, ``"fbank_conformer"`` (from scratch).
        backbone_config (`dict` or `PretrainedConfig`, *optional*): the backbone's HF config; defaults of the
            backbone's config class when omitted.
        backbone_name_or_path (`str`, *optional*): the pretrained checkpoint the backbone weights came from (recorded
            by :meth:`AdaptSpeechForCTC.from_backbone`, written into model cards).
        backbone_revision (`str`, *optional*): the revision (commit) of that checkpoint.
        adapters (`dict[str, dict]`, *optional*): language code -> its adapter's settings (``adapter_type`` and
            that type's settings, e.g. ``{"bottleneck": 64}`` or ``{"adapter_type": "lora", "lora_r": 4}``), over
            ``adapter_defaults``. Held typed: ``config.adapters[lang]`` is the type's
            :class:`~adaptspeech.adapters.LanguageAdapterConfig` (``config.adapters["ro"].bottleneck``).
        adapter_languages (`list[str]`, *optional*): shorthand: languages to give an adapter with
            ``adapter_defaults``.
        adapter_defaults (`dict`, *optional*): default settings for new adapters, of any adapter type (e.g.
            ``{"bottleneck": 64}``); held as an :class:`~adaptspeech.adapters.AdapterDefaults`.
        adapter_layers (`list[int]`, *optional*): encoder layers that carry adapters (all when omitted).
        fusion (`dict`, *optional*): :class:`FusionConfig` fields (SimAdapter over several language adapters); held
            as a :class:`FusionConfig`.
        active_languages (`list[str]`, *optional*): the adapters that run in forward (see
            :meth:`AdaptSpeechForCTC.set_active_languages`).
        fusion_active (`bool`, defaults to `False`): run the fusion instead of single adapters.
        attention (`dict`, *optional*): :class:`~adaptspeech.attention.AttentionConfig` settings; ``{"kind":
            "default"}`` keeps the backbone's own attention. Held as an ``AttentionConfig``.
        head (`str`, defaults to ``"ctc"``): one of ``HEADS.names()``.
        las (`dict`, *optional*): settings of the attention decoder (heads with an attention decoder).
        ctc_weight (`float`, defaults to 0.3): lambda in ``lambda * CTC + (1 - lambda) * attention`` (joint heads).
        vocab_size (`int`, *optional*): output vocabulary; defaults to the backbone config's ``vocab_size``.
        pad_token_id (`int`, defaults to 0): padding id, also the CTC blank.
        bos_token_id / eos_token_id (`int`, defaults to 2 / 3): ``<s>`` / ``</s>`` for the attention decoder.
        ctc_loss_reduction (`str`, defaults to ``"mean"``): ``"mean"`` or ``"sum"``.
        ctc_zero_infinity (`bool`, defaults to `True`): zero infinite CTC losses.
        final_dropout (`float`, defaults to 0.0): dropout before the CTC projection.
        language_heads (`dict[str, dict]`, *optional*): languages with a CTC output layer of their own (MMS: one
            vocabulary per language): ``{lang: {"vocab_size": V}}``; each needs an adapter, and the head must be
            ``"ctc"``. The other languages use the shared layer of ``vocab_size``; see :mod:`adaptspeech.heads.ctc`
            for which layer runs.
        lid_languages (`list[str]`, *optional*): the languages of the language-ID head (:mod:`adaptspeech.heads.lid`),
            in logit order; None: no such head.
        lid (`dict`, *optional*): the language-ID head's settings (``pooling``, ``layer`` and the pooling's options);
            held as a :class:`~adaptspeech.heads.lid.LIDConfig`.
    """

    model_type = "adaptspeech"
    #: what ``Trainer.prediction_step`` drops from the outputs: evaluation keeps the CTC logits and frame lengths
    keys_to_ignore_at_inference = [  # noqa: RUF012 - transformers reads this class attribute
        "loss_ctc",
        "loss_att",
        "loss_distill",
        "loss_fusion_reg",
        "loss_fusion_guide",
        "attention_logits",
        "encoder_hidden_states",
        "hidden_states",
        "fusion_weights",
        "loss_lid",
        "lid_logits",
    ]

    def __init__(
        self,
        backbone_type: str = "wav2vec2",
        backbone_config: dict[str, Any] | PretrainedConfig | None = None,
        backbone_name_or_path: str | None = None,
        backbone_revision: str | None = None,
        adapters: dict[str, dict[str, Any]] | None = None,
        adapter_languages: list[str] | None = None,
        adapter_defaults: dict[str, Any] | None = None,
        adapter_layers: list[int] | None = None,
        fusion: dict[str, Any] | None = None,
        active_languages: list[str] | None = None,
        fusion_active: bool = False,
        attention: dict[str, Any] | None = None,
        head: str = "ctc",
        las: dict[str, Any] | None = None,
        ctc_weight: float = 0.3,
        vocab_size: int | None = None,
        pad_token_id: int = 0,
        bos_token_id: int = 2,
        eos_token_id: int = 3,
        ctc_loss_reduction: str = "mean",
        ctc_zero_infinity: bool = True,
        final_dropout: float = 0.0,
        language_heads: dict[str, dict[str, Any]] | None = None,
        lid_languages: list[str] | None = None,
        lid: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        BACKBONES.check(backbone_type, "backbone_type")
        HEADS.check(head, "head")
        self.backbone_type = backbone_type
        spec = get_backbone_spec(backbone_type)
        self.backbone_config = spec.build_config(backbone_config)
        self.backbone_name_or_path = backbone_name_or_path
        self.backbone_revision = backbone_revision
        num_layers = spec.num_layers(self.backbone_config)

        self.adapter_defaults = adapter_defaults
        given = dict(adapters or {})
        self.adapters = {**given, **{lang: {} for lang in adapter_languages or [] if lang not in given}}
        self.adapter_layers = self._check_adapter_layers(adapter_layers, num_layers)
        self.fusion = fusion
        self._check_fusion_languages()
        self.active_languages = list(active_languages or [])
        unknown = [lang for lang in self.active_languages if lang not in self.adapters]
        if unknown:
            raise ValueError(f"active_languages {unknown} have no adapter; languages with one: {sorted(self.adapters)}")
        if fusion_active and self.fusion is None:
            raise ValueError("fusion_active=True needs a fusion config (fusion={'languages': [...]})")
        self.fusion_active = bool(fusion_active)

        self.attention = attention
        if not self.attention.is_default:
            self.attention_config(num_layers=num_layers)  # validate against the backbone now, at construction

        self.las = dict(las or {})
        if not 0.0 <= ctc_weight <= 1.0:
            raise ValueError(f"ctc_weight must be in [0, 1], got {ctc_weight}")
        self.head = head
        self.ctc_weight = ctc_weight
        self.vocab_size = self._check_vocabulary(vocab_size, pad_token_id, bos_token_id, eos_token_id)
        if ctc_loss_reduction not in ("mean", "sum"):
            raise ValueError(f"ctc_loss_reduction {ctc_loss_reduction!r} unknown; allowed values: mean, sum")
        self.ctc_loss_reduction = ctc_loss_reduction
        self.ctc_zero_infinity = ctc_zero_infinity
        self.final_dropout = final_dropout
        self.language_heads = self._check_language_heads(language_heads or {}, head, pad_token_id)
        self.lid_languages = self._check_lid_languages(lid_languages)
        self.lid = lid
        if self.lid_languages is not None:
            self.lid.resolved_layer(num_layers)
        super().__init__(pad_token_id=pad_token_id, bos_token_id=bos_token_id, eos_token_id=eos_token_id, **kwargs)
        if "las" in head.split("_"):
            self.las_config()  # validate the attention-decoder settings now, at construction

    def __setattr__(self, name: str, value: Any) -> None:
        """Sub-settings become typed when set (see the module docstring); everything else is stored as given."""
        typed = _TYPED_SETTINGS.get(name)
        super().__setattr__(name, value if typed is None else typed(self, value))

    @staticmethod
    def _check_adapter_layers(adapter_layers: list[int] | None, num_layers: int) -> list[int] | None:
        """``adapter_layers`` sorted and deduplicated, or ValueError naming those out of the backbone's range."""
        if adapter_layers is None:
            return None
        adapter_layers = sorted({int(i) for i in adapter_layers})
        bad = [i for i in adapter_layers if not 0 <= i < num_layers]
        if bad:
            raise ValueError(f"adapter_layers {bad} out of range: the backbone has layers 0..{num_layers - 1}")
        return adapter_layers

    def _check_fusion_languages(self) -> None:
        """Every fused language has an adapter of a type SimAdapter can fuse."""
        if self.fusion is None:
            return
        fusable = sorted(lang for lang, s in self.adapters.items() if get_adapter_type(s.adapter_type).fusable)
        missing = [lang for lang in self.fusion.languages if lang not in fusable]
        if missing:
            raise ValueError(
                f"fusion.languages {missing} have no {' or '.join(fusable_types())} adapter; languages with one: "
                f"{fusable}"
            )

    def _check_vocabulary(
        self, vocab_size: int | None, pad_token_id: int, bos_token_id: int, eos_token_id: int
    ) -> int:
        """``vocab_size`` (the backbone config's when None), checked to hold the special ids."""
        if vocab_size is None:
            vocab_size = getattr(self.backbone_config, "vocab_size", None)
        if vocab_size is None or vocab_size < 2:
            raise ValueError(f"vocab_size must be an integer >= 2, got {vocab_size!r}")
        for name, value in (
            ("pad_token_id", pad_token_id),
            ("bos_token_id", bos_token_id),
            ("eos_token_id", eos_token_id),
        ):
            if value is not None and not 0 <= value < vocab_size:
                raise ValueError(f"{name}={value} is outside the vocabulary of size {vocab_size}")
        return int(vocab_size)

    def _check_language_heads(
        self, language_heads: dict[str, dict[str, Any]], head: str, pad_token_id: int | None
    ) -> dict[str, dict[str, int]]:
        """``language_heads`` normalised to ``{lang: {"vocab_size": V}}``, or ValueError naming the setting."""
        if not language_heads:
            return {}
        if head != "ctc":
            raise ValueError(
                f"language_heads are per-language CTC output layers; head={head!r} shares one vocabulary between its "
                "CTC and attention decoders: use head='ctc'"
            )
        checked: dict[str, dict[str, int]] = {}
        for lang, settings in language_heads.items():
            check_language_code(lang)
            if lang not in self.adapters:
                raise ValueError(
                    f"language_heads[{lang!r}]: {lang!r} has no adapter; languages with one: {sorted(self.adapters)}"
                )
            settings = dict(settings or {})
            unknown = sorted(set(settings) - {"vocab_size"})
            if unknown:
                raise ValueError(unknown_settings_message(f"language_heads[{lang!r}]", unknown, ["vocab_size"]))
            size = settings.get("vocab_size")
            if not isinstance(size, int) or isinstance(size, bool) or size < 2:
                raise ValueError(f"language_heads[{lang!r}].vocab_size must be an integer >= 2, got {size!r}")
            if pad_token_id is not None and not 0 <= pad_token_id < size:
                raise ValueError(
                    f"language_heads[{lang!r}].vocab_size={size}: the CTC blank (pad_token_id={pad_token_id}) is "
                    "outside it"
                )
            checked[lang] = {"vocab_size": size}
        return checked

    @staticmethod
    def _check_lid_languages(languages: list[str] | None) -> list[str] | None:
        """``lid_languages`` as a list of distinct codes (at least two), or None."""
        if languages is None:
            return None
        languages = [check_language_code(lang) for lang in languages]
        repeated = sorted({lang for lang in languages if languages.count(lang) > 1})
        if repeated:
            raise ValueError(f"lid_languages names {repeated} more than once")
        if len(languages) < 2:
            raise ValueError(f"lid_languages needs at least 2 languages to tell apart, got {languages}")
        return languages

    # --- typed views ---------------------------------------------------------------------------------------------
    @property
    def backbone_spec(self) -> BackboneSpec:
        return get_backbone_spec(self.backbone_type)

    @property
    def hidden_size(self) -> int:
        return self.backbone_spec.hidden_size(self.backbone_config)

    @property
    def num_encoder_layers(self) -> int:
        return self.backbone_spec.num_layers(self.backbone_config)

    def adapter_config(self, language: str) -> LanguageAdapterConfig:
        """``language``'s adapter settings (KeyError naming the languages with an adapter)."""
        if language not in self.adapters:
            raise KeyError(f"no adapter for language {language!r}; languages with one: {sorted(self.adapters)}")
        return self.adapters[language]

    def fusion_settings(self) -> FusionConfig | None:
        """The fusion's settings (``config.fusion``), or None without a fusion."""
        return self.fusion

    def layers_with_adapters(self) -> list[int]:
        return list(range(self.num_encoder_layers)) if self.adapter_layers is None else list(self.adapter_layers)

    def attention_config(self, num_layers: int | None = None) -> AttentionConfig:
        """The encoder attention settings as an ``AttentionConfig``: ``num_heads`` as set (the backbone's when 0),
        ``dropout`` as set (the backbone's ``attention_dropout`` when None)."""
        spec = self.backbone_spec
        return self.attention.for_model(
            spec.hidden_size(self.backbone_config),
            spec.num_heads(self.backbone_config),
            num_layers if num_layers is not None else spec.num_layers(self.backbone_config),
            dropout=getattr(self.backbone_config, "attention_dropout", 0.0),
        )

    def las_config(self) -> LASConfig:
        """The attention decoder's settings with the model's sizes and special ids filled in."""
        return LASConfig.from_dict(
            {
                **self.las,
                "vocab_size": self.vocab_size,
                "encoder_hidden_size": self.hidden_size,
                "sos_id": self.bos_token_id,
                "eos_id": self.eos_token_id,
                "pad_id": self.pad_token_id,
            }
        )

    def to_dict(self) -> dict[str, Any]:
        """The settings as ``config.json`` holds them (the layout of adaptspeech 0.1.0): every adapter's settings flat
        over the defaults of every adapter type, the fusion's fields, the attention's kind and changed settings."""
        output = super().to_dict()
        if isinstance(self.backbone_config, PretrainedConfig):
            output["backbone_config"] = self.backbone_config.to_dict()
        output.pop("adapter_languages", None)
        output["adapter_defaults"] = self.adapter_defaults.to_dict()
        output["adapters"] = {lang: self.adapter_defaults.saved(s) for lang, s in self.adapters.items()}
        output["fusion"] = None if self.fusion is None else self.fusion.to_dict()
        output["attention"] = self.attention.to_diff_dict()
        if self.lid_languages is None:  # a model without a language-ID head saves the config.json it always did
            output.pop("lid_languages", None)
            output.pop("lid", None)
        else:
            output["lid"] = self.lid.to_dict()
        return output


AutoConfig.register(AdaptSpeechConfig.model_type, AdaptSpeechConfig)
