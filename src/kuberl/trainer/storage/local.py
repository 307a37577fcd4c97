"""A run's files in a local directory, with atomic puts (temp file, fsync, rename)."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from urllib.parse import unquote, urlparse

from kuberl.trainer.storage.errors import NotFound, StorageError

# Temp files live beside their target (rename is atomic only within one file system);
# listings hide them, so a reader never sees a half-written object.
TEMP_PREFIX = ".kuberl-tmp-"


def path_from_uri(uri_or_path: str | Path) -> Path:
    """The local directory for "file:///abs/path", "file://rel/path" or a plain path."""
    text = str(uri_or_path)
    if text.startswith("file://"):
        parsed = urlparse(text)
        text = unquote(parsed.netloc + parsed.path)
    if not text:
        raise StorageError(f"storage.uri: {uri_or_path!r} names no directory")
    return Path(text).expanduser().absolute()


def _fsync_dir(path: Path) -> None:
    # The rename is durable only once the directory entry itself is on disk.
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class LocalStore:
    """An ObjectStore over a directory: keys are relative paths below `root`."""

    def __init__(self, uri_or_path: str | Path) -> None:
        self.root = path_from_uri(uri_or_path)
        self.uri = self.root.as_uri()

    def __repr__(self) -> str:
        return f"LocalStore({self.uri!r})"

    def _path(self, key: str) -> Path:
        parts = [p for p in key.split("/") if p]
        if not parts or any(p in (".", "..") for p in parts):
            raise StorageError(f"invalid storage key {key!r}")
        return self.root.joinpath(*parts)

    def url(self, key: str) -> str:
        return self._path(key).as_uri() if key else self.uri

    def put_bytes(self, key: str, data: bytes) -> None:
        self._atomic_write(key, lambda f: f.write(data))

    def put_file(self, key: str, path: Path) -> None:
        def copy(out) -> None:  # type: ignore[no-untyped-def]
            with open(path, "rb") as src:
                shutil.copyfileobj(src, out, 1 << 20)

        self._atomic_write(key, copy)

    def _atomic_write(self, key: str, write) -> None:  # type: ignore[no-untyped-def]
        target = self._path(key)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=target.parent)
        except OSError as e:
            raise StorageError(f"cannot write {self.url(key)}: {e.strerror or e}") from e
        try:
            with os.fdopen(fd, "wb") as out:
                write(out)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, target)
        except BaseException as e:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            if isinstance(e, OSError):  # a full disk or a file size limit: the caller retries
                raise StorageError(f"cannot write {self.url(key)}: {e.strerror or e}") from e
            raise
        _fsync_dir(target.parent)

    def append_bytes(self, key: str, data: bytes) -> None:
        """Append to an object (results.jsonl); a crash can leave only a torn last line,
        a failed write (a full disk) leaves the object as it was."""
        target = self._path(key)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
            try:
                size = os.fstat(fd).st_size
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view):]
                    os.fsync(fd)
                except OSError:
                    # A full disk can take part of the data: cut it off, so a retry appends whole lines.
                    with contextlib.suppress(OSError):  # not a regular file: nothing to cut
                        os.ftruncate(fd, size)
                    raise
            finally:
                os.close(fd)
        except OSError as e:
            raise StorageError(f"cannot append to {self.url(key)}: {e.strerror or e}") from e

    def get_bytes(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as e:
            raise NotFound(self.url(key)) from e

    def get_file(self, key: str, path: Path) -> None:
        source = self._path(key)
        if not source.is_file():
            raise NotFound(self.url(key))
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, path)

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def sizes(self, prefix: str = "") -> dict[str, int]:
        """Every key under prefix with its size in bytes."""
        found: dict[str, int] = {}
        if not self.root.is_dir():
            return found
        # Walk only the directory the prefix names, not the whole run.
        base_dir = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        start = self._path(base_dir) if base_dir else self.root
        if not start.is_dir():
            return found
        for dirpath, _dirs, names in os.walk(start):
            for name in names:
                if name.startswith(TEMP_PREFIX):
                    continue
                full = Path(dirpath) / name
                key = full.relative_to(self.root).as_posix()
                if key.startswith(prefix):
                    with contextlib.suppress(FileNotFoundError):
                        found[key] = full.stat().st_size
        return dict(sorted(found.items()))

    def list(self, prefix: str = "") -> list[str]:
        return list(self.sizes(prefix))

    def delete(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(key).unlink()

    def delete_prefix(self, prefix: str) -> None:
        for key in self.list(prefix):
            self.delete(key)
        # Remove directories the prefix left empty, deepest first.
        base = prefix.rstrip("/")
        if base:
            directory = self._path(base)
            if directory.is_dir():
                for dirpath, _dirs, _files in sorted(os.walk(directory), key=lambda w: -len(w[0])):
                    with contextlib.suppress(OSError):
                        os.rmdir(dirpath)

    def check(self) -> None:
        """Fail fast when the directory cannot be created or written."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StorageError(f"storage {self.uri}: cannot create the directory: {e.strerror or e}") from e
        if not os.access(self.root, os.W_OK | os.X_OK):
            raise StorageError(f"storage {self.uri}: the directory is not writable")
