#!/usr/bin/python3
"""Reference forward pass for spark-decode's tests, in numpy (float64).

    ref_decode.py MODEL_DIR --prompt 1,2,3 --tokens N [--compare DUMP]

Reads config.json and every *.safetensors of MODEL_DIR on its own (no shared
code with spark-decode), decodes greedily from the prompt, and prints JSON:
{"tokens": [...], "rows": R, "max_abs_diff": D} where D compares its logits of
every step with DUMP (spark-decode --dump-logits: R rows of vocab_size f32).
Written from the Hugging Face Llama/Qwen2/Qwen3 modelling code's formulas.
"""
import argparse
import glob
import json
import math
import os
import struct
import sys

import numpy as np


def load_safetensors(path):
    out = {}
    with open(path, 'rb') as f:
        data = f.read()
    (n,) = struct.unpack('<Q', data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    for name, t in header.items():
        if name == '__metadata__':
            continue
        b, e = t['data_offsets']
        raw = data[base + b:base + e]
        if t['dtype'] == 'F32':
            a = np.frombuffer(raw, dtype='<f4').astype(np.float64)
        elif t['dtype'] == 'F16':
            a = np.frombuffer(raw, dtype='<f2').astype(np.float64)
        elif t['dtype'] == 'BF16':
            u = np.frombuffer(raw, dtype='<u2').astype(np.uint32) << 16
            a = u.view(np.float32).astype(np.float64)
        else:
            continue
        out[name] = a.reshape(t['shape'])
    return out


def rope_inv_freq(cfg, hd):
    theta = cfg.get('rope_theta', 10000.0)
    inv = 1.0 / (theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    rs = cfg.get('rope_scaling')
    if rs:
        kind = rs.get('rope_type', rs.get('type'))
        factor = rs.get('factor', 1.0)
        if kind == 'linear':
            inv = inv / factor
        elif kind == 'llama3':
            low = rs.get('low_freq_factor', 1.0)
            high = rs.get('high_freq_factor', 4.0)
            old = rs.get('original_max_position_embeddings', 8192)
            low_wl, high_wl = old / low, old / high
            new = []
            for f in inv:
                wl = 2 * math.pi / f
                if wl < high_wl:
                    new.append(f)
                elif wl > low_wl:
                    new.append(f / factor)
                else:
                    s = (old / wl - low) / (high - low)
                    new.append((1 - s) * f / factor + s * f)
            inv = np.array(new)
    return inv


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(v, pos, inv):
    half = v.shape[-1] // 2
    ang = pos * inv
    c, s = np.cos(ang), np.sin(ang)
    a, b = v[..., :half], v[..., half:]
    return np.concatenate([a * c - b * s, b * c + a * s], axis=-1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('model')
    ap.add_argument('--prompt', default='1')
    ap.add_argument('--tokens', type=int, default=8)
    ap.add_argument('--compare')
    a = ap.parse_args()

    with open(os.path.join(a.model, 'config.json')) as f:
        cfg = json.load(f)
    W = {}
    for p in sorted(glob.glob(os.path.join(a.model, '*.safetensors'))):
        W.update(load_safetensors(p))
    H = cfg['hidden_size']
    nh = cfg['num_attention_heads']
    nkv = cfg.get('num_key_value_heads', nh)
    hd = cfg.get('head_dim') or H // nh
    L = cfg['num_hidden_layers']
    V = cfg['vocab_size']
    eps = cfg.get('rms_norm_eps', 1e-6)
    inv = rope_inv_freq(cfg, hd)
    lm = W.get('lm_head.weight', W['model.embed_tokens.weight'])

    prompt = [int(t) for t in a.prompt.split(',')]
    kc = [[] for _ in range(L)]
    vc = [[] for _ in range(L)]
    logits_rows, gen = [], []
    seq = list(prompt)
    pos = 0
    while len(gen) < a.tokens:
        tok = seq[pos]
        x = W['model.embed_tokens.weight'][tok].copy()
        for l in range(L):
            p = 'model.layers.%d.' % l
            h = rmsnorm(x, W[p + 'input_layernorm.weight'], eps)
            q = W[p + 'self_attn.q_proj.weight'] @ h
            k = W[p + 'self_attn.k_proj.weight'] @ h
            v = W[p + 'self_attn.v_proj.weight'] @ h
            if p + 'self_attn.q_proj.bias' in W:
                q = q + W[p + 'self_attn.q_proj.bias']
                k = k + W[p + 'self_attn.k_proj.bias']
                v = v + W[p + 'self_attn.v_proj.bias']
            q = q.reshape(nh, hd)
            k = k.reshape(nkv, hd)
            v = v.reshape(nkv, hd)
            if p + 'self_attn.q_norm.weight' in W:
                q = rmsnorm(q, W[p + 'self_attn.q_norm.weight'], eps)
                k = rmsnorm(k, W[p + 'self_attn.k_norm.weight'], eps)
            q = rope(q, pos, inv)
            k = rope(k, pos, inv)
            kc[l].append(k)
            vc[l].append(v)
            K = np.stack(kc[l])  # [t, nkv, hd]
            Vv = np.stack(vc[l])
            att = np.zeros((nh, hd))
            for hh in range(nh):
                g = hh // (nh // nkv)
                sc = K[:, g, :] @ q[hh] / math.sqrt(hd)
                sc = np.exp(sc - sc.max())
                sc /= sc.sum()
                att[hh] = sc @ Vv[:, g, :]
            o = W[p + 'self_attn.o_proj.weight'] @ att.reshape(-1)
            if p + 'self_attn.o_proj.bias' in W:
                o = o + W[p + 'self_attn.o_proj.bias']
            x = x + o
            h = rmsnorm(x, W[p + 'post_attention_layernorm.weight'], eps)
            g_ = W[p + 'mlp.gate_proj.weight'] @ h
            u = W[p + 'mlp.up_proj.weight'] @ h
            x = x + W[p + 'mlp.down_proj.weight'] @ (g_ / (1 + np.exp(-g_)) * u)
        h = rmsnorm(x, W['model.norm.weight'], eps)
        logits = lm @ h
        logits_rows.append(logits)
        if pos >= len(prompt) - 1:
            nxt = int(np.argmax(logits))
            gen.append(nxt)
            seq.append(nxt)
        pos += 1

    res = {'tokens': gen, 'rows': len(logits_rows)}
    if a.compare:
        d = np.fromfile(a.compare, dtype=np.float32)
        if d.size != len(logits_rows) * V:
            print('dump has %d values, expected %d rows of %d' % (d.size, len(logits_rows), V),
                  file=sys.stderr)
            return 1
        ref = np.stack(logits_rows)
        res['max_abs_diff'] = float(np.max(np.abs(d.reshape(ref.shape) - ref)))
        res['max_abs_logit'] = float(np.max(np.abs(ref)))
    print(json.dumps(res))
    return 0


if __name__ == '__main__':
    sys.exit(main())
