"""A tiny joint CTC/LAS model and a synthetic "tone speech" corpus, for tests, benchmarks and docs.

Nothing here is downloaded: each character of a small alphabet is a distinct pair of sine tones, an
utterance is a sequence of such tones separated by short near-silent gaps, and its features are 80-dim
log-mel frames (25 ms window, 10 ms hop). The model is deliberately small: two stride-2 convolutions
(10 ms -> 40 ms frames, i.e. 25 Hz as the fbank Conformer), one BiLSTM layer, a linear CTC head and a
:class:`~adaptspeech.heads.las.LASDecoder`, trained with ``lambda * CTC + (1 - lambda) * attention``.

This is the LAS counterpart of :mod:`adaptspeech.testing.tiny_models` (and of ``transformers.testing_utils``): it lets a
test or a benchmark build and overfit a joint model in seconds on a CPU. The real joint model is
``AdaptSpeechForJointCTCAttention``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from transformers.audio_utils import mel_filter_bank

from ..heads.las import LASDecoder, LASOutput
from ..heads.las_config import LASConfig
from ..heads.listener import lengths_to_padding_mask

SAMPLE_RATE = 16_000
TONE_ALPHABET = "abcdefgh"
BLANK_ID = 0  # also the LAS pad_id
FRAME_SECONDS = 0.04  # encoder frame length after the 4x subsampling


def tone_vocab_size(alphabet: str = TONE_ALPHABET) -> int:
    """``<blank/pad>`` + the alphabet + ``<sos/eos>``."""
    return len(alphabet) + 2


def encode_text(text: str, alphabet: str = TONE_ALPHABET) -> list[int]:
    """Characters -> ids ``1..len(alphabet)``; refuses characters outside the alphabet."""
    unknown = sorted(set(text) - set(alphabet))
    if unknown:
        raise ValueError(f"text {text!r} has characters {unknown} outside the tone alphabet; allowed: {alphabet}")
    return [alphabet.index(c) + 1 for c in text]


def decode_ids(ids: list[int], alphabet: str = TONE_ALPHABET) -> str:
    """Ids -> characters (ids outside ``1..len(alphabet)`` are dropped)."""
    return "".join(alphabet[i - 1] for i in ids if 1 <= i <= len(alphabet))


def synthesize_tones(text: str, rng: np.random.Generator, alphabet: str = TONE_ALPHABET) -> np.ndarray:
    """A waveform (16 kHz, float32) with one 100-160 ms two-tone burst per character, 20-40 ms gaps."""
    pieces = [np.zeros(int(0.05 * SAMPLE_RATE), dtype=np.float32)]
    for char in text:
        k = alphabet.index(char)
        seconds = rng.uniform(0.10, 0.16)
        t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
        low, high = 300.0 * 1.22**k, 1500.0 * 1.17 ** (len(alphabet) - 1 - k)
        tone = 0.5 * np.sin(2 * np.pi * low * t) + 0.3 * np.sin(2 * np.pi * high * t)
        ramp = np.minimum(1.0, np.minimum(t, seconds - t) / 0.01)
        pieces.append((tone * ramp).astype(np.float32))
        pieces.append(np.zeros(int(rng.uniform(0.02, 0.04) * SAMPLE_RATE), dtype=np.float32))
    pieces.append(np.zeros(int(0.05 * SAMPLE_RATE), dtype=np.float32))
    wave = np.concatenate(pieces)
    return wave + rng.normal(0.0, 0.01, wave.shape).astype(np.float32)


_MEL = torch.from_numpy(mel_filter_bank(201, 80, 20.0, 8000.0, SAMPLE_RATE)).float()  # [201, 80]


def log_mel(wave: np.ndarray) -> torch.Tensor:
    """80-dim log-mel frames ``[frames, 80]`` (25 ms Hann window, 10 ms hop), normalised per utterance."""
    spec = torch.stft(torch.from_numpy(wave), n_fft=400, hop_length=160, win_length=400,
                      window=torch.hann_window(400), return_complex=True).abs().pow(2)  # [201, frames]
    features = torch.log(spec.T @ _MEL + 1e-6)
    return (features - features.mean()) / (features.std() + 1e-5)


@dataclass
class ToneBatch:
    """features ``[B, T, 80]``, feature_lengths ``[B]``, labels ``[B, L]`` (-100 padded), texts."""

    features: torch.Tensor
    feature_lengths: torch.Tensor
    labels: torch.Tensor
    texts: list[str]


def make_tone_batch(texts: list[str], seed: int = 0, alphabet: str = TONE_ALPHABET) -> ToneBatch:
    """Synthesise and featurise ``texts`` (deterministic for a seed)."""
    rng = np.random.default_rng(seed)
    feats = [log_mel(synthesize_tones(text, rng, alphabet)) for text in texts]
    lengths = torch.tensor([f.shape[0] for f in feats])
    features = torch.zeros(len(texts), int(lengths.max()), 80)
    for i, f in enumerate(feats):
        features[i, : f.shape[0]] = f
    ids = [encode_text(text, alphabet) for text in texts]
    labels = torch.full((len(texts), max(len(i) for i in ids)), -100, dtype=torch.long)
    for i, row in enumerate(ids):
        labels[i, : len(row)] = torch.tensor(row)
    return ToneBatch(features, lengths, labels, list(texts))


def random_texts(count: int, min_chars: int, max_chars: int, seed: int = 0,
                 alphabet: str = TONE_ALPHABET) -> list[str]:
    """``count`` random strings over the alphabet."""
    rng = np.random.default_rng(seed)
    return ["".join(rng.choice(list(alphabet), size=int(rng.integers(min_chars, max_chars + 1))))
            for _ in range(count)]


@dataclass
class EncoderOutput:
    """hidden_states ``[B, T', D]``, padding_mask ``[B, T']`` bool, ctc_log_probs ``[B, T', V]``."""

    hidden_states: torch.Tensor
    padding_mask: torch.Tensor
    ctc_log_probs: torch.Tensor


class TinyJointCTCLAS(nn.Module):
    """Conv subsampling + BiLSTM encoder, CTC head and LAS head.

    Args:
        las_config (`LASConfig`): the LAS head; its ``encoder_hidden_size`` is the encoder width
            (``2 * hidden``).
        feature_size (`int`, defaults to 80): input feature width.
        ctc_weight (`float`, defaults to 0.3): lambda of ``lambda * CTC + (1 - lambda) * attention``.
    """

    def __init__(self, las_config: LASConfig, feature_size: int = 80, ctc_weight: float = 0.3) -> None:
        super().__init__()
        width = las_config.encoder_hidden_size
        if width % 2:
            raise ValueError(f"LASConfig.encoder_hidden_size={width}: the BiLSTM encoder needs an even width")
        self.ctc_weight = ctc_weight
        self.conv1 = nn.Conv1d(feature_size, width, 3, stride=2, padding=1)
        self.conv2 = nn.Conv1d(width, width, 3, stride=2, padding=1)
        self.lstm = nn.LSTM(width, width // 2, batch_first=True, bidirectional=True)
        self.ctc_head = nn.Linear(width, las_config.vocab_size)
        self.las = LASDecoder(las_config)

    def encode(self, features: torch.Tensor, feature_lengths: torch.Tensor) -> EncoderOutput:
        """``[B, T, 80]`` features -> 25 Hz encoder output, its mask and CTC log-probabilities."""
        lengths = feature_lengths.to(features.device)
        x = features.masked_fill(~lengths_to_padding_mask(lengths, features.shape[1])[..., None], 0.0)
        x = x.transpose(1, 2)
        for conv in (self.conv1, self.conv2):
            x = F.gelu(conv(x))
            lengths = (lengths + 1) // 2
            x = x.masked_fill(~lengths_to_padding_mask(lengths, x.shape[2])[:, None, :], 0.0)
        packed = nn.utils.rnn.pack_padded_sequence(x.transpose(1, 2), lengths.cpu(), batch_first=True,
                                                   enforce_sorted=False)
        hidden, _ = self.lstm(packed)
        hidden, _ = nn.utils.rnn.pad_packed_sequence(hidden, batch_first=True, total_length=x.shape[2])
        mask = lengths_to_padding_mask(lengths, hidden.shape[1])
        return EncoderOutput(hidden, mask, torch.log_softmax(self.ctc_head(hidden), dim=-1))

    def forward(self, features: torch.Tensor, feature_lengths: torch.Tensor, labels: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, LASOutput]:
        """Joint loss; returns ``(loss, loss_ctc, las_output)``."""
        encoded = self.encode(features, feature_lengths)
        las_output = self.las(encoded.hidden_states, encoded.padding_mask, labels)
        real = labels != -100
        loss_ctc = F.ctc_loss(encoded.ctc_log_probs.transpose(0, 1), labels[real], encoded.padding_mask.sum(1),
                              real.sum(1), blank=BLANK_ID, zero_infinity=True)
        loss = self.ctc_weight * loss_ctc + (1.0 - self.ctc_weight) * las_output.loss
        return loss, loss_ctc, las_output


def tiny_las_config(**overrides: object) -> LASConfig:
    """A LAS config sized for the tone corpus (one pBLSTM layer; override anything)."""
    settings = dict(vocab_size=tone_vocab_size(), encoder_hidden_size=96, listener_layers=1, listener_hidden=48,
                    decoder_hidden=96, embedding_dim=32, attention_dim=64, max_target_length=64)
    settings.update(overrides)
    return LASConfig(**settings)


def train_tiny_joint(model: TinyJointCTCLAS, batches: ToneBatch | list[ToneBatch], steps: int,
                     lr: float = 3e-3) -> list[float]:
    """Adam over ``steps`` updates, cycling through ``batches``; returns the loss of every step."""
    batches = [batches] if isinstance(batches, ToneBatch) else batches
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    losses = []
    for step in range(steps):
        batch = batches[step % len(batches)]
        loss, _, _ = model(batch.features, batch.feature_lengths, batch.labels)
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    return losses


def edit_distance(reference: str, hypothesis: str) -> int:
    """Levenshtein distance between two strings."""
    row = list(range(len(hypothesis) + 1))
    for i, ref_char in enumerate(reference, 1):
        previous, row[0] = row[0], i
        for j, hyp_char in enumerate(hypothesis, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (ref_char != hyp_char))
    return row[-1]


def character_error_rate(references: list[str], hypotheses: list[str]) -> float:
    """Total edits / total reference characters."""
    edits = sum(edit_distance(r, h) for r, h in zip(references, hypotheses))
    return edits / max(1, sum(len(r) for r in references))
