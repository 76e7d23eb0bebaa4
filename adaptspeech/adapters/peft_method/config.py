"""``SpeechAdapterConfig``: the bottleneck adapter (or a SimAdapter fusion of several) as a PEFT method."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field

from peft.config import PeftConfig

from ..bottleneck import BottleneckAdapterConfig
from ..config import FusionConfig


class SpeechPeftType(str, enum.Enum):
    """The PEFT type of :class:`SpeechAdapterConfig`.

    peft's own ``PeftType`` enum is closed; a ``str`` enum member equal to ``"SPEECH_ADAPTER"`` is what peft's
    lookups need (``adapter_config.json`` stores the plain string, and the mappings are keyed by ``str`` enum
    members). See :mod:`adaptspeech.adapters.peft_method` for how it is registered.
    """

    SPEECH_ADAPTER = "SPEECH_ADAPTER"


#: the default ``target_modules``: every encoder layer of HF wav2vec2 / wav2vec2-conformer models
#: (``wav2vec2.encoder.layers.<i>``, ``wav2vec2_conformer.encoder.layers.<i>``) and of adaptspeech models
#: (``backbone.encoder.layers.<i>``), matched with ``re.fullmatch`` as peft does for a string.
ENCODER_LAYERS_PATTERN = r"(.*\.)?encoder\.layers\.\d+"


@dataclass
class SpeechAdapterConfig(PeftConfig):
    """Configuration of a :class:`~adaptspeech.adapters.peft_method.SpeechAdapterModel` adapter.

    An adapter is either a per-layer bottleneck adapter (:class:`~adaptspeech.adapters.BottleneckAdapter`, one
    per target layer, applied to the layer's output) or, with ``fusion_of``, a SimAdapter fusion
    (:class:`~adaptspeech.adapters.fusion.SimAdapterFusion`) over bottleneck adapters already on the model.

    Args:
        bottleneck (`int`, defaults to 64): bottleneck width ``r``.
        activation (`str`, defaults to ``"relu"``): one of ``adaptspeech.adapters.bottleneck.ACTIVATIONS``.
        layer_norm (`bool`, defaults to `True`): LayerNorm at the adapter input.
        dropout (`float`, defaults to 0.0): dropout on the adapter branch.
        init (`str`, defaults to ``"default"``): ``"default"`` (PyTorch init, the official SimAdapter code) or
            ``"near_identity"`` (zero up projection: a new adapter leaves the model's output unchanged).
        hidden_size (`int`, *optional*): width of the target layers' output; read from the model config's
            ``hidden_size`` when omitted.
        target_modules (`str` or `list[str]`, *optional*): the encoder layers to adapt, as in peft (a regex
            matched against the full module name, or a list of names / name suffixes); defaults to
            :data:`ENCODER_LAYERS_PATTERN`, every encoder layer.
        target_layers (`list[int]`, *optional*): keep only the target modules whose name ends with one of these
            layer indices (e.g. ``[6, 7, 8]``); all when omitted.
        exclude_modules (`str` or `list[str]`, *optional*): names (or a regex) of modules not to adapt.
        modules_to_save (`list[str]`, *optional*): other modules trained and saved with the adapter, e.g.
            ``["lm_head"]`` (HF ``Wav2Vec2ForCTC``) or ``["ctc_head"]`` (``AdaptSpeechForCTC``).
        fusion_of (`list[str]`, *optional*): make this adapter a SimAdapter fusion over these adapter names (in
            order: the attention's entries). They must already be on every target layer.
        fusion_temperature (`float`, defaults to 1.0): ``tau`` of the fusion.
        fusion_include_self (`bool`, defaults to `False`): add the layer output itself as one more entry.
        fusion_residual (`str`, defaults to ``"ffn_input"``): ``"ffn_input"`` (the layer's pre-FFN LayerNorm
            output, official), ``"query"`` or ``"none"``.
        fusion_reg_weight (`float`, defaults to 0.01): weight of ``L_reg`` in
            :meth:`SpeechAdapterModel.fusion_loss`.
    """

    bottleneck: int = field(default=64, metadata={"help": "bottleneck width r"})
    activation: str = field(default="relu", metadata={"help": "activation of the bottleneck adapter"})
    layer_norm: bool = field(default=True, metadata={"help": "LayerNorm at the adapter input"})
    dropout: float = field(default=0.0, metadata={"help": "dropout on the adapter branch"})
    init: str = field(default="default", metadata={"help": "'default' or 'near_identity'"})
    hidden_size: int | None = field(default=None, metadata={"help": "width of the target layers' output"})
    target_modules: list[str] | str | None = field(
        default=None, metadata={"help": "encoder layers to adapt (regex or names); default: all encoder layers"}
    )
    target_layers: list[int] | None = field(default=None, metadata={"help": "layer indices to keep"})
    exclude_modules: list[str] | str | None = field(default=None, metadata={"help": "modules not to adapt"})
    modules_to_save: list[str] | None = field(
        default=None, metadata={"help": "other modules to train and save, e.g. the CTC head"}
    )
    fusion_of: list[str] | None = field(default=None, metadata={"help": "fuse these adapters (SimAdapter)"})
    fusion_temperature: float = field(default=1.0, metadata={"help": "fusion temperature tau"})
    fusion_include_self: bool = field(default=False, metadata={"help": "add the layer output as an entry"})
    fusion_residual: str = field(default="ffn_input", metadata={"help": "'ffn_input', 'query' or 'none'"})
    fusion_reg_weight: float = field(default=0.01, metadata={"help": "weight of the W_V regulariser"})

    @classmethod
    def from_pretrained(cls, *args, **kwargs) -> SpeechAdapterConfig:  # type: ignore[override]
        """peft's loader, marking the config as read from a saved adapter: its weights are loaded next, and the
        tuner discards the adapter again if they do not fit (see ``SpeechAdapterModel``)."""
        config = super().from_pretrained(*args, **kwargs)
        config._adaptspeech_from_file = True
        return config

    def __post_init__(self) -> None:
        super().__post_init__()
        self.peft_type = SpeechPeftType.SPEECH_ADAPTER
        self.bottleneck_settings()  # validates the adapter settings with the library's own checks
        if self.fusion_of is not None:
            self.fusion_of = list(self.fusion_of)
            self.fusion_settings()
        if self.hidden_size is not None and self.hidden_size < 1:
            raise ValueError(f"SpeechAdapterConfig.hidden_size must be positive, got {self.hidden_size}")
        if self.target_layers is not None:
            bad = [i for i in self.target_layers if not isinstance(i, int) or i < 0]
            if bad:
                raise ValueError(f"SpeechAdapterConfig.target_layers must hold layer indices >= 0, got {bad}")
            self.target_layers = sorted(set(self.target_layers))
        if isinstance(self.target_modules, str):
            try:
                re.compile(self.target_modules)
            except re.error as err:
                raise ValueError(
                    f"SpeechAdapterConfig.target_modules {self.target_modules!r} is not a valid regex: {err}"
                ) from err

    @property
    def is_fusion(self) -> bool:
        return self.fusion_of is not None

    def bottleneck_settings(self) -> BottleneckAdapterConfig:
        """The bottleneck settings as the library's :class:`BottleneckAdapterConfig` (validated)."""
        return BottleneckAdapterConfig(
            bottleneck=self.bottleneck,
            activation=self.activation,
            layer_norm=self.layer_norm,
            dropout=self.dropout,
            init=self.init,
        )

    def fusion_settings(self) -> FusionConfig | None:
        """The fusion settings as the library's :class:`FusionConfig` (validated), or None for an adapter."""
        if self.fusion_of is None:
            return None
        return FusionConfig(
            languages=list(self.fusion_of),
            temperature=self.fusion_temperature,
            reg_weight=self.fusion_reg_weight,
            include_self=self.fusion_include_self,
            residual=self.fusion_residual,
        )
