"""What a DistributedTrainingJob's pods run (spec.trainer): an image or custom command, and
the bundled trainer's model, data and optimizer. spec.py re-exports every name. Field
docstrings become `kubectl explain` text."""

from enum import StrEnum
from typing import Annotated

from pydantic import Field

from dtjob_api.base import ApiModel

# Lists carry bounds so that the API server can estimate the cost of the CEL rules
# (immutability compares whole sub-objects) and a manifest cannot grow without limit.
Arg = Annotated[str, Field(max_length=4096)]


class ModelType(StrEnum):
    """Model built by the bundled trainer."""

    MLP = "MLP"
    CNN = "CNN"
    GPT = "GPT"


class DatasetType(StrEnum):
    """Data set of the bundled trainer; all are bundled or generated, nothing is downloaded."""

    DIGITS = "Digits"
    SYNTHETIC_TOKENS = "SyntheticTokens"


class OptimizerType(StrEnum):
    """Optimizer of the bundled trainer."""

    SGD = "SGD"
    ADAM = "Adam"
    ADAMW = "AdamW"


class Precision(StrEnum):
    """Numeric precision of parameters and compute."""

    FP32 = "fp32"
    FP64 = "fp64"
    BF16 = "bf16"


class ModelSpec(ApiModel):
    """Model of the bundled trainer."""

    type: ModelType = ModelType.MLP
    """MLP (digits), CNN (digits as 8x8 images) or GPT (decoder on synthetic tokens)."""
    hiddenSizes: list[Annotated[int, Field(ge=1, le=65536)]] = Field(
        default_factory=lambda: [64, 64, 64], min_length=1, max_length=64
    )
    """MLP hidden layer widths; stages split the layers, so give at least as many as stages."""
    layers: int = Field(default=2, ge=1, le=256)
    """GPT: transformer blocks."""
    dModel: int = Field(default=64, ge=8, le=16384)
    """GPT: embedding width (a multiple of heads)."""
    heads: int = Field(default=4, ge=1, le=256)
    """GPT: attention heads."""
    seqLen: int = Field(default=32, ge=2, le=65536)
    """GPT: tokens per sample."""
    vocabSize: int = Field(default=256, ge=2, le=1048576)
    """GPT: vocabulary size of the synthetic tokens."""


class DatasetSpec(ApiModel):
    """Data of the bundled trainer."""

    type: DatasetType = DatasetType.DIGITS
    """Digits (scikit-learn's bundled 8x8 digits) or SyntheticTokens (generated)."""
    testFraction: float = Field(default=0.2, gt=0.0, lt=1.0)
    """Share of Digits held out for the final accuracy."""
    samples: int = Field(default=8192, ge=1)
    """SyntheticTokens: number of generated sequences."""
    evalSamples: int = Field(default=10000, ge=1)
    """The final evaluation scores at most this many held-out samples (the first ones);
    it streams them in chunks of bounded memory either way."""


class OptimizerSpec(ApiModel):
    """Optimizer of the bundled trainer."""

    type: OptimizerType = OptimizerType.SGD
    """SGD, Adam or AdamW."""
    lr: float = Field(default=0.05, gt=0.0, le=100.0)
    """Learning rate."""
    momentum: float = Field(default=0.0, ge=0.0, lt=1.0)
    """SGD momentum."""
    weightDecay: float = Field(default=0.0, ge=0.0, le=1.0)
    """Weight decay."""


class TrainerSpec(ApiModel):
    """What the pods run: the bundled trainer's job, or a custom image + command that reads
    the same environment contract."""

    image: str | None = Field(default=None, max_length=1024)
    """Container image; defaults to the operator's configured trainer image."""
    imagePullPolicy: str | None = Field(default=None, pattern=r"^(Always|IfNotPresent|Never)$")
    """Always, IfNotPresent or Never."""
    command: list[Arg] | None = Field(default=None, min_length=1, max_length=256)
    """Custom trainer command (e.g. ["dtjob-run", "--", "torchrun", ...]); when set, the
    bundled trainer does not run, its rules (batch splits, micro-batches, model) are not
    checked, and the settings below are only passed on in the job config file. Unset: the
    container runs the bundled trainer (python -m dtjob_trainer run), whatever the image."""
    args: list[Arg] | None = Field(default=None, max_length=256)
    """Arguments of the custom command."""
    model: ModelSpec = Field(default_factory=ModelSpec)
    """Model of the bundled trainer."""
    dataset: DatasetSpec = Field(default_factory=DatasetSpec)
    """Data of the bundled trainer."""
    optimizer: OptimizerSpec = Field(default_factory=OptimizerSpec)
    """Optimizer of the bundled trainer."""
    batchSize: int = Field(default=64, ge=1, le=1048576)
    """Global batch size per step, across all data-parallel processes."""
    steps: int = Field(default=100, ge=1, le=100000000)
    """Total optimizer steps (updates per worker for the asynchronous modes)."""
    seed: int = Field(default=0, ge=0, le=2147483647)
    """Random seed: same seed and config, same result."""
    precision: Precision = Precision.FP32
    """fp32, fp64 (exact equivalence checks) or bf16 (GPU throughput)."""
    logEverySteps: int = Field(default=10, ge=1, le=1000000)
    """Log and progress-report interval in steps."""
    compile: bool = False
    """torch.compile each model block (slower start; losses within rounding)."""
    activationCheckpointing: bool = False
    """Recompute each block's activations in backward: less memory, more compute."""
