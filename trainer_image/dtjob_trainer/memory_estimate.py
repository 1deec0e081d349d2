"""Activation memory of one training step, estimated from the model's shapes (for Auto).

GPT: per layer and sample, s * h * 34 bytes in 16-bit compute (Korthikanti et al. 2022,
"Reducing Activation Recomputation in Large Transformer Models", less the s x s attention
scores, which the model's fused scaled_dot_product_attention never keeps), scaled by the
compute width; with activation
checkpointing only each layer's input is kept, plus one layer's working set during its
recomputation. The logits (s * vocab, with their softmax) come on top. MLP and CNN: every
layer output and its ReLU, per sample. Estimates, not measurements: they decide between
strategies, they do not size allocations.
"""

from __future__ import annotations

from dtjob_api.spec import ModelSpec, ModelType, Precision

MLP_FEATURES, CLASSES = 64, 10
# The CNN's per-sample activations (models/cnn.py): input, two conv + ReLU maps, pooled
# map, hidden layer + ReLU, logits.
CNN_ELEMENTS = 64 + 2 * 16 * 64 + 2 * 32 * 64 + 32 * 16 + 2 * 64 + CLASSES


def compute_width(precision: Precision) -> int:
    """Bytes of one activation element: bf16 autocast computes in 2 bytes."""
    return {Precision.FP64: 8, Precision.BF16: 2}.get(precision, 4)


def activation_bytes(
    model: ModelSpec, samples: int, precision: Precision, checkpointing: bool = False
) -> int:
    """Activations kept for backward by `samples` samples (one rank's share of a step)."""
    width = compute_width(precision)
    if model.type == ModelType.GPT:
        s, h = model.seqLen, model.dModel
        layer = s * h * 17  # 34 bytes at 2-byte width, in elements
        kept = model.layers * s * h + layer if checkpointing else model.layers * layer
        logits = 2 * s * model.vocabSize
        return int(samples * width * (kept + logits + s * h))
    if model.type == ModelType.CNN:
        return samples * width * CNN_ELEMENTS
    hidden = list(model.hiddenSizes)
    elements = MLP_FEATURES + 2 * sum(hidden) + CLASSES
    if checkpointing:
        elements = MLP_FEATURES + sum(hidden) + 2 * max(hidden, default=0) + CLASSES
    return samples * width * elements
