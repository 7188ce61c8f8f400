# SPDX-License-Identifier: Apache-2.0
"""A Llama-shaped model in checkpoint (HF) names, and its tensor-parallel forward over fused qkv / gate_up shards, as a serving engine holds them."""
import torch
import torch.distributed as dist

# Small enough for CPU CI, shaped like the real thing: GQA (fewer KV heads than heads), a gated
# MLP, RMSNorm, untied embeddings.
CONFIG = dict(layers=2, hidden=256, intermediate=512, heads=8, kv_heads=4, vocab=512)


def init_state(seed=0, cfg=CONFIG):
    """FP32 master weights in HF checkpoint names."""
    g = torch.Generator().manual_seed(seed)
    h, i, v = cfg["hidden"], cfg["intermediate"], cfg["vocab"]
    kv = cfg["kv_heads"] * h // cfg["heads"]
    w = lambda *s: torch.randn(*s, generator=g) * 0.02
    sd = {"model.embed_tokens.weight": w(v, h), "model.norm.weight": torch.ones(h), "lm_head.weight": w(v, h)}
    for l in range(cfg["layers"]):
        p = "model.layers.%d." % l
        sd.update({p + "self_attn.q_proj.weight": w(h, h), p + "self_attn.k_proj.weight": w(kv, h),
                   p + "self_attn.v_proj.weight": w(kv, h), p + "self_attn.o_proj.weight": w(h, h),
                   p + "mlp.gate_proj.weight": w(i, h), p + "mlp.up_proj.weight": w(i, h),
                   p + "mlp.down_proj.weight": w(h, i), p + "input_layernorm.weight": torch.ones(h),
                   p + "post_attention_layernorm.weight": torch.ones(h)})
    return sd


def _rms(x, w):
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w


class TPModel:
    """One rank's forward over its fused shards (names as vLLM/SGLang give them): column-parallel
    qkv_proj and gate_up_proj, row-parallel o_proj and down_proj (an all-reduce each),
    vocabulary-parallel embedding (masked lookup + all-reduce) and lm_head (all-gather)."""

    def __init__(self, params, tp, rank, cfg=CONFIG):
        # Computed in FP32 from the BF16 shards (gloo, the CPU backend, reduces no BF16).
        self.p = {k: v.float() for k, v in params.items()}
        self.tp, self.rank, self.cfg = tp, rank, cfg
        hd = cfg["hidden"] // cfg["heads"]
        self.hd = hd
        self.nq = cfg["heads"] // tp
        self.nkv = max(1, cfg["kv_heads"] // tp)
        self.v0 = rank * cfg["vocab"] // tp
        self.v1 = (rank + 1) * cfg["vocab"] // tp

    def _reduce(self, x):
        if self.tp > 1:
            dist.all_reduce(x)
        return x

    def logits(self, ids):
        p, hd = self.p, self.hd
        local = (ids >= self.v0) & (ids < self.v1)
        x = p["model.embed_tokens.weight"][(ids - self.v0).clamp(0, self.v1 - self.v0 - 1)]
        x = self._reduce(x * local.unsqueeze(-1).to(x.dtype))
        T = ids.shape[-1]
        mask = torch.full((T, T), float("-inf")).triu(1)
        for l in range(self.cfg["layers"]):
            pre = "model.layers.%d." % l
            h = _rms(x, p[pre + "input_layernorm.weight"])
            qkv = h @ p[pre + "self_attn.qkv_proj.weight"].t()
            q, k, v = qkv.split([self.nq * hd, self.nkv * hd, self.nkv * hd], dim=-1)
            q = q.view(T, self.nq, hd).transpose(0, 1).float()
            k = k.view(T, self.nkv, hd).transpose(0, 1).float()
            v = v.view(T, self.nkv, hd).transpose(0, 1).float()
            rep = self.nq // self.nkv
            k, v = k.repeat_interleave(rep, 0), v.repeat_interleave(rep, 0)
            att = torch.softmax(q @ k.transpose(1, 2) / hd ** 0.5 + mask, dim=-1) @ v
            att = att.transpose(0, 1).reshape(T, self.nq * hd).to(x.dtype)
            x = x + self._reduce(att @ p[pre + "self_attn.o_proj.weight"].t())
            h = _rms(x, p[pre + "post_attention_layernorm.weight"])
            gate, up = (h @ p[pre + "mlp.gate_up_proj.weight"].t()).chunk(2, dim=-1)
            x = x + self._reduce((torch.nn.functional.silu(gate) * up) @ p[pre + "mlp.down_proj.weight"].t())
        x = _rms(x, p["model.norm.weight"])
        part = (x[-1:] @ p["lm_head.weight"].t()).float()
        if self.tp > 1:
            parts = [torch.empty_like(part) for _ in range(self.tp)]
            dist.all_gather(parts, part)
            part = torch.cat(parts, dim=-1)
        return part[0]

    @torch.no_grad()
    def generate(self, prompt, n):
        ids = torch.tensor(prompt)
        for _ in range(n):
            ids = torch.cat([ids, self.logits(ids).argmax().view(1)])
        return ids[len(prompt):].tolist()
