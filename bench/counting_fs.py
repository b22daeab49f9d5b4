"""A local filesystem that counts its operations, for the benches that measure storage operations.

pyarrow calls the handler for every operation; each one is reported to `count(op, path, n)` (op one
of stat, list, read, write, change) and then, with `latency_s`, sleeps that long: a bucket's round
trip. Subclasses say what they count (bench/history.py: operations by kind; bench/iceberg_history.py:
the table's metadata apart from everything else, with bytes).
"""

from __future__ import annotations

import threading
import time

import pyarrow.fs as pafs


class CountingHandler(pafs.FileSystemHandler):
    delay_changes = True  # deletes, moves and copies cost a round trip too (False: not delayed)

    def __init__(self, latency_s: float = 0.0):
        self.inner = pafs.LocalFileSystem()
        self.latency_s = latency_s
        self.lock = threading.Lock()

    def count(self, op: str, path: str, n: int = 1) -> None:
        raise NotImplementedError

    def listed(self, names: int) -> None:
        """The number of names a list call returned (a bucket returns 1,000 per call)."""

    def _op(self, op: str, path: str = "", n: int = 1) -> None:
        self.count(op, path, n)
        if self.latency_s and (op != "change" or self.delay_changes):
            time.sleep(self.latency_s)

    def get_type_name(self):
        return "counting"

    def equals(self, other):
        return self is other

    def normalize_path(self, path):
        return path

    def get_file_info(self, paths):
        self._op("stat", n=len(paths))
        return self.inner.get_file_info(paths)

    def get_file_info_selector(self, selector):
        self._op("list", selector.base_dir)
        found = self.inner.get_file_info(selector)
        self.listed(len(found))
        return found

    def open_input_stream(self, path):
        self._op("read", path)
        return self.inner.open_input_stream(path)

    def open_input_file(self, path):
        self._op("read", path)
        return self.inner.open_input_file(path)

    def create_dir(self, path, recursive):
        return self.inner.create_dir(path, recursive=recursive)

    def delete_dir(self, path):
        self._op("change", path)
        return self.inner.delete_dir(path)

    def delete_dir_contents(self, path, missing_dir_ok=False):
        self._op("change", path)
        return self.inner.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self):
        raise NotImplementedError

    def delete_file(self, path):
        self._op("change", path)
        return self.inner.delete_file(path)

    def move(self, src, dest):
        self._op("change", src)
        return self.inner.move(src, dest)

    def copy_file(self, src, dest):
        self._op("change", src)
        return self.inner.copy_file(src, dest)

    def open_output_stream(self, path, metadata):
        self._op("write", path)
        return self.inner.open_output_stream(path)

    def open_append_stream(self, path, metadata):
        return self.inner.open_append_stream(path)
