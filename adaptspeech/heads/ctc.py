"""CTC head: dropout -> Linear(d, V) over encoder frames, with HF's CTC loss conventions, plus optional
per-language output layers (MMS: one vocabulary per language).

Which output layer runs
-----------------------
The shared layer ``lm_head`` (vocabulary ``config.vocab_size``) serves every language without a head of its own.
A language with its own head (``language_heads[lang]``, declared in ``AdaptSpeechConfig.language_heads``) gets it
whenever that language is what the adapters run for:

* one active language: its head (or the shared one);
* fusion active: the head of the fusion's ``target_language`` (or the shared one);
* a call routed by a :class:`~adaptspeech.adapters.routing.RoutingOverride` naming a ``target_language``: that
  language's head (or the shared one), whatever the model's settings;
* several active languages routed per utterance (``lang_ids``): the head of the rows' languages if they all use
  the same head; **a batch mixing languages whose heads differ is refused** (one line naming them): their logits
  have different vocabularies and cannot share one tensor or one CTC loss. Without per-utterance languages (e.g.
  a decoder calling ``model.ctc_head(hidden)`` after ``encode``), the active languages must all use the same head.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from ..adapters.routing import current_override, effective_routing

CTC_REDUCTIONS = ("mean", "sum")
#: the key of the shared output layer in messages and in :meth:`CTCHead.select`'s answer
SHARED = None


class CTCHead(nn.Module):
    """Frame-level character classifier trained with CTC.

    Args:
        hidden_size (`int`): encoder width ``d``.
        vocab_size (`int`): output vocabulary ``V`` of the shared layer, including the blank.
        blank_id (`int`, defaults to 0): the blank symbol (transformers uses the tokenizer's pad id), the same in
            every vocabulary.
        dropout (`float`, defaults to 0.0): dropout before the projection.
        reduction (`str`, defaults to ``"mean"``): ``"mean"`` (per-utterance loss divided by target length, then
            averaged, as ``torch.nn.functional.ctc_loss``) or ``"sum"``.
        zero_infinity (`bool`, defaults to `True`): zero infinite losses of impossible alignments.
        routing (`AdapterRouting`, *optional*): the model's routing settings, read to pick a language's head (see
            the module docstring); without it the shared layer always runs.
    """

    def __init__(
        self,
        hidden_size: int,
        vocab_size: int,
        blank_id: int = 0,
        dropout: float = 0.0,
        reduction: str = "mean",
        zero_infinity: bool = True,
        routing: Any = None,
    ) -> None:
        super().__init__()
        if reduction not in CTC_REDUCTIONS:
            raise ValueError(f"ctc_loss_reduction {reduction!r} unknown; allowed values: {', '.join(CTC_REDUCTIONS)}")
        if not 0 <= blank_id < vocab_size:
            raise ValueError(f"CTC blank id {blank_id} is outside the vocabulary of size {vocab_size}")
        self.hidden_size = hidden_size
        self.blank_id = blank_id
        self.reduction = reduction
        self.zero_infinity = zero_infinity
        self.routing = routing
        self.dropout = nn.Dropout(dropout)
        self.lm_head = nn.Linear(hidden_size, vocab_size)
        self.language_heads = nn.ModuleDict()

    # --- per-language output layers ------------------------------------------------------------------------------
    def add_language_head(self, language: str, vocab_size: int) -> nn.Linear:
        """A new output layer ``Linear(d, vocab_size)`` for ``language`` (PyTorch's default initialisation)."""
        if language in self.language_heads:
            raise ValueError(f"language {language!r} already has a CTC head")
        if not 0 <= self.blank_id < vocab_size:
            raise ValueError(
                f"the CTC head of {language!r} would have {vocab_size} outputs: the blank id {self.blank_id} must "
                "be inside its vocabulary"
            )
        layer = nn.Linear(self.hidden_size, vocab_size)
        self.language_heads[language] = layer
        return layer

    def remove_language_head(self, language: str) -> None:
        del self.language_heads[language]

    def output_layer(self, language: str | None) -> nn.Linear:
        """The output layer of ``language``'s head (``None``: the shared layer)."""
        return self.lm_head if language is SHARED else self.language_heads[language]

    def vocab_size_of(self, language: str | None) -> int:
        """Outputs of the head ``language`` uses (its own, else the shared one)."""
        return self.output_layer(language if language in self.language_heads else SHARED).out_features

    def _describe(self, key: str | None) -> str:
        if key is SHARED:
            return f"the shared head (vocabulary {self.lm_head.out_features})"
        return f"{key}'s head (vocabulary {self.language_heads[key].out_features})"

    def select(self, row_languages: Sequence[str] | None = None) -> str | None:
        """The language whose head runs now (``None``: the shared layer); see the module docstring.

        Args:
            row_languages: the language of each utterance of the batch, or None.

        Raises:
            ValueError: the batch (or, without ``row_languages``, the active languages) would need different heads.
        """
        if self.routing is None or not self.language_heads:
            return SHARED
        override = current_override()
        if override is not None and override.target_language is not None:
            target = override.target_language
            return target if target in self.language_heads else SHARED
        routing = effective_routing(self.routing)
        if routing.fusion_active:
            target = routing.fusion_target
            return target if target in self.language_heads else SHARED
        active = list(routing.active_languages)
        if len(active) <= 1 or row_languages is None:
            languages = active
            where = f"the active languages {active}"
        else:
            languages = [lang for lang in dict.fromkeys(row_languages)]
            where = f"this batch's languages {languages}"
        keys = {lang if lang in self.language_heads and lang in active else SHARED for lang in languages}
        if len(keys) > 1:
            uses = "; ".join(
                f"{lang} uses {self._describe(lang if lang in self.language_heads and lang in active else SHARED)}"
                for lang in languages
            )
            raise ValueError(
                f"{where} use different CTC heads ({uses}): per-language heads cannot be mixed in one batch; batch "
                "by language (or activate one language with set_target_language)"
            )
        return keys.pop() if keys else SHARED

    # --- forward / loss ------------------------------------------------------------------------------------------
    def forward(self, hidden_states: torch.Tensor, row_languages: Sequence[str] | None = None) -> torch.Tensor:
        """[B, T, D] -> logits [B, T, V] of the selected head (:meth:`select`)."""
        return self.output_layer(self.select(row_languages))(self.dropout(hidden_states))

    def loss(self, logits: torch.Tensor, frame_lengths: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """CTC loss.

        Args:
            logits: [B, T, V].
            frame_lengths: valid frames per utterance [B].
            labels: [B, L] padded with -100 (any negative value).

        Raises:
            ValueError: if a label id is outside the vocabulary.
        """
        vocab_size = logits.shape[-1]
        if labels.max() >= vocab_size:
            raise ValueError(f"label id {int(labels.max())} is outside the CTC vocabulary of size {vocab_size}")
        label_mask = labels >= 0
        target_lengths = label_mask.sum(-1)
        flat_targets = labels.masked_select(label_mask)
        log_probs = nn.functional.log_softmax(logits, dim=-1, dtype=torch.float32).transpose(0, 1)
        with torch.backends.cudnn.flags(enabled=False):
            return nn.functional.ctc_loss(
                log_probs,
                flat_targets,
                frame_lengths,
                target_lengths,
                blank=self.blank_id,
                reduction=self.reduction,
                zero_infinity=self.zero_infinity,
            )


def language_vocab_size(tokenizer: Any, language: str) -> tuple[int, bool]:
    """``(size, nested)``: how many ids ``tokenizer`` produces for ``language``, and whether its vocabulary is a
    nested per-language one (transformers' MMS ``Wav2Vec2CTCTokenizer``: ``{lang: {token: id}}``, switched with
    ``set_target_lang``). For a nested vocabulary the size is that language's (max id + 1; ``len(tokenizer)``
    there also counts multi-character tokens left from languages set before); for a flat one ``len(tokenizer)``.

    Raises:
        ValueError: a nested vocabulary without ``language``.
    """
    vocab = getattr(tokenizer, "vocab", None)
    nested = (
        isinstance(vocab, dict)
        and bool(vocab)
        and all(isinstance(v, dict) for v in vocab.values())
        and callable(getattr(tokenizer, "set_target_lang", None))
    )
    if not nested:
        return len(tokenizer), False
    if language not in vocab:
        known = sorted(vocab)
        raise ValueError(
            f"the tokenizer has no vocabulary for {language!r}; it has {len(known)}: "
            f"{', '.join(known[:10])}{' ...' if len(known) > 10 else ''}"
        )
    ids = list(vocab[language].values())
    return (max(ids) + 1 if ids else 0), True


def check_head_fits_vocabulary(head_size: int, vocab_size: int, language: str, tokenizer: Any = None) -> None:
    """Refuse a CTC head whose outputs do not match the vocabulary (transformers #24223: an MMS language's
    ``lm_head`` with another vocabulary fails to load or decodes garbage).

    Raises:
        ValueError: one line naming the head's size, the vocabulary's size and the language.
    """
    if head_size != vocab_size:
        name = type(tokenizer).__name__ if tokenizer is not None else "tokenizer"
        raise ValueError(
            f"the CTC head used for {language!r} has {head_size} outputs but the {name} vocabulary for {language!r} "
            f"has {vocab_size} tokens: load the matching head (load_adapter / add_language_head) or vocabulary"
        )


def chunk_distillation_kl(
    teacher_logits: torch.Tensor, student_logits: torch.Tensor, frame_mask: torch.Tensor
) -> torch.Tensor:
    """The in-place distillation term of dual-mode ASR (Yu et al., "Dual-mode ASR: unify and improve streaming ASR with
    full-context modeling", ICLR 2021): the full-context CTC posteriors ``p_full`` teach the chunked (streaming)
    posteriors ``p_chunk`` of the same weights, frame by frame, at temperature 1::

        KL = 1 / |F| * sum_{(b, t) in F} sum_v p_full[b, t, v] * (log p_full[b, t, v] - log p_chunk[b, t, v])

    over the valid (unpadded) frames ``F``. The teacher is taken as given: pass it detached (computed under
    ``torch.no_grad()``) so that only the chunked forward learns from it.

    Args:
        teacher_logits: full-context CTC logits [B, T, V].
        student_logits: chunked CTC logits [B, T, V].
        frame_mask: [B, T] bool, True on valid encoder frames.

    Returns:
        The mean KL per valid frame (scalar, float32); 0 when no frame is valid.
    """
    log_teacher = nn.functional.log_softmax(teacher_logits, dim=-1, dtype=torch.float32)
    log_student = nn.functional.log_softmax(student_logits, dim=-1, dtype=torch.float32)
    per_frame = (log_teacher.exp() * (log_teacher - log_student)).sum(-1)
    mask = frame_mask.to(per_frame.device, torch.bool)
    return per_frame.masked_select(mask).sum() / mask.sum().clamp(min=1)
