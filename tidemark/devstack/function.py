"""Serve a Cloud Function locally with functions-framework, for tests and `tidemark up`.

    server = FunctionServer(source_dir, target="on_notice", env={...}).start()
    server.url        # a Pub/Sub push endpoint: the push body becomes a CloudEvent
    server.stop()

`source_dir` is the repo's cloud_function/ or a bundle built by `tidemark function-bundle`. With
isolated=True (for a bundle) the process gets PYTHONPATH=source_dir only and runs from inside it,
as Cloud Functions does; first-party modules then resolve to the bundle's copies.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

from tidemark.devstack import process


class FunctionServer:
    """A Cloud Function served by functions-framework on 127.0.0.1."""

    def __init__(
        self,
        source_dir: str,
        target: str = "on_notice",
        port: int | None = None,
        env: dict[str, str] | None = None,
        signature_type: str = "cloudevent",
        isolated: bool = False,
        log_path: str | None = None,
    ):
        """Serve `target` of `source_dir`/main.py; `isolated`: with the source folder alone on its path."""
        self.source_dir = os.path.abspath(source_dir)
        self.target = target
        self.port = port or process.free_port()
        self.env = dict(env or {})
        self.signature_type = signature_type
        self.isolated = isolated
        # Not inside source_dir: a bundle folder must stay exactly what gets deployed.
        self.log_path = log_path or os.path.join(tempfile.gettempdir(), f"tidemark-function-{self.port}.log")
        self.url = f"http://127.0.0.1:{self.port}/"
        self.managed: process.Managed | None = None
        self.start_seconds: float | None = None

    def start(self, timeout: float = 60) -> FunctionServer:
        """Start the server and wait until its port accepts connections."""
        binary = os.path.join(os.path.dirname(sys.executable), "functions-framework")
        argv = [
            binary,
            "--source",
            os.path.join(self.source_dir, "main.py"),
            "--target",
            self.target,
            "--signature-type",
            self.signature_type,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
        ]
        env = {"PYTHONUNBUFFERED": "1", **self.env}
        if self.isolated:
            env["PYTHONPATH"] = self.source_dir
            env["PYTHONDONTWRITEBYTECODE"] = "1"
        started = time.monotonic()
        self.managed = process.start(
            f"function-{self.target}",
            argv,
            self.log_path,
            env=env,
            cwd=self.source_dir if self.isolated else None,
            url=self.url,
        )
        process.wait_until(lambda: process.port_open(self.port), timeout, "functions-framework", self.managed)
        self.start_seconds = round(time.monotonic() - started, 2)
        return self

    def stop(self) -> None:
        """Stop the server's process group."""
        if self.managed is not None:
            process.stop(self.managed)
            self.managed = None

    def log(self) -> str:
        """The server's log so far ("" before it started)."""
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as handle:
                return handle.read()
        except FileNotFoundError:
            return ""

    def __enter__(self) -> FunctionServer:
        """Start the server."""
        return self.start()

    def __exit__(self, *exc: object) -> None:
        """Stop the server."""
        self.stop()
