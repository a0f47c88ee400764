"""Where sdb's tools write: output files opened safely, and target-controlled text made safe for a
terminal. Used by both `sdb-sidecar` (the trace) and `sdb-symbolize` (profiles).

The output rule (docs/guide.md, "Output files"): `-o PATH` never writes into a file through a symlink that someone
else could have planted, and never writes into another user's file. A symlink at PATH is followed only
if it is the running user's own, or if its directory can be written by no one but the running user
and root (e.g. `/dev/stdout`). A regular file (or an untrusted symlink, or another user's non-regular
file) at PATH is never opened: the output is written to a new file created beside it with
`O_CREAT|O_EXCL|O_NOFOLLOW` and renamed over PATH, so whatever was at PATH is replaced, and the file a
symlink pointed to is left untouched. The running user's own device, FIFO or socket (`/dev/null`,
`/dev/full`, a named pipe) is opened as it is, with `O_NOFOLLOW`."""
from __future__ import annotations

import errno
import os
import stat
from typing import IO, Optional

_MAX_LINKS = 40


def _trusted_link(path: str, st: os.stat_result) -> bool:
    if st.st_uid == os.geteuid():
        return True
    try:
        d = os.stat(os.path.dirname(path) or ".")
    except OSError:
        return False
    return d.st_uid in (0, os.geteuid()) and not d.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _resolve(path: str):
    """PATH after the trusted symlinks at its last component: (path, its lstat or None), and whether
    what is there may be opened as it is (the user's own, or root's, non-regular file)."""
    for _ in range(_MAX_LINKS):
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return path, None
        if stat.S_ISLNK(st.st_mode) and _trusted_link(path, st):
            path = os.path.join(os.path.dirname(path), os.readlink(path))
            continue
        return path, st
    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))


class Output:
    """An output file. `file` is the open file object; `commit()` makes it appear at its path (for a
    file written beside its path: the rename) and closes it, `discard()` closes it and removes what
    was written if it was not committed yet."""

    def __init__(self, file: IO, path: str, dir_fd: Optional[int], temp: Optional[str]):
        self.file = file
        self.path = path
        self._dir_fd = dir_fd
        self._temp = temp

    def _publish(self) -> None:
        if self._temp is not None:
            os.rename(self._temp, os.path.basename(self.path), src_dir_fd=self._dir_fd, dst_dir_fd=self._dir_fd)
            self._temp = None

    def commit(self) -> None:
        try:
            self.file.close()
            self._publish()
        finally:
            self._close_dir()

    def discard(self) -> None:
        try:
            self.file.close()
        except OSError:
            pass
        if self._temp is not None:
            try:
                os.unlink(self._temp, dir_fd=self._dir_fd)
            except OSError:
                pass
            self._temp = None
        self._close_dir()

    def _close_dir(self) -> None:
        if self._dir_fd is not None:
            os.close(self._dir_fd)
            self._dir_fd = None


def open_output(path: str, binary: bool = True, publish_now: bool = False, buffering: int = -1) -> Output:
    """Open `path` for writing by the rule above; raises OSError (its strerror says why).
    publish_now: the file is at `path` from the start (a recording killed midway leaves what it
    wrote there); else only at `commit()` (a failed write leaves what was at `path` as it was)."""
    mode = "wb" if binary else "w"
    encoding = None if binary else "utf-8"
    target, st = _resolve(path)
    if st is not None and not stat.S_ISREG(st.st_mode) and not stat.S_ISLNK(st.st_mode) \
            and not stat.S_ISDIR(st.st_mode) and st.st_uid in (0, os.geteuid()):
        fd = os.open(target, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY)
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
            return Output(os.fdopen(fd, mode, buffering=buffering, encoding=encoding), target, None, None)
        os.close(fd)                                # swapped since it was looked at: replace it instead
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise OSError(errno.EISDIR, os.strerror(errno.EISDIR))
    folder = os.path.dirname(target) or "."
    base = os.path.basename(target)
    dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for _ in range(100):
            temp = f".{base[:200]}.{os.urandom(6).hex()}.tmp"
            try:
                fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666,
                             dir_fd=dir_fd)
                break
            except FileExistsError:
                continue
        else:
            raise OSError(errno.EEXIST, os.strerror(errno.EEXIST))
        out = Output(os.fdopen(fd, mode, buffering=buffering, encoding=encoding), target, dir_fd, temp)
    except BaseException:
        os.close(dir_fd)
        raise
    if publish_now:
        try:
            out._publish()
        except BaseException:
            out.discard()
            raise
    return out


# ---------------------------------------------------------------- terminal-safe text
def _escape_table():
    table = {}
    for c in list(range(0x20)) + list(range(0x7f, 0xa0)):
        table[c] = f"\\x{c:02x}"
    # bidirectional overrides and isolates ("Trojan Source"): they reorder what the terminal shows
    for c in list(range(0x202a, 0x202f)) + list(range(0x2066, 0x206a)) + [0x200e, 0x200f, 0x061c]:
        table[c] = f"\\u{c:04x}"
    return table


_ESCAPES = _escape_table()


def printable(text) -> str:
    """`text` with every control character (C0, DEL, C1: escape sequences, BEL, newlines, carriage
    returns) and every bidirectional-override character written as a visible escape (`\\x1b`,
    `\\u202e`), so a name the profiled program chose cannot drive the terminal it is printed on,
    nor forge a line. Other text (UTF-8 names, backslashes) is unchanged."""
    text = text if isinstance(text, str) else str(text)
    if text.isprintable():
        return text
    return text.translate(_ESCAPES)


def printable_json(text: str) -> str:
    """A JSON document's text with its C1 control characters (which JSON leaves raw) escaped as
    `\\u0080`..`\\u009f`: valid JSON, the same strings, nothing a terminal acts on. (JSON itself
    escapes C0; C1 characters can only occur inside strings.)"""
    if text.isascii() and "\x7f" not in text:
        return text
    return text.translate(_C1_JSON)


_C1_JSON = {c: f"\\u{c:04x}" for c in range(0x7f, 0xa0)}
