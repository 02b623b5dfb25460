"""Records that wait on disk instead of in memory: batches pickled into an
unnamed temporary file under $TMPDIR (gone with the process), read back in
the order they were written. What a prune reports and what a Claude scan
finds are spooled past a bound, so that neither grows with the home."""

from __future__ import annotations

import pickle
import tempfile
from collections.abc import Iterator
from typing import IO, Generic, TypeVar

T = TypeVar("T")


class Spool(Generic[T]):
    """Batches of records in one unnamed file. Only whole batches are read
    back: a write that fails midway (a full disk) raises, and leaves
    nothing of its batch to be read; the batch is then the writer's to keep."""

    def __init__(self) -> None:
        self._file: IO[bytes] | None = None
        # Bytes of whole batches: a failed write may have left part of one
        # after them.
        self._end = 0

    def write(self, batch: list[T]) -> None:
        """Append one batch."""
        if self._file is None:
            self._file = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close())
        self._file.seek(self._end)
        pickle.dump(batch, self._file, pickle.HIGHEST_PROTOCOL)
        self._file.flush()
        self._end = self._file.tell()

    def __iter__(self) -> Iterator[T]:
        """Every record written, in order, each batch read from its own
        offset: two readings at once each keep their place."""
        offset = 0
        while self._file is not None and offset < self._end:
            self._file.seek(offset)
            batch = pickle.load(self._file)
            offset = self._file.tell()
            yield from batch

    def close(self) -> None:
        """Forget every batch (the file goes)."""
        if self._file is not None:
            self._file.close()
            self._file = None
