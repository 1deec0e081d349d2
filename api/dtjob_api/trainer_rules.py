"""Cross-field rules of the bundled trainer's own model and data (trainer.model type Custom,
trainer.dataset from files or a factory); rules.py adds them to RULES, so each is enforced
as CEL in the CRD and in Python by the operator, like every other rule.

A factory and its kwargs belong to type Custom only, a path to the data sets read from files,
each data set's own settings to its type (dtype to TokenFile, ...), and trainer.codePath is a
plain absolute path outside the operator's mounts (paths.py). These hold whatever runs the
pods: they are about the spec's shape, not the trainer.
"""

from __future__ import annotations

from dtjob_api.facts import Facts, cel_list
from dtjob_api.paths import cel_not_reserved, cel_plain, is_plain, reserved_dir
from dtjob_api.rule import Rule
from dtjob_api.spec import DatasetType, ModelType

_MODEL = "self.trainer.model"
_DATA = "self.trainer.dataset"
CUSTOM = ModelType.CUSTOM.value
# Data sets read from files under trainer.dataset.path.
FILE_DATA = (DatasetType.TOKEN_FILE, DatasetType.IMAGE_FOLDER, DatasetType.HF_DISK)
_FILE_DATA_CEL = f"{_DATA}.type in {cel_list(tuple(d.value for d in FILE_DATA))}"


def _set(f: Facts, field: str) -> bool:
    return field in f.trainerFieldsSet


def _custom_only(part: str, field: str) -> Rule:
    """`part.field` (model or dataset) is allowed with type Custom only."""
    return Rule(
        f"trainer.{part}.{field}",
        f"has(self.trainer.{part}.{field})", lambda f: _set(f, f"{part}.{field}"),
        f'self.trainer.{part}.type == "{CUSTOM}"',
        lambda f: (f.modelType if part == "model" else f.datasetType) == CUSTOM,
        f"only allowed with trainer.{part}.type Custom",
        "FieldValueForbidden",
    )  # fmt: skip


def _factory_required(part: str) -> Rule:
    return Rule(
        f"trainer.{part}.factory",
        f'self.trainer.{part}.type == "{CUSTOM}"',
        lambda f: (f.modelType if part == "model" else f.datasetType) == CUSTOM,
        f"has(self.trainer.{part}.factory)", lambda f: _set(f, f"{part}.factory"),
        f'required with trainer.{part}.type Custom: "package.module:callable"',
        "FieldValueRequired",
    )  # fmt: skip


def _dataset_setting(field: str, kind: DatasetType) -> Rule:
    """trainer.dataset.<field> belongs to data sets of type `kind` only."""
    return Rule(
        f"trainer.dataset.{field}",
        f"has({_DATA}.{field})", lambda f: _set(f, f"dataset.{field}"),
        f'{_DATA}.type == "{kind.value}"', lambda f: f.datasetType == kind.value,
        f"only allowed with trainer.dataset.type {kind.value}",
        "FieldValueForbidden",
    )  # fmt: skip


_CODE_PATH = "self.trainer.codePath"


TRAINER_RULES: tuple[Rule, ...] = (
    _factory_required("model"),
    _custom_only("model", "factory"),
    _custom_only("model", "kwargs"),
    _factory_required("dataset"),
    _custom_only("dataset", "factory"),
    _custom_only("dataset", "kwargs"),
    Rule(
        "trainer.dataset.path",
        _FILE_DATA_CEL, lambda f: f.datasetType in FILE_DATA,
        f"has({_DATA}.path)", lambda f: _set(f, "dataset.path"),
        "required with trainer.dataset.type TokenFile, ImageFolder and HFDisk",
        "FieldValueRequired",
    ),
    Rule(
        "trainer.dataset.path",
        f"has({_DATA}.path)", lambda f: _set(f, "dataset.path"),
        _FILE_DATA_CEL, lambda f: f.datasetType in FILE_DATA,
        "only allowed with trainer.dataset.type TokenFile, ImageFolder and HFDisk",
        "FieldValueForbidden",
    ),
    Rule(
        "trainer.dataset.testPath",
        f"has({_DATA}.testPath)", lambda f: _set(f, "dataset.testPath"),
        f"has({_DATA}.path)", lambda f: _set(f, "dataset.path"),
        "needs trainer.dataset.path: it holds out data of the same form",
        "FieldValueForbidden",
    ),
    _dataset_setting("dtype", DatasetType.TOKEN_FILE),
    _dataset_setting("imageSize", DatasetType.IMAGE_FOLDER),
    _dataset_setting("inputColumn", DatasetType.HF_DISK),
    _dataset_setting("targetColumn", DatasetType.HF_DISK),
    Rule(
        "trainer.codePath",
        f"has({_CODE_PATH})", lambda f: bool(f.codePath),
        f"{cel_plain(_CODE_PATH)} && {cel_not_reserved(_CODE_PATH)}",
        lambda f: is_plain(f.codePath) and reserved_dir(f.codePath) is None,
        "must be an absolute path without '//', '.' or '..' components, outside /dev/shm "
        "and /etc/dtjob (the operator's mounts)",
        detail="got {codePath}",
    ),
)  # fmt: skip
