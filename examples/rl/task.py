# SPDX-License-Identifier: Apache-2.0
"""Verifiable-reward task for the RL example: 3-digit + 3-digit addition, answer written least
significant digit first (which a small transformer learns far more easily), reward 1 for the exact
answer and 0 otherwise.

Sequence:  BOS a2 a1 a0 + b2 b1 b0 =  s0 s1 s2 s3 EOS   (prompt 9 tokens, answer 5 tokens)
"""
import numpy as np
import torch

DIGITS = "0123456789"
PLUS, EQUALS, PAD, BOS, EOS = 10, 11, 12, 13, 14
VOCAB_SIZE = 16            # 15 used; a round number for the embedding table
N_DIGITS = 3               # digits of each operand
PROMPT_LEN = 1 + N_DIGITS + 1 + N_DIGITS + 1
ANSWER_LEN = N_DIGITS + 2  # N_DIGITS + 1 sum digits, then EOS
SEQ_LEN = PROMPT_LEN + ANSWER_LEN

_CHARS = {PLUS: "+", EQUALS: "=", PAD: "_", BOS: "^", EOS: "$"}


def sample_operands(rng, n):
    """n pairs of operands, uniform in [0, 10**N_DIGITS); rng is a numpy Generator."""
    hi = 10 ** N_DIGITS
    return rng.integers(0, hi, size=n), rng.integers(0, hi, size=n)


def sample_sft_operands(rng, n):
    """The supervised warm-up's mixture: each operand is 0 with probability 0.2, one digit with
    probability 0.2, else uniform. The zero and one-digit cases teach the model to route each
    operand digit to its answer position (a copy); on uniform operands alone this 3.2M model sits
    on a loss plateau for thousands of steps before it finds that routing."""
    a, b = sample_operands(rng, n)
    r = rng.random((2, n))
    small = rng.integers(0, 10, (2, n))
    a = np.where(r[0] < 0.2, 0, np.where(r[0] < 0.4, small[0], a))
    b = np.where(r[1] < 0.2, 0, np.where(r[1] < 0.4, small[1], b))
    return a, b


def _digits_msb(x, width):
    return [(int(x) // 10 ** i) % 10 for i in reversed(range(width))]


def encode_prompt(a, b):
    return [BOS] + _digits_msb(a, N_DIGITS) + [PLUS] + _digits_msb(b, N_DIGITS) + [EQUALS]


def encode_answer(a, b):
    s = int(a) + int(b)
    return list(reversed(_digits_msb(s, N_DIGITS + 1))) + [EOS]


def prompts(a, b):
    """LongTensor [n, PROMPT_LEN]."""
    return torch.tensor([encode_prompt(x, y) for x, y in zip(a, b)], dtype=torch.long)


def full_sequences(a, b):
    """LongTensor [n, SEQ_LEN]: prompt and the correct answer (supervised warm-up data)."""
    return torch.tensor([encode_prompt(x, y) + encode_answer(x, y) for x, y in zip(a, b)],
                        dtype=torch.long)


def answers(a, b):
    """LongTensor [n, ANSWER_LEN]: the correct answer tokens."""
    return torch.tensor([encode_answer(x, y) for x, y in zip(a, b)], dtype=torch.long)


def reward(completions, a, b):
    """FloatTensor [n]: 1.0 where the generated ANSWER_LEN tokens equal the exact answer."""
    return (completions == answers(a, b)).all(dim=1).float()


def decode(tokens):
    return "".join(DIGITS[t] if t < 10 else _CHARS.get(t, "?") for t in tokens.tolist())


def fixed_prompts(n=8, seed=12345):
    """The fixed prompts on which trainer and follower compare logits."""
    a, b = sample_operands(np.random.default_rng(seed), n)
    return full_sequences(a, b)[:, :SEQ_LEN - 1]
