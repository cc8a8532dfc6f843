"""The PyTorch modules of the bundled example graphs, with torch and torchvision only.

datasets/export_bundled.py exports them to ONNX (datasets/export_real.py reuses TinyGPT2), and
scripts/gpu_max_batch.py trains the same modules on a GPU to find the largest batch that fits.
Kept apart from the exporter's ONNX imports so that a machine without onnx can build them.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision


# --------------------------------------------------------------------------
# GPT-2-style decoder-only transformer (tiny)
# --------------------------------------------------------------------------

class CausalSelfAttention(nn.Module):
    def __init__(self, d_model, n_heads, seq_len, p_drop):
        super().__init__()
        assert d_model % n_heads == 0
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.seq_len = seq_len
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.attn_drop = nn.Dropout(p_drop)
        self.resid_drop = nn.Dropout(p_drop)

    def forward(self, x, mask):
        # x: [B, T, C] with T fixed (= seq_len); only B is dynamic.
        # mask: [T, T] bool, True above the diagonal (future positions).
        B = x.shape[0]
        T, H, D = self.seq_len, self.n_heads, self.d_head
        q, k, v = self.qkv(x).split(H * D, dim=2)
        q = q.reshape(B, T, H, D).transpose(1, 2)            # [B,H,T,D]
        k = k.reshape(B, T, H, D).transpose(1, 2)
        v = v.reshape(B, T, H, D).transpose(1, 2)
        att = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / D ** 0.5)  # [B,H,T,T]
        att = att.masked_fill(mask, float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.attn_drop(att)
        y = torch.matmul(att, v)                             # [B,H,T,D]
        y = y.transpose(1, 2).reshape(B, T, H * D)
        return self.resid_drop(self.proj(y))


class Block(nn.Module):
    def __init__(self, d_model, n_heads, seq_len, p_drop):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads, seq_len, p_drop)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 4 * d_model),
            nn.GELU(),
            nn.Linear(4 * d_model, d_model),
            nn.Dropout(p_drop),
        )

    def forward(self, x, mask):
        x = x + self.attn(self.ln1(x), mask)
        x = x + self.mlp(self.ln2(x))
        return x


class TinyGPT2(nn.Module):
    def __init__(self, vocab=8192, seq_len=128, d_model=256, n_heads=4,
                 n_layers=4, p_drop=0.1):
        super().__init__()
        self.seq_len = seq_len
        self.tok_emb = nn.Embedding(vocab, d_model)
        self.pos_emb = nn.Embedding(seq_len, d_model)
        self.drop = nn.Dropout(p_drop)
        self.blocks = nn.ModuleList(
            [Block(d_model, n_heads, seq_len, p_drop) for _ in range(n_layers)])
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, input_ids):
        pos = torch.arange(self.seq_len, dtype=torch.long, device=input_ids.device)
        x = self.drop(self.tok_emb(input_ids) + self.pos_emb(pos))
        # Causal mask, built once in-graph from the (fixed) sequence length of
        # the input: Shape -> ConstantOfShape([T,T], true) -> Trilu(upper, k=1).
        # Taking T from input_ids.size(1) keeps the tracer from freezing the
        # mask into a 16 KiB Constant.
        T = input_ids.size(1)
        mask = torch.ones(T, T, dtype=torch.bool, device=input_ids.device).triu(1)
        for blk in self.blocks:
            x = blk(x, mask)
        return self.lm_head(self.ln_f(x))


# --------------------------------------------------------------------------
# Factories (seeded)
# --------------------------------------------------------------------------

def make_resnet18():
    torch.manual_seed(0)
    return torchvision.models.resnet18(weights=None, num_classes=1000)


def make_gpt2_tiny():
    torch.manual_seed(0)
    return TinyGPT2()


def make_mlp_small():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(784, 512), nn.ReLU(), nn.Dropout(0.2),
        nn.Linear(512, 256), nn.ReLU(),
        nn.Linear(256, 10),
    )
