"""Memory per GPU of cluster layouts, computed from model shapes (arithmetic only, nothing runs)."""

import pytest

from arxivqa.cluster import ALL_LINEAR, ATTENTION, QWEN3_8B, QWEN3_14B, layouts_table, training_memory, vllm_memory


def test_parameter_counts_match_the_published_model_sizes():
    assert QWEN3_8B.parameters / 1e9 == pytest.approx(8.19, abs=0.01)  # Qwen3-8B: 8.2B
    assert QWEN3_14B.parameters / 1e9 == pytest.approx(14.77, abs=0.01)  # Qwen3-14B: 14.8B
    # LoRA r 64 on q, k, v, o of Qwen3-8B: 64 (4096+4096) x 2 + 64 (4096+1024) x 2 per layer, 36 layers
    assert QWEN3_8B.lora_parameters(64, ATTENTION) == 36 * (2 * 64 * 8192 + 2 * 64 * 5120)
    assert QWEN3_8B.lora_parameters(64, ALL_LINEAR) > QWEN3_8B.lora_parameters(64, ATTENTION)
    assert QWEN3_8B.kv_bytes_per_token() == 2 * 36 * 8 * 128 * 2
    with pytest.raises(ValueError, match="unknown LoRA targets"):
        QWEN3_8B.lora_parameters(8, ("qkv",))


def test_full_fine_tuning_needs_sharding_and_lora_does_not():
    full = training_memory(QWEN3_8B, "full")
    assert full["gradients_optimizer"] == pytest.approx(14 * QWEN3_8B.parameters / 1024 ** 3)
    assert full["total"] > 141  # more than one H200 holds
    sharded = training_memory(QWEN3_8B, "full", gpus=6, zero3=True)
    assert sharded["weights"] == pytest.approx(full["weights"] / 6) and sharded["activations"] == full["activations"]
    lora = training_memory(QWEN3_8B, "lora", chunked_logits=True)
    assert lora["reference"] == 0.0 and lora["total"] < 40
    assert training_memory(QWEN3_8B, "lora", seq_tokens=8192)["activations"] == pytest.approx(lora["activations"] / 2)
    with pytest.raises(ValueError):
        training_memory(QWEN3_8B, "qlora")
    with pytest.raises(ValueError):
        training_memory(QWEN3_8B, gpus=0)


def test_vllm_memory_splits_over_tensor_parallel_gpus_and_the_table_covers_each_layout():
    one, two = vllm_memory(QWEN3_14B, 1), vllm_memory(QWEN3_14B, 2)
    assert two["total"] == pytest.approx(one["total"] / 2)
    rows = layouts_table()
    assert {(r["model"], r["method"], r["layout"]) for r in rows} >= {("Qwen3-14B", "full", "6 GPUs, ZeRO-3"),
                                                                     ("Qwen3-8B", "lora", "1 GPU")}
    assert all(r["total"] > 0 for r in rows)
