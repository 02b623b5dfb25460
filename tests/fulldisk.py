"""A disk that fills up, for the spools (agentkeep.spool): real unnamed
temporary files that share room for a number of whole writes."""

from __future__ import annotations

import errno
import tempfile
from typing import IO, Any

import pytest

_TEMPORARY_FILE = tempfile.TemporaryFile


class FullDisk:
    """Real temporary files sharing room for `room` whole writes: the next
    one writes half of what it is given, then fails as a full disk does."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, room: int | None = None) -> None:
        self.room, self.flushed, self.failed = room, 0, 0
        monkeypatch.setattr(tempfile, "TemporaryFile", self.file)

    def file(self) -> _OnDisk:
        return _OnDisk(self)


class _OnDisk:
    def __init__(self, disk: FullDisk) -> None:
        self.disk = disk
        self.file: IO[bytes] = _TEMPORARY_FILE()  # noqa: SIM115 (closed by the spool)

    def write(self, data: bytes) -> int:
        if self.disk.room is not None and self.disk.flushed >= self.disk.room:
            self.disk.failed += 1
            self.file.write(bytes(data)[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")
        return self.file.write(data)

    def flush(self) -> None:
        self.file.flush()
        self.disk.flushed += 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self.file, name)
