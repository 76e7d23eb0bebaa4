"""transformers' ``pipeline("automatic-speech-recognition", model=folder)`` for every adaptspeech model.

What the stock pipeline needs and adaptspeech provides elsewhere: a feature extractor for fbank models
(:mod:`adaptspeech.feature_extraction`), ``config.inputs_to_logits_ratio`` for chunking and timestamps and
``from_pretrained(target_lang=...)`` (:mod:`adaptspeech.inference.model_mixin`), ``generate()`` for attention models
(:mod:`adaptspeech.generation`). Two things are set here, when this module is imported (``import
adaptspeech.pipeline``, or taking any model name from the package, ``from adaptspeech import AdaptSpeechForCTC``):

- ``AdaptSpeechForJointCTCAttention`` is listed among transformers' speech seq2seq classes, which is how the pipeline
  recognises a model that it must run with ``generate()`` (the ``AutoModelForSpeechSeq2Seq`` registration alone only
  lets it load the model).
- The task's pipeline class becomes :class:`AdaptSpeechRecognitionPipeline`, which behaves exactly as transformers'
  for every other model. For an adaptspeech attention model it decodes ``generate()``'s label sequences without the
  CTC tokenizer's merging of repeated characters (the tokenizer saved with adaptspeech models is a
  ``Wav2Vec2CTCTokenizer``, whose default decoding would turn "hello" into "helo").
  For every adaptspeech model it reads audio the way ``adaptspeech transcribe`` does, without ffmpeg or
  torchaudio: a file path (or the file's bytes) is decoded with soundfile, mixed to mono and resampled with soxr
  (:func:`~adaptspeech.data.load_audio`), an array at another rate (``{"raw": array, "sampling_rate": 8000}``) is
  resampled with soxr. An input with nothing to decode (no samples, non-finite samples, digital silence or a
  peak below ``prepare``'s silence threshold, fewer samples than one output frame needs:
  :func:`~adaptspeech.inference.long_form.recording.nothing_to_decode`, the rule of ``transcribe`` and ``prepare``)
  gives ``{"text": "", "skipped": reason}`` (``"chunks": []`` with timestamps) and a warning on the
  ``adaptspeech.pipeline`` logger, without reaching the model; the other inputs of the call are decoded as alone.

Which path a folder takes: the pipeline tries its model classes in turn; :func:`register_pipeline` puts
:class:`AttentionFolderLoader` first, so a folder whose head has an attention decoder (``head="las"`` or
``"ctc_las"``) loads as ``AdaptSpeechForJointCTCAttention`` and runs ``generate()`` (a ``ctc_las`` model: joint
CTC/attention beam search, CTC weight 0.3 unless its generation config says otherwise). Without it transformers'
first class, ``AutoModelForCTC``, would load a ``ctc_las`` folder as a CTC model and silently drop the attention
decoder. A ``ctc_las`` folder whose processor holds an n-gram LM (``adaptspeech lm tune --save``) runs CTC with
that LM, the decoding the saved processor asks for. ``head="ctc"`` folders run as CTC models (CTC greedy;
chunking, timestamps and an n-gram LM apply). For CTC decoding of a ``ctc_las`` folder pass the model:
``pipeline(task, model=AdaptSpeechForCTC.from_pretrained(folder), tokenizer=folder, feature_extractor=folder)``.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterator
from typing import Any

import numpy as np
import soxr
import torch
from transformers import AutoConfig, FeatureExtractionMixin
from transformers.models.auto.modeling_auto import MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES
from transformers.pipelines import PIPELINE_REGISTRY
from transformers.pipelines.automatic_speech_recognition import AutomaticSpeechRecognitionPipeline

from .data.audio import EMPTY, NAN, BadClipError, load_audio
from .generation import AdaptSpeechGenerationMixin
from .heads import get_head
from .inference.language_id.routing import batch_routed_by_lid, routed_tokenizer
from .inference.long_form.recording import nothing_to_decode, shortest_input
from .inference.long_form.stitching import decoded_text, specials_as_blank
from .modeling import AdaptSpeechForJointCTCAttention, AdaptSpeechPreTrainedModel

logger = logging.getLogger(__name__)

TASK = "automatic-speech-recognition"
SKIPPED = "skipped"
"""The key of a result with nothing to decode (its value says why); also carried by the preprocessed items."""
LANGUAGE_IDS, LANGUAGE_LOG_PROBS = "language_ids", "language_log_probs"
"""The keys of a routed batch's languages (``target_lang="auto"``), popped by the postprocessing."""
_STOCK_IMPL = f"{AutomaticSpeechRecognitionPipeline.__module__}.{AutomaticSpeechRecognitionPipeline.__name__}"
"""How transformers names the task's class in its table (a dotted path, imported when a pipeline is built)."""


class _TextTokenizer:
    """A view of a CTC tokenizer whose ``decode`` writes the text ``transcribe`` writes
    (:func:`~adaptspeech.inference.long_form.stitching.decoded_text`: special tokens dropped, where transformers'
    pipeline keeps them for CTC models), of CTC frame labels (``group_tokens=True``) or of label sequences (``False``:
    no merging of repeated tokens, which only CTC frame labels need); with character offsets the special tokens are
    dropped too."""

    def __init__(self, tokenizer: Any, group_tokens: bool) -> None:
        self._tokenizer = tokenizer
        self._group_tokens = group_tokens

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tokenizer, name)

    def __len__(self) -> int:
        return len(self._tokenizer)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._tokenizer(*args, **kwargs)

    def decode(self, token_ids: Any, **kwargs: Any) -> Any:
        group = kwargs.pop("group_tokens", self._group_tokens)
        if kwargs.get("output_char_offsets") or kwargs.get("output_word_offsets"):
            if group:  # as decoded_text: merged with the blanks, which skip_special_tokens would drop first
                token_ids = specials_as_blank(token_ids, self._tokenizer)
                kwargs["skip_special_tokens"] = False
            return self._tokenizer.decode(token_ids, group_tokens=group, **kwargs)
        return decoded_text(self._tokenizer, token_ids, group)

    def batch_decode(self, sequences: Any, **kwargs: Any) -> Any:
        return [self.decode(ids, **kwargs) for ids in sequences]


class AdaptSpeechRecognitionPipeline(AutomaticSpeechRecognitionPipeline):
    """transformers' ``AutomaticSpeechRecognitionPipeline``; for adaptspeech attention models (``generate()``) the
    tokenizer decodes label sequences (see the module docstring). Any other model runs exactly as in transformers."""

    def __init__(self, model: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(model, *args, **kwargs)
        if self.tokenizer is None:
            return
        if self.type == "seq2seq" and isinstance(self.model, AdaptSpeechGenerationMixin):
            self.tokenizer = _TextTokenizer(self.tokenizer, group_tokens=False)
        elif self.type == "ctc" and isinstance(self.model, AdaptSpeechPreTrainedModel):
            self.tokenizer = _TextTokenizer(self.tokenizer, group_tokens=True)

    def preprocess(self, inputs: Any, chunk_length_s: float = 0, stride_length_s: Any = None) -> Iterator[dict]:
        """transformers' preprocessing; for an adaptspeech model the audio is read with adaptspeech's reader first
        and an input with nothing to decode is replaced by a placeholder marked with the reason (see the module
        docstring)."""
        if not isinstance(self.model, AdaptSpeechPreTrainedModel):
            yield from super().preprocess(inputs, chunk_length_s=chunk_length_s, stride_length_s=stride_length_s)
            return
        name = f"{inputs}: " if isinstance(inputs, str) else ""
        inputs, waveform, reason = self._read_audio(inputs)
        if waveform is not None and reason is None:
            reason = nothing_to_decode(self.model, waveform)
        if reason is not None:
            logger.warning("%sno text: %s", name, reason)
            rate = self.feature_extractor.sampling_rate
            inputs = {"raw": np.zeros(shortest_input(self.model), np.float32), "sampling_rate": rate}
        for item in super().preprocess(inputs, chunk_length_s=chunk_length_s, stride_length_s=stride_length_s):
            yield {**item, SKIPPED: reason or ""}

    def _read_audio(self, inputs: Any) -> tuple[Any, np.ndarray | None, str | None]:
        """``(inputs for transformers' preprocessing, the mono waveform at the model's rate or None, a reason for no
        text or None)``: a local file path or encoded bytes decoded by :func:`~adaptspeech.data.load_audio`, an array
        (or ``{"raw" | "array": array, "sampling_rate": rate}``) mixed to mono and resampled with soxr; anything else
        (a URL, torchcodec's decoder) is left to transformers."""
        rate = int(self.feature_extractor.sampling_rate)
        if isinstance(inputs, (str, bytes)):
            if isinstance(inputs, str) and inputs.startswith(("http://", "https://")):
                return inputs, None, None
            data = inputs if isinstance(inputs, bytes) else None
            try:
                waveform = load_audio("<bytes>" if data is not None else inputs, rate, data=data,
                                      silence_threshold=0.0)
            except BadClipError as err:
                if err.reason == EMPTY:
                    return inputs, None, "no samples"
                if err.reason == NAN:
                    return inputs, None, "non-finite samples (NaN or infinity)"
                raise
            return {"raw": waveform, "sampling_rate": rate}, waveform, None
        if isinstance(inputs, dict) and "sampling_rate" in inputs and ("raw" in inputs or "array" in inputs):
            inputs = dict(inputs)
            array = inputs.pop("raw") if "raw" in inputs else inputs.pop("array")
            inputs.pop("path", None)
            waveform = _mono(array)
            if waveform is None:
                return {"raw": array, **inputs}, None, None  # transformers names the layout it refuses
            in_rate = int(inputs.pop("sampling_rate"))
            if in_rate != rate and waveform.size and np.isfinite(waveform).all():
                stride = inputs.get("stride")
                if stride is not None:
                    inputs["stride"] = tuple(round(s * rate / in_rate) for s in stride)
                waveform = soxr.resample(waveform, in_rate, rate, quality="HQ").astype(np.float32)
            return {"raw": waveform, "sampling_rate": rate, **inputs}, waveform, None
        if isinstance(inputs, (np.ndarray, torch.Tensor)):
            waveform = _mono(inputs)
            return (inputs, None, None) if waveform is None else (waveform, waveform, None)
        return inputs, None, None

    def postprocess(self, model_outputs: list[dict[str, Any]], *args: Any, **kwargs: Any) -> dict[str, Any]:
        """transformers' postprocessing; an input with nothing to decode gets ``{"text": "", "skipped": reason}``; with
        ``target_lang="auto"`` the result names the language (of its first chunk) and its probability."""
        reasons = [output.pop(SKIPPED, "") for output in model_outputs]
        routed = [(output.pop(LANGUAGE_IDS, None), output.pop(LANGUAGE_LOG_PROBS, None)) for output in model_outputs]
        language = None
        if routed and routed[0][0] is not None:
            language = self.model.config.lid_languages[int(routed[0][0].reshape(-1)[0])]
        result = self._routed_view(language).postprocess_stock(model_outputs, *args, **kwargs)
        if language is not None:
            log_probs = routed[0][1]
            result["language"] = language
            result["language_probability"] = round(float(log_probs.reshape(-1)[0].exp()), 6)
        reason = next((r for r in reasons if r), None)
        if reason:
            result["text"] = ""
            if "chunks" in result:
                result["chunks"] = []
            result[SKIPPED] = reason
        return result

    def postprocess_stock(self, model_outputs: list[dict[str, Any]], *args: Any, **kwargs: Any) -> dict[str, Any]:
        """transformers' own postprocessing (decoding with ``self.tokenizer``)."""
        return super().postprocess(model_outputs, *args, **kwargs)

    def _routed_view(self, language: str | None) -> AdaptSpeechRecognitionPipeline:
        """This pipeline, or (a per-language MMS vocabulary, ``target_lang="auto"``) a shallow copy of it whose
        tokenizer reads ``language``'s vocabulary: the shared tokenizer is never switched per call."""
        if language is None or self.tokenizer is None:
            return self
        tokenizer = routed_tokenizer(self.model, language, self.tokenizer)
        if tokenizer is self.tokenizer:
            return self
        view = copy.copy(self)
        view.tokenizer = tokenizer
        return view

    def _forward(self, model_inputs: dict[str, Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        """transformers' forward; for an adaptspeech CTC model, padded output frames of a batch read as blanks (the
        stock pipeline decodes them as text when it batches utterances of different lengths) and the n-gram decoder
        gets log-probabilities (log-softmax of the logits), the scale its ``alpha`` and ``beta`` are tuned on."""
        mask = model_inputs.get("attention_mask")
        adaptspeech_ctc = self.type in ("ctc", "ctc_with_lm") and isinstance(self.model, AdaptSpeechPreTrainedModel)
        if getattr(self.model, "auto_language", False):
            inputs = model_inputs[self.model.main_input_name]
            with torch.no_grad(), batch_routed_by_lid(self.model, inputs.to(self.model.device),
                                                      None if mask is None else mask.to(self.model.device),
                                                      self.tokenizer) as extras:
                out = super()._forward(model_inputs, *args, **kwargs)
            out.update({LANGUAGE_IDS: extras["language_ids"], LANGUAGE_LOG_PROBS: extras["language_log_probs"]})
        else:
            out = super()._forward(model_inputs, *args, **kwargs)
        if not adaptspeech_ctc:
            return out
        key = "logits" if self.type == "ctc_with_lm" else "tokens"
        values = out[key]
        if key == "logits":
            values = values.float().log_softmax(-1)
        if mask is not None:
            lengths = torch.as_tensor(self.model._get_feat_extract_output_lengths(mask.sum(-1))).to(values.device)
            padded = torch.arange(values.shape[1], device=values.device)[None, :] >= lengths[:, None]
            blank = self.model.config.pad_token_id
            if key == "tokens":
                values = values.masked_fill(padded, blank)
            else:
                frame = torch.full_like(values[0, 0], -1e4)
                frame[blank] = 0.0
                values = torch.where(padded[..., None], frame, values)
        out[key] = values
        return out


def _mono(array: Any) -> np.ndarray | None:
    """A float32 ``[S]`` waveform from ``[S]`` or ``[channels, S]`` (1 or 2 channels, averaged), as transformers'
    pipeline reads arrays; ``None`` for another layout."""
    array = np.asarray(array.detach().cpu().numpy() if isinstance(array, torch.Tensor) else array, dtype=np.float32)
    if array.ndim == 1:
        return array
    if array.ndim == 2 and array.shape[0] in (1, 2):
        return array.mean(axis=0)
    return None


_HUB_KEYS = ("revision", "token", "cache_dir", "local_files_only", "subfolder", "force_download", "proxies")
"""``from_pretrained`` arguments that say where the folder's files are (passed on to read its config)."""


class AttentionFolderLoader:
    """The ASR pipeline's first model class: loads an adaptspeech folder whose head has an attention decoder as
    :class:`~adaptspeech.modeling.AdaptSpeechForJointCTCAttention`; refuses anything else with ``ValueError``, which
    makes transformers' ``load_model`` go on to its stock classes (``AutoModelForCTC`` ...)."""

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: Any, *model_args: Any, **kwargs: Any) -> Any:
        hub = {key: kwargs[key] for key in _HUB_KEYS if key in kwargs}
        config = AutoConfig.from_pretrained(pretrained_model_name_or_path, **hub)
        if config.model_type != AdaptSpeechForJointCTCAttention.config_class.model_type or not get_head(
                config.head).has_las:
            raise ValueError(f"{pretrained_model_name_or_path}: not an adaptspeech model with an attention decoder")
        if get_head(config.head).has_ctc and _saves_an_lm(pretrained_model_name_or_path, hub):
            raise ValueError(f"{pretrained_model_name_or_path}: its processor holds an n-gram LM for CTC decoding")
        return AdaptSpeechForJointCTCAttention.from_pretrained(pretrained_model_name_or_path, *model_args, **kwargs)


def _saves_an_lm(folder: Any, hub: dict[str, Any]) -> bool:
    """Whether the folder's processor is a ``...WithLM`` one (``adaptspeech lm tune --save``), which the pipeline
    reads as a request for CTC + n-gram LM decoding (transformers looks for the name in the feature extractor's
    settings)."""
    try:
        settings, _ = FeatureExtractionMixin.get_feature_extractor_dict(folder, **hub)
    except OSError:
        return False
    return str(settings.get("processor_class") or "").endswith("WithLM")


def register_pipeline() -> None:
    """Make the ASR task use :class:`AdaptSpeechRecognitionPipeline` (unless another subclass of transformers'
    pipeline is already registered for it), load adaptspeech attention folders first as joint models
    (:class:`AttentionFolderLoader`) and list the joint model among the speech seq2seq classes."""
    MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES.setdefault("adaptspeech", "AdaptSpeechForJointCTCAttention")
    task = PIPELINE_REGISTRY.supported_tasks[TASK]
    if task["impl"] in (AutomaticSpeechRecognitionPipeline, _STOCK_IMPL):
        task["impl"] = AdaptSpeechRecognitionPipeline
    if AttentionFolderLoader not in task["pt"]:
        task["pt"] = (AttentionFolderLoader, *task["pt"])


register_pipeline()
