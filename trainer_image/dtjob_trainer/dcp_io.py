"""Reading torch.distributed.checkpoint (DCP) directories safely.

DCP's own reader unpickles `.metadata` with plain `pickle`, which would run code from the
checkpoint volume; `SafeReader` allows only DCP's metadata classes and torch's basic types
(tensor payloads are read as raw bytes, other values with `weights_only=True`).
`missing_shards` checks, before any rank reads, that every shard file the metadata names
is present and long enough, so a checkpoint with a rank's shards missing or cut short is
skipped as a whole instead of half-loaded.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.filesystem import FileSystemReader
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta

_META = "torch.distributed.checkpoint.metadata"
# Exactly what DCP's metadata pickles (checked with torch 2.13); names, not modules, since
# a module's other attributes (its imports, e.g. os) would be reachable by dotted names.
_SAFE_GLOBALS = {
    (_META, "Metadata"),
    (_META, "MetadataIndex"),
    (_META, "StorageMeta"),
    (_META, "TensorStorageMetadata"),
    (_META, "BytesStorageMetadata"),
    (_META, "ChunkStorageMetadata"),
    (_META, "TensorProperties"),
    (_META, "_MEM_FORMAT_ENCODING"),
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("collections", "OrderedDict"),
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),  # a layout by its name
    ("pathlib", "PosixPath"),  # StorageMeta.checkpoint_id
}


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _SAFE_GLOBALS:
            return super().find_class(module, name)
        # dtypes pickle as torch attributes
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise pickle.UnpicklingError(f"checkpoint metadata refers to {module}.{name}")


def read_metadata(directory: Path) -> Metadata:
    """The `.metadata` of a DCP directory; UnpicklingError when it names anything but
    DCP's metadata classes and torch's basic types."""
    path = directory / ".metadata"
    metadata = _MetadataUnpickler(io.BytesIO(path.read_bytes())).load()
    if not isinstance(metadata, Metadata):
        raise pickle.UnpicklingError(f"{path} does not hold DCP metadata")
    return metadata


def missing_shards(directory: Path) -> list[str]:
    """Shard files the metadata names that are absent or shorter than it says."""
    needed: dict[str, int] = {}
    for info in read_metadata(directory).storage_data.values():
        end = info.offset + info.length
        needed[info.relative_path] = max(needed.get(info.relative_path, 0), end)
    bad = []
    for name, size in sorted(needed.items()):
        file = directory / name
        if not file.is_file() or file.stat().st_size < size:
            bad.append(name)
    return bad


class SafeReader(FileSystemReader):
    """DCP's file reader, with `.metadata` unpickled from an allow-list of classes."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        """The checkpoint's metadata (see the module function)."""
        metadata = read_metadata(Path(self.path))
        storage_meta = metadata.storage_meta or StorageMeta()  # as FileSystemReader does
        storage_meta.load_id = self.load_id
        metadata.storage_meta = storage_meta
        return metadata
