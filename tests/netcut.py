"""A loopback TCP forwarder that a test can cut and restore: a network outage between a client and
a server that keeps its state.

    link = NetCut(emulator.port).start()     # clients use link.host instead of emulator.host
    link.cut()                               # new connections refused, open ones reset
    link.restore()                           # the same address works again

Why not stop and restart the server: the Pub/Sub emulator forgets its topics and subscriptions
when it stops, and a notice published after the topic is recreated but before its subscription is
would be lost by the test setup, not by the code under test. A real outage loses nothing server-side.
"""

from __future__ import annotations

import contextlib
import socket
import threading

from tidemark.devstack import process


class NetCut:
    def __init__(self, target_port: int, port: int | None = None):
        self.target_port = target_port
        self.port = port or process.free_port()
        self._listener: socket.socket | None = None
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._up = threading.Event()

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> NetCut:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        listener.settimeout(0.2)  # so that the accept loop notices a cut
        self._listener = listener
        self._up.set()
        threading.Thread(target=self._accept, args=(listener,), daemon=True, name="netcut-accept").start()
        return self

    restore = start

    def cut(self) -> None:
        """Refuse new connections and reset the open ones, as a dropped network link does."""
        self._up.clear()
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        with self._lock:
            conns, self._open = self._open, set()
        for conn in conns:
            try:
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                conn.close()
            except OSError:
                pass

    stop = cut

    def _accept(self, listener: socket.socket) -> None:
        while self._up.is_set() and self._listener is listener:
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            client.settimeout(None)
            with self._lock:
                self._open.update((client, upstream))
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True, name="netcut-pump").start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):  # one side ended: end the other too, as TCP would
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
                with self._lock:
                    self._open.discard(sock)
