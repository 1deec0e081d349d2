"""The small GPT the tensor-parallel tests split (4 heads, so tp 2 and 4 divide it) and its
token data."""

from __future__ import annotations

from typing import Any

GPT_MODEL: dict[str, Any] = {
    "type": "GPT",
    "layers": 2,
    "dModel": 16,
    "heads": 4,
    "seqLen": 8,
    "vocabSize": 32,
}
GPT_DATA = {"type": "SyntheticTokens", "samples": 256, "evalSamples": 64}
