"""The Listen-Attend-Spell head: listener (pBLSTM) + speller (LSTM decoder with attention).

Seed (``004``)::

    s_i = RNN(s_(i-1), y_(i-1), c_(i-1))
    c_i = AttentionContext(s_i, h)
    P(y_i | x, y_<i) = CharacterDistribution(s_i, c_i)

RNN is a stack of ``decoder_layers`` LSTM cells reading ``[embed(y_(i-1)); c_(i-1)]``; s_i is the top cell's
output. CharacterDistribution is an MLP ``Linear(A + B, A) -> tanh -> Linear(A, V)`` on ``[s_i; c_i]``
(the LAS paper's "MLP with softmax outputs"). Initial values: zero LSTM states, ``c_0 = 0``, and
``alpha_0`` uniform over the real frames (only location-aware attention reads it).

Training uses teacher forcing over ``<s> y_1 .. y_L`` predicting ``y_1 .. y_L </s>``; decoding uses the
step API (:meth:`LASDecoder.init_state`, :meth:`LASDecoder.step`, :meth:`LASDecoder.select_state`) from
:mod:`adaptspeech.decoding`. Both go through the same ``_step`` so they cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from transformers.utils import ModelOutput

from .las_attention import AttentionMemory, build_las_attention
from .las_config import LASConfig
from .listener import PyramidalBLSTM, lengths_to_padding_mask, padding_mask_to_lengths

IGNORE_INDEX = -100


@dataclass
class LASOutput(ModelOutput):
    """Output of :meth:`LASDecoder.forward`.

    Args:
        loss (`torch.FloatTensor`): mean (label-smoothed) cross-entropy over the L_b + 1 targets of every
            utterance (labels and ``</s>``).
        logits (`torch.FloatTensor` of shape ``[B, L+1, V]``): unnormalised scores of every step.
        attention_weights (`torch.FloatTensor` of shape ``[B, L+1, T']``): alpha_i over listener frames.
        listener_padding_mask (`torch.BoolTensor` of shape ``[B, T']``): real listener frames.
        targets (`torch.LongTensor` of shape ``[B, L+1]``): labels followed by ``</s>``, -100 after.
    """

    loss: torch.FloatTensor | None = None
    logits: torch.FloatTensor | None = None
    attention_weights: torch.FloatTensor | None = None
    listener_padding_mask: torch.BoolTensor | None = None
    targets: torch.LongTensor | None = None


@dataclass
class LASState:
    """Decoder state for N rows (utterances or beam hypotheses); every tensor has N rows.

    Args:
        memory: precomputed attention keys / values / mask over the listener frames.
        hidden: per LSTM layer, ``(h, c)`` each ``[N, decoder_hidden]``.
        context: ``[N, B]`` c_(i-1).
        attention_weights: ``[N, T']`` alpha_(i-1).
    """

    memory: AttentionMemory
    hidden: list[tuple[torch.Tensor, torch.Tensor]]
    context: torch.Tensor
    attention_weights: torch.Tensor


class CharacterDistribution(nn.Module):
    """``[s_i; c_i] -> logits [N, V]`` through one tanh hidden layer of width ``decoder_hidden``."""

    def __init__(self, config: LASConfig, memory_size: int) -> None:
        super().__init__()
        self.hidden = nn.Linear(config.decoder_hidden + memory_size, config.decoder_hidden)
        self.dropout = nn.Dropout(config.dropout)
        self.output = nn.Linear(config.decoder_hidden, config.vocab_size)

    def forward(self, state: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        hidden = torch.tanh(self.hidden(torch.cat([state, context], dim=-1)))
        return self.output(self.dropout(hidden))


class LASDecoder(nn.Module):
    """Listener + attention speller over an encoder's output.

    Args:
        config (`LASConfig`): all sizes and options.
    """

    def __init__(self, config: LASConfig) -> None:
        super().__init__()
        self.config = config
        self.listener = PyramidalBLSTM(config)
        memory_size = self.listener.output_size
        self.embedding = nn.Embedding(config.vocab_size, config.embedding_dim)
        self.cells = nn.ModuleList(
            nn.LSTMCell(config.embedding_dim + memory_size if i == 0 else config.decoder_hidden,
                        config.decoder_hidden)
            for i in range(config.decoder_layers)
        )
        self.attention = build_las_attention(config, memory_size)
        self.character_distribution = CharacterDistribution(config, memory_size)
        self.dropout = nn.Dropout(config.dropout)

    # ------------------------------------------------------------------ inputs
    def _check_encoder(self, hidden_states: torch.Tensor, padding_mask: torch.Tensor | None) -> torch.Tensor:
        if hidden_states.dim() != 3 or hidden_states.shape[-1] != self.config.encoder_hidden_size:
            raise ValueError(
                f"encoder_hidden_states must be [batch, frames, {self.config.encoder_hidden_size}] "
                f"(LASConfig.encoder_hidden_size); got shape {tuple(hidden_states.shape)}"
            )
        if padding_mask is None:
            return torch.ones(hidden_states.shape[:2], dtype=torch.bool, device=hidden_states.device)
        if padding_mask.shape != hidden_states.shape[:2]:
            raise ValueError(f"encoder_padding_mask must be [batch, frames] = "
                             f"{tuple(hidden_states.shape[:2])}; got {tuple(padding_mask.shape)}")
        padding_mask_to_lengths(padding_mask)  # validates right padding
        return padding_mask.bool()

    def build_targets(self, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher-forcing inputs and targets from labels padded with -100.

        Args:
            labels: ``[B, L]`` token ids, right-padded with -100.

        Returns:
            inputs ``[B, L+1]`` = ``<s> y_1 .. y_L`` (``pad_id`` after the end) and targets ``[B, L+1]`` =
            ``y_1 .. y_L </s>`` (-100 after the end).
        """
        config = self.config
        if labels.dim() != 2:
            raise ValueError(f"labels must be [batch, length]; got shape {tuple(labels.shape)}")
        real = labels != IGNORE_INDEX
        lengths = real.sum(dim=1)
        bad = (real != lengths_to_padding_mask(lengths, labels.shape[1])).any(dim=1)
        if bad.any():
            row = int(bad.nonzero()[0])
            raise ValueError(f"labels row {row} must be right-padded with -100; got {labels[row].tolist()}")
        out_of_range = real & ((labels < 0) | (labels >= config.vocab_size) | (labels == config.eos_id)
                               | (labels == config.sos_id))
        if out_of_range.any():
            row, col = (int(i) for i in out_of_range.nonzero()[0])
            raise ValueError(
                f"labels row {row} position {col} holds {int(labels[row, col])}; allowed values: ids in "
                f"[0, {config.vocab_size - 1}] other than sos_id={config.sos_id} / eos_id={config.eos_id}, "
                f"or -100 for padding"
            )
        longest = int(lengths.max()) if lengths.numel() else 0
        if longest > config.max_target_length:
            raise ValueError(f"labels of length {longest} exceed LASConfig.max_target_length="
                             f"{config.max_target_length}")
        batch = labels.shape[0]
        body = labels.masked_fill(~real, config.pad_id)
        sos = torch.full((batch, 1), config.sos_id, dtype=labels.dtype, device=labels.device)
        inputs = torch.cat([sos, body], dim=1)
        targets = torch.cat([labels.masked_fill(~real, IGNORE_INDEX),
                             torch.full_like(sos, IGNORE_INDEX)], dim=1)
        targets[torch.arange(batch, device=labels.device), lengths] = config.eos_id
        return inputs, targets

    # ------------------------------------------------------------------ step API
    def init_state(
        self, encoder_hidden_states: torch.Tensor, encoder_padding_mask: torch.Tensor | None = None
    ) -> LASState:
        """Run the listener and set up step 0 for every utterance.

        Args:
            encoder_hidden_states: ``[B, T, encoder_hidden_size]``.
            encoder_padding_mask: ``[B, T]`` True on real frames (right padding); None = all real.
        """
        mask = self._check_encoder(encoder_hidden_states, encoder_padding_mask)
        listened = self.listener(encoder_hidden_states, mask)
        memory = self.attention.prepare(listened.hidden_states, listened.padding_mask)
        rows = encoder_hidden_states.shape[0]
        zeros = listened.hidden_states.new_zeros(rows, self.config.decoder_hidden)
        uniform = listened.padding_mask.float()
        uniform = uniform / uniform.sum(dim=1, keepdim=True)
        return LASState(
            memory=memory,
            hidden=[(zeros, zeros) for _ in self.cells],
            context=listened.hidden_states.new_zeros(rows, listened.hidden_states.shape[-1]),
            attention_weights=uniform.to(listened.hidden_states.dtype),
        )

    def _step(self, prev_token_ids: torch.Tensor, state: LASState) -> tuple[torch.Tensor, LASState]:
        """One speller step: logits ``[N, V]`` of y_i and the new state."""
        layer_input = torch.cat([self.dropout(self.embedding(prev_token_ids)), state.context], dim=-1)
        hidden = []
        for index, cell in enumerate(self.cells):
            h, c = cell(layer_input, state.hidden[index])
            hidden.append((h, c))
            layer_input = self.dropout(h)
        s_i = hidden[-1][0]
        context, weights = self.attention(s_i, state.memory, state.attention_weights)
        logits = self.character_distribution(s_i, context)
        return logits, LASState(state.memory, hidden, context, weights)

    def step(self, prev_token_ids: torch.Tensor, state: LASState) -> tuple[torch.Tensor, LASState]:
        """Log-probabilities of the next token.

        Args:
            prev_token_ids: ``[N]`` y_(i-1) (``sos_id`` at the first step).
            state: from :meth:`init_state`, :meth:`step` or :meth:`select_state`.

        Returns:
            log_probs ``[N, V]`` and the new state.
        """
        logits, state = self._step(prev_token_ids, state)
        return torch.log_softmax(logits, dim=-1), state

    @staticmethod
    def select_state(state: LASState, indices: torch.Tensor) -> LASState:
        """Rows ``indices`` ``[N']`` of a state (beam re-indexing / replication)."""
        return LASState(
            memory=state.memory.select(indices),
            hidden=[(h.index_select(0, indices), c.index_select(0, indices)) for h, c in state.hidden],
            context=state.context.index_select(0, indices),
            attention_weights=state.attention_weights.index_select(0, indices),
        )

    # ------------------------------------------------------------------ training
    def forward(
        self,
        encoder_hidden_states: torch.Tensor,
        encoder_padding_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> LASOutput:
        """Teacher-forced pass over ``<s> + labels``.

        Args:
            encoder_hidden_states: ``[B, T, encoder_hidden_size]``.
            encoder_padding_mask: ``[B, T]`` True on real frames; None = all real.
            labels: ``[B, L]`` ids padded with -100 (no ``<s>`` / ``</s>``: they are added here).

        Returns:
            `LASOutput` with loss, logits ``[B, L+1, V]`` and attention weights ``[B, L+1, T']``. In training
            mode with ``scheduled_sampling`` p > 0, each utterance's input at step i is, with probability p,
            the argmax of its step i-1 output instead of the reference label.
        """
        if labels is None:
            raise ValueError("LASDecoder.forward needs labels for teacher forcing; for inference use "
                             "init_state/step or adaptspeech.decoding")
        inputs, targets = self.build_targets(labels.to(encoder_hidden_states.device))
        state = self.init_state(encoder_hidden_states, encoder_padding_mask)
        sampling = self.config.scheduled_sampling if self.training else 0.0
        all_logits, all_weights = [], []
        prev = inputs[:, 0]
        for i in range(inputs.shape[1]):
            if i > 0:
                prev = inputs[:, i]
                if sampling > 0.0:
                    use_model = torch.rand(prev.shape, device=prev.device) < sampling
                    prev = torch.where(use_model, all_logits[-1].detach().argmax(dim=-1), prev)
            logits, state = self._step(prev, state)
            all_logits.append(logits)
            all_weights.append(state.attention_weights)
        logits = torch.stack(all_logits, dim=1)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                               ignore_index=IGNORE_INDEX, label_smoothing=self.config.label_smoothing)
        return LASOutput(
            loss=loss,
            logits=logits,
            attention_weights=torch.stack(all_weights, dim=1),
            listener_padding_mask=state.memory.padding_mask,
            targets=targets,
        )
