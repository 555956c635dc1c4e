"""Beyond one machine, on paper: the memory a GPU needs for a training layout, computed from the model's shape.

Everything here is arithmetic on published model configurations; nothing runs. The formulas (bytes):

- **Weights** of the policy in bf16: ``2·P`` (P parameters).
- **Full fine-tuning** with AdamW in mixed precision: bf16 weights (2) + bf16 gradients (2) + fp32 master
  weights, first and second moments (4 + 4 + 4) = ``16·P``; ZeRO-3 shards all of it over the N training
  GPUs: ``16·P / N``. With a KL term (``beta > 0``) the frozen reference model adds ``2·P`` (``/ N``
  under ZeRO-3).
- **LoRA**: the frozen base in bf16 (``2·P``, ``/ N`` under ZeRO-3) + ``16·A`` for the A adapter
  parameters (``r·(d_in + d_out)`` per adapted matrix). The reference model is the base with the adapter
  switched off: no extra copy.
- **Activations** per sequence of T tokens with gradient checkpointing: each layer's input kept in bf16
  (``2·T·h·L``) + one layer recomputed during backward (``≈ 34·T·h``, the per-layer estimate of
  Korthikanti et al. 2022 with flash attention), + the logits of the sequence in fp32 for the log-softmax
  (``4·T·V``) unless they are computed in chunks. Activations are not sharded by ZeRO: each GPU holds
  those of its own micro-batch.
- **vLLM** (rollouts): weights ``2·P / tp`` per GPU (tensor parallel size tp) + the KV cache, ``2 (K and
  V) · L · kv_heads · head_dim · 2 bytes`` per token of every sequence in flight.

The numbers are lower bounds: CUDA context (~0.5–1 GiB), allocator fragmentation and communication
buffers come on top, so plan 10–20 % of headroom.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1024 ** 3


@dataclass(frozen=True)
class ModelShape:
    """What the memory depends on (from the model's ``config.json``)."""

    name: str
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied_embeddings: bool = False

    def matrices(self) -> dict[str, tuple[int, int]]:
        """(d_in, d_out) of each linear layer of one block."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return {"q_proj": (self.hidden, q), "k_proj": (self.hidden, kv), "v_proj": (self.hidden, kv),
                "o_proj": (q, self.hidden), "gate_proj": (self.hidden, self.intermediate),
                "up_proj": (self.hidden, self.intermediate), "down_proj": (self.intermediate, self.hidden)}

    @property
    def parameters(self) -> int:
        block = sum(i * o for i, o in self.matrices().values()) + 2 * self.hidden + 2 * self.head_dim  # + norms
        embeddings = self.vocab * self.hidden * (1 if self.tied_embeddings else 2)
        return self.layers * block + embeddings + self.hidden

    def lora_parameters(self, r: int, targets: tuple[str, ...]) -> int:
        mats = self.matrices()
        unknown = set(targets) - set(mats)
        if unknown:
            raise ValueError(f"unknown LoRA targets {sorted(unknown)}; choose from {sorted(mats)}")
        return self.layers * sum(r * (mats[t][0] + mats[t][1]) for t in targets)

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes


# Published configurations (Hugging Face config.json of Qwen/Qwen3-8B and Qwen/Qwen3-14B): untied
# embeddings, 8 KV heads of dimension 128, vocabulary 151,936.
QWEN3_8B = ModelShape("Qwen3-8B", layers=36, hidden=4096, intermediate=12288, heads=32, kv_heads=8, head_dim=128,
                      vocab=151936)
QWEN3_14B = ModelShape("Qwen3-14B", layers=40, hidden=5120, intermediate=17408, heads=40, kv_heads=8, head_dim=128,
                       vocab=151936)
ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
ALL_LINEAR = ATTENTION + ("gate_proj", "up_proj", "down_proj")


def training_memory(m: ModelShape, method: str = "lora", gpus: int = 1, zero3: bool = False, seq_tokens: int = 16384,
                    micro_batch: int = 1, lora_r: int = 64, lora_targets: tuple[str, ...] = ATTENTION,
                    kl: bool = True, chunked_logits: bool = False) -> dict[str, float]:
    """GiB per training GPU, by part (``weights``, ``gradients_optimizer``, ``reference``, ``activations``,
    ``logits``) and ``total``, for ``method`` ``lora`` or ``full`` on ``gpus`` data-parallel GPUs."""
    if method not in ("lora", "full"):
        raise ValueError("method must be 'lora' or 'full'")
    if gpus < 1 or micro_batch < 1 or seq_tokens < 1:
        raise ValueError("gpus, micro_batch and seq_tokens must be >= 1")
    shard = gpus if zero3 else 1
    p = m.parameters
    if method == "full":
        weights, states = 2 * p / shard, 14 * p / shard  # bf16 weights; bf16 grads + fp32 master, m, v
        reference = 2 * p / shard if kl else 0.0
    else:
        a = m.lora_parameters(lora_r, lora_targets)
        weights, states, reference = 2 * p / shard, 16 * a, 0.0  # adapters are small: replicated
    t = seq_tokens * micro_batch
    activations = 2 * t * m.hidden * m.layers + 34 * t * m.hidden
    logits = 0.0 if chunked_logits else 4 * t * m.vocab
    parts = {"weights": weights, "gradients_optimizer": states, "reference": reference, "activations": activations,
             "logits": logits}
    out = {k: v / GIB for k, v in parts.items()}
    out["total"] = sum(out.values())
    return out


def vllm_memory(m: ModelShape, tensor_parallel: int = 1, tokens_in_flight: int = 64 * 8192) -> dict[str, float]:
    """GiB per vLLM GPU: the weights split over ``tensor_parallel`` GPUs and the KV cache of
    ``tokens_in_flight`` tokens (e.g. 64 rollouts × 8,192 tokens), also split."""
    weights = 2 * m.parameters / tensor_parallel
    kv = m.kv_bytes_per_token() * tokens_in_flight / tensor_parallel
    return {"weights": weights / GIB, "kv_cache": kv / GIB, "total": (weights + kv) / GIB}


def layouts_table(models=(QWEN3_8B, QWEN3_14B), seq_tokens: int = 16384) -> list[dict]:
    """The README's table: per model, method and layout, GiB per training GPU (one sequence of
    ``seq_tokens`` a micro-batch, logits chunked or not) and per vLLM GPU."""
    rows = []
    for m in models:
        for method, targets in (("lora", ATTENTION), ("full", ATTENTION)):
            for gpus, zero3 in ((1, False), (6, True)):
                for chunked in (False, True):
                    mem = training_memory(m, method, gpus, zero3, seq_tokens, lora_targets=targets,
                                          chunked_logits=chunked)
                    rows.append({"model": m.name, "params_B": m.parameters / 1e9, "method": method,
                                 "layout": "1 GPU" if gpus == 1 else f"{gpus} GPUs, ZeRO-3",
                                 "chunked_logits": chunked, **{k: round(v, 1) for k, v in mem.items()}})
    return rows
