# SPDX-License-Identifier: Apache-2.0
"""A small decoder-only transformer (RMSNorm, learned positions, GELU MLP, untied embeddings by
default; about 3.2M parameters at the default size) that runs deterministically on the CPU, so a
trainer and a follower computing the same forward on the same BF16 weights get the same bits."""
import dataclasses
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclasses.dataclass
class Config:
    vocab_size: int = 16
    max_len: int = 16
    d_model: int = 256
    n_layers: int = 4
    n_heads: int = 4
    d_ff: int = 1024
    tie_embeddings: bool = False
    norm_eps: float = 1e-6
    init_std: float = 0.02


TINY = Config(d_model=64, n_layers=2, n_heads=2, d_ff=256)   # smoke tests


def set_deterministic(threads=1):
    """One thread and deterministic kernels: the same forward on the same weights gives the
    same bits in every process (the follower's logits check depends on it)."""
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)


class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.out = nn.Linear(cfg.d_model, cfg.d_model, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        h = self.n_heads
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (z.view(b, t, h, d // h).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // h))
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        att = att.masked_fill(causal, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        return self.out(y)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.norm1 = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.norm2 = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.up = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.down = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class Transformer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.max_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm_f = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.tok_emb.weight
        self._init(cfg)

    def _init(self, cfg):
        # GPT-2 style: N(0, 0.02), residual projections scaled down by depth.
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = cfg.init_std
                if name.endswith("out.weight") or name.endswith("down.weight"):
                    std /= math.sqrt(2 * cfg.n_layers)
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx):
        t = idx.shape[1]
        pos = torch.arange(t, device=idx.device)
        x = self.tok_emb(idx) + self.pos_emb(pos)
        for blk in self.blocks:
            x = blk(x)
        return self.lm_head(self.norm_f(x))


def build_model(config=None, seed=0):
    """A fresh FP32 model, its initial weights fixed by seed."""
    cfg = config or Config()
    torch.manual_seed(seed)
    return Transformer(cfg)


def tensor_kind(name, shape):
    """'embedding' (token/position tables, output head), 'norm' (RMSNorm gains) or 'matrix'."""
    if "emb" in name or name.startswith("lm_head"):
        return "embedding"
    if len(shape) == 1:
        return "norm"
    return "matrix"


def bf16_state(model):
    """The BF16 view of a model's weights (round to nearest even, as any cast does): what the
    trainer publishes and what inference computes with. Contiguous, CPU, name -> tensor."""
    return {k: v.detach().to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}


def inference_model(config, state=None):
    """A model whose parameters are BF16 (as an inference server holds them); loads state if
    given. Its parameters can be updated in place through bf16_params()."""
    m = Transformer(config).to(torch.bfloat16).eval()
    for p in m.parameters():
        p.requires_grad_(False)
    if state is not None:
        m.load_state_dict(state)
    return m


def bf16_params(model):
    """name -> the model's own BF16 parameter tensors (update these in place to reload)."""
    return {k: v for k, v in model.state_dict().items()}


@torch.no_grad()
def inference_logits(model, tokens):
    """Logits of a BF16 inference model (no autocast: every op in BF16), deterministic."""
    return model(tokens)
