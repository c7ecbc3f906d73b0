#!/usr/bin/env python3
"""Write a Llama-shaped model directory: config.json and model.safetensors of
random f32 weights (seeded, so the same arguments give the same bytes). It
talks nonsense, but spark-decode, fit and model push take it like any Hugging
Face model. Used by scripts/demo.sh and the serving tests.

  llama_model.py DIR SHAPE_JSON [--seed N] [--scale X] [--pad N] [--no-weights]

SHAPE_JSON: hidden_size, intermediate_size, num_hidden_layers,
num_attention_heads, num_key_value_heads, head_dim, vocab_size (and
torch_dtype, float32 unless given). Weights are uniform in +-X/sqrt(fan_in)
(norms 1 +- 0.1); --pad adds N spaces to the safetensors header, which moves
every tensor (another file size); --no-weights writes config.json only."""
import argparse, json, os, random, struct, sys
from array import array

ap = argparse.ArgumentParser()
ap.add_argument("dir")
ap.add_argument("shape")
ap.add_argument("--seed", type=int, default=20)
ap.add_argument("--scale", type=float, default=1.0)
ap.add_argument("--pad", type=int, default=0)
ap.add_argument("--no-weights", action="store_true")
o = ap.parse_args()
sh = json.loads(o.shape)
os.makedirs(o.dir, exist_ok=True)
cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "rms_norm_eps": 1e-5,
       "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": False,
       "torch_dtype": "float32"}
cfg.update(sh)
with open(os.path.join(o.dir, "config.json"), "w") as f:
    json.dump(cfg, f)
if o.no_weights:
    sys.exit(0)
H, I, L, V = sh["hidden_size"], sh["intermediate_size"], sh["num_hidden_layers"], sh["vocab_size"]
Q, KV = sh["num_attention_heads"] * sh["head_dim"], sh["num_key_value_heads"] * sh["head_dim"]
t = [("model.embed_tokens.weight", (V, H))]
for l in range(L):
    p = "model.layers.%d." % l
    t += [(p + "input_layernorm.weight", (H,)), (p + "self_attn.q_proj.weight", (Q, H)),
          (p + "self_attn.k_proj.weight", (KV, H)), (p + "self_attn.v_proj.weight", (KV, H)),
          (p + "self_attn.o_proj.weight", (H, Q)), (p + "post_attention_layernorm.weight", (H,)),
          (p + "mlp.gate_proj.weight", (I, H)), (p + "mlp.up_proj.weight", (I, H)),
          (p + "mlp.down_proj.weight", (H, I))]
t += [("model.norm.weight", (H,)), ("lm_head.weight", (V, H))]
rng, hdr, blobs, off = random.Random(o.seed), {}, [], 0
for name, shape in t:
    n = shape[0] * (shape[1] if len(shape) > 1 else 1)
    if len(shape) == 1:
        a = array("f", (1.0 + rng.uniform(-0.1, 0.1) for _ in range(n)))
    else:
        s = o.scale / shape[1] ** 0.5
        a = array("f", (rng.uniform(-s, s) for _ in range(n)))
    if sys.byteorder == "big":
        a.byteswap()
    b = a.tobytes()
    blobs.append(b)
    hdr[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [off, off + len(b)]}
    off += len(b)
h = json.dumps(hdr).encode() + b" " * o.pad
h += b" " * (-len(h) % 8)
with open(os.path.join(o.dir, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h)))
    f.write(h)
    for b in blobs:
        f.write(b)
