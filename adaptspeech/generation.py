"""``generate()`` for adaptspeech models with an attention (LAS) decoder, backed by the project's beam searches.

transformers' seq2seq ASR pipeline (and any code written for ``AutoModelForSpeechSeq2Seq``) calls
``model.generate(input_features=..., attention_mask=..., num_beams=..., max_new_tokens=...)``. Here that runs the
encoder once and then :func:`~adaptspeech.decoding.joint.joint_beam_search` (a model with a CTC head and a CTC weight
above 0: one-pass joint CTC/attention decoding) or :func:`~adaptspeech.decoding.attention_beam.attention_beam_search`
(CTC weight 0, or no CTC head). Generation settings:

| setting | meaning |
|---|---|
| ``num_beams`` | the beam size (1: greedy, as the searches are exact at beam 1) |
| ``max_new_tokens`` | most output tokens per utterance (``</s>`` not counted); None: ``ceil(encoder frames x 1.0)`` |
| ``length_penalty`` | finished hypotheses ranked by ``log P / (tokens + 1) ** length_penalty`` |
| ``ctc_weight`` | lambda of ``lambda log p_ctc + (1 - lambda) log p_att``; default 0.3 with a CTC head, else 0 |
| ``num_return_sequences`` | hypotheses returned per utterance (at most ``num_beams``) |
| ``return_dict_in_generate`` / ``output_scores`` | return ``sequences`` and ``sequences_scores`` (the ranking score) |

Sampling (``do_sample=True``) and other generation strategies are refused with one line naming the settings that
apply. ``generation_config.ctc_weight`` (saved in ``generation_config.json``) sets the model's default CTC weight.

The sequences follow transformers' seq2seq layout: ``[<s>, y_1 .. y_L, </s>, pad ...]`` ``[B * num_return_sequences,
L_max]``. They are label sequences, not CTC frame labels: decode them with ``tokenizer.batch_decode(sequences,
skip_special_tokens=True, group_tokens=False)`` (a ``Wav2Vec2CTCTokenizer`` would otherwise merge doubled letters);
the pipeline does so for adaptspeech models (:mod:`adaptspeech.pipeline`).
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from transformers import GenerationConfig
from transformers.generation.utils import GenerateBeamEncoderDecoderOutput

from .decoding import attention_beam_search, evaluating, joint_beam_search, model_decoding_inputs

DEFAULT_CTC_WEIGHT = 0.3
"""The joint search's CTC weight when neither the call nor the model's generation config sets one."""

_ACCEPTED = {
    "num_beams", "max_new_tokens", "max_length", "length_penalty", "num_return_sequences", "return_dict_in_generate",
    "output_scores", "do_sample", "pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id",
    "use_cache", "early_stopping",
}
"""Generation settings generate() reads (or, for the last ones, accepts as no-ops: token ids come from the config)."""


class AdaptSpeechGenerationMixin:
    """``generate()`` for :class:`~adaptspeech.modeling.AdaptSpeechForJointCTCAttention` (see the module docstring).

    The name ends in ``GenerationMixin``, which is how ``PreTrainedModel.can_generate()`` recognises a model that
    generates (so the model gets a ``generation_config``, saved as ``generation_config.json``).
    """

    @torch.no_grad()
    def generate(
        self,
        input_values: torch.Tensor | None = None,
        input_features: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        lang_ids: torch.Tensor | None = None,
        generation_config: GenerationConfig | None = None,
        ctc_weight: float | None = None,
        **kwargs: Any,
    ) -> torch.LongTensor | GenerateBeamEncoderDecoderOutput:
        """Decode a batch with the attention decoder (and the CTC head, jointly, when ``ctc_weight > 0``).

        Args:
            input_values: waveforms ``[B, S]`` (wav2vec2 backbones).
            input_features: log-mel filterbanks ``[B, S, F]`` (fbank backbone).
            attention_mask: ``[B, S]``, 1/True on real samples / frames.
            lang_ids: ``[B]`` language index per utterance (models routing several languages).
            generation_config: settings to start from (default the model's ``generation_config``).
            ctc_weight: the CTC weight in [0, 1] (also accepted as ``generation_config.ctc_weight``).
            **kwargs: generation settings (see the module docstring).

        Returns:
            ``[B * num_return_sequences, L_max]`` token ids (``<s> y </s>`` then pad), or with
            ``return_dict_in_generate=True`` a ``GenerateBeamEncoderDecoderOutput`` with ``sequences`` and
            ``sequences_scores`` ``[B * num_return_sequences]`` (with ``output_scores=True``).

        Raises:
            ValueError: an unsupported setting or value (sampling, a CTC weight outside [0, 1] or above 0 without
                a CTC head), or no input.
        """
        settings = self._generation_settings(generation_config, ctc_weight, kwargs)
        inputs = input_values if input_values is not None else input_features
        if inputs is None:
            raise ValueError(f"generate() needs {self.main_input_name} (the backbone's input)")
        options = dict(beam_size=settings["num_beams"], length_penalty=settings["length_penalty"],
                       max_length=settings["max_new_tokens"], nbest=settings["num_return_sequences"])
        with evaluating(self):
            encoded = model_decoding_inputs(self, inputs, attention_mask, lang_ids)
            if settings["ctc_weight"] > 0:
                hypotheses = joint_beam_search(
                    encoded.decoder, encoded.encoder_hidden_states, encoded.encoder_padding_mask,
                    encoded.ctc_log_probs, encoded.ctc_lengths, ctc_weight=settings["ctc_weight"],
                    blank_id=self.config.pad_token_id, eos_id=self.config.eos_token_id,
                    sos_id=self.config.bos_token_id, **options,
                )
            else:
                hypotheses = attention_beam_search(
                    encoded.decoder, encoded.encoder_hidden_states, encoded.encoder_padding_mask, **options
                )
        return self._pack_sequences(hypotheses, settings, inputs.device)

    def _generation_settings(
        self, generation_config: GenerationConfig | None, ctc_weight: float | None, kwargs: dict[str, Any]
    ) -> dict[str, Any]:
        """The checked settings of one call: the call's kwargs over ``generation_config`` over the model's."""
        unknown = sorted(set(kwargs) - _ACCEPTED)
        if unknown:
            raise ValueError(
                f"generate(): unsupported setting(s) {', '.join(unknown)}; adaptspeech's beam searches take: "
                f"{', '.join(sorted(_ACCEPTED | {'ctc_weight', 'generation_config', 'lang_ids'}))}"
            )
        config = copy.deepcopy(generation_config or getattr(self, "generation_config", None) or GenerationConfig())
        config.update(**kwargs)
        if config.do_sample:
            raise ValueError("generate(do_sample=True): adaptspeech decodes by beam search only; use num_beams")
        has_ctc = getattr(self, "ctc_head", None) is not None
        weight = ctc_weight if ctc_weight is not None else getattr(config, "ctc_weight", None)
        if weight is None:
            weight = DEFAULT_CTC_WEIGHT if has_ctc else 0.0
        weight = float(weight)
        if not 0.0 <= weight <= 1.0:
            raise ValueError(f"generate(ctc_weight={weight}): allowed values: numbers in [0, 1]")
        if weight > 0 and not has_ctc:
            raise ValueError(
                f"generate(ctc_weight={weight}): head {self.config.head!r} has no CTC head; use ctc_weight=0"
            )
        max_new = config.max_new_tokens
        if max_new is None and "max_length" in kwargs:
            max_new = max(1, int(kwargs["max_length"]) - 2)  # <s> and </s> count in transformers' max_length
        beams = int(config.num_beams or 1)
        returned = int(config.num_return_sequences or 1)
        if returned > beams:
            raise ValueError(f"generate(num_return_sequences={returned}) needs num_beams >= {returned}, got {beams}")
        return dict(
            num_beams=beams, max_new_tokens=max_new,
            length_penalty=1.0 if config.length_penalty is None else float(config.length_penalty),
            ctc_weight=weight, num_return_sequences=returned,
            return_dict=bool(config.return_dict_in_generate), output_scores=bool(config.output_scores),
        )

    def _pack_sequences(
        self, hypotheses: list[list[Any]], settings: dict[str, Any], device: torch.device
    ) -> torch.LongTensor | GenerateBeamEncoderDecoderOutput:
        """``[<s> y </s> pad ...]`` rows, ``num_return_sequences`` per utterance (repeating the last hypothesis
        when the search finished fewer)."""
        bos, eos, pad = self.config.bos_token_id, self.config.eos_token_id, self.config.pad_token_id
        rows: list[list[int]] = []
        scores: list[float] = []
        for nbest in hypotheses:
            for k in range(settings["num_return_sequences"]):
                hyp = nbest[min(k, len(nbest) - 1)] if nbest else None
                rows.append([bos, *(hyp.tokens if hyp else []), eos])
                scores.append(hyp.score if hyp else float("-inf"))
        width = max(len(row) for row in rows)
        sequences = torch.full((len(rows), width), pad, dtype=torch.long, device=device)
        for i, row in enumerate(rows):
            sequences[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        if not settings["return_dict"]:
            return sequences
        return GenerateBeamEncoderDecoderOutput(
            sequences=sequences,
            sequences_scores=torch.tensor(scores, device=device) if settings["output_scores"] else None,
        )
