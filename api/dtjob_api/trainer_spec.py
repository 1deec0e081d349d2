"""What a DistributedTrainingJob's pods run (spec.trainer): an image or custom command, and
the bundled trainer's model, data and optimizer. spec.py re-exports every name. Field
docstrings become `kubectl explain` text."""

import json
from enum import StrEnum
from typing import Annotated

from pydantic import AfterValidator, Field, JsonValue, WithJsonSchema

from dtjob_api.base import ApiModel

# Lists carry bounds so that the API server can estimate the cost of the CEL rules
# (immutability compares whole sub-objects) and a manifest cannot grow without limit.
Arg = Annotated[str, Field(max_length=4096)]
# "package.module:callable", imported by the trainer (trainer.codePath first on sys.path).
FACTORY_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$"
Factory = Annotated[str, Field(max_length=256, pattern=FACTORY_PATTERN)]
KWARGS_MAX_PROPERTIES = 64
KWARGS_MAX_BYTES = 16384
KWARGS_MAX_DEPTH = 8


def _depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


def _bounded_kwargs(value: dict[str, JsonValue]) -> dict[str, JsonValue]:
    # The CRD bounds the keys only; the operator (and the trainer) bound the rest. Deeper
    # objects than the operator can walk never get here: it fails them before parsing
    # (policies/too_deep.py).
    size = len(json.dumps(value))
    if size > KWARGS_MAX_BYTES:
        raise ValueError(f"is {size} bytes of JSON, more than {KWARGS_MAX_BYTES}")
    if _depth(value) > KWARGS_MAX_DEPTH:
        raise ValueError(f"nests maps and lists more than {KWARGS_MAX_DEPTH} levels deep")
    return value


# Keyword arguments of a factory: the one free-form field of the API (the factory's own
# parameters cannot have a schema here), bounded in keys, bytes and depth.
Kwargs = Annotated[
    dict[str, JsonValue],
    Field(max_length=KWARGS_MAX_PROPERTIES),
    AfterValidator(_bounded_kwargs),
    WithJsonSchema(
        {
            "type": "object",
            "maxProperties": KWARGS_MAX_PROPERTIES,
            "x-kubernetes-preserve-unknown-fields": True,
        }
    ),
]


class ModelType(StrEnum):
    """Model built by the bundled trainer."""

    MLP = "MLP"
    CNN = "CNN"
    GPT = "GPT"
    CUSTOM = "Custom"


class DatasetType(StrEnum):
    """Data set of the bundled trainer; all are bundled or generated, nothing is downloaded."""

    DIGITS = "Digits"
    SYNTHETIC_TOKENS = "SyntheticTokens"
    TOKEN_FILE = "TokenFile"
    IMAGE_FOLDER = "ImageFolder"
    HF_DISK = "HFDisk"
    CUSTOM = "Custom"


class TokenDtype(StrEnum):
    """Element type of a token file."""

    UINT16 = "uint16"
    UINT32 = "uint32"
    INT32 = "int32"


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
    """MLP (digits), CNN (digits as 8x8 images), GPT (decoder on tokens) or Custom."""
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
    factory: Factory | None = None
    """Custom: "module:callable" returning an nn.Sequential of blocks, or yielding them."""
    kwargs: Kwargs | None = None
    """Custom: keyword arguments of the factory."""


class DatasetSpec(ApiModel):
    """Data of the bundled trainer."""

    type: DatasetType = DatasetType.DIGITS
    """Digits, SyntheticTokens, TokenFile, ImageFolder, HFDisk or Custom."""
    testFraction: float = Field(default=0.2, gt=0.0, lt=1.0)
    """Share held out for the final accuracy (without testPath)."""
    path: str | None = Field(default=None, max_length=1024)
    """TokenFile: token file; ImageFolder: root/<class>/*.png|jpg; HFDisk: save_to_disk dir."""
    testPath: str | None = Field(default=None, max_length=1024)
    """Held-out data in the same form as path."""
    dtype: TokenDtype | None = None
    """TokenFile: element type (default uint16)."""
    imageSize: int | None = Field(default=None, ge=1, le=4096)
    """ImageFolder: images resized to imageSize x imageSize RGB (default 32)."""
    inputColumn: str | None = Field(default=None, max_length=256)
    """HFDisk: input column (default "input")."""
    targetColumn: str | None = Field(default=None, max_length=256)
    """HFDisk: target column (default "label")."""
    factory: Factory | None = None
    """Custom: "module:callable" returning (x_train, y_train, x_test, y_test)."""
    kwargs: Kwargs | None = None
    """Custom: keyword arguments of the factory."""
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
    codePath: str | None = Field(default=None, max_length=1024)
    """Directory put first on sys.path for Custom factories (e.g. a mounted ConfigMap)."""
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
