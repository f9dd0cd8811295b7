"""A TCP proxy the fault tests put between txqueue and a service, to cut and restore."""

from __future__ import annotations

import contextlib
import socket
import threading


class Proxy:
    """Forwards ``listen``:``port`` (by default on loopback) to the target. ``cut()`` drops
    every connection and refuses new ones, as a crashed server or a pulled cable does;
    ``restore()`` listens again on the same port.

    While cut, the port stays bound (not listening, so connections are refused): released,
    it is an ephemeral port the kernel may hand to any new outgoing connection, and the
    restore would then fail with "address already in use".
    """

    def __init__(
        self, target_port: int, target_host: str = "127.0.0.1", listen: str = "127.0.0.1"
    ) -> None:
        self.target = (target_host, target_port)
        self.listen = listen
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self._held: socket.socket | None = None
        self.port = 0
        self.cuts = 0
        self.muted = False
        self.restore()

    def restore(self) -> None:
        with self._lock:
            if self._listener is not None:
                return
            listener, self._held = self._held or self._bind(), None
            listener.listen()
            listener.settimeout(0.05)
            self.port = listener.getsockname()[1]
            self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def mute(self) -> None:
        """Go on forwarding what clients send, but drop what the target answers: a write
        commits and its reply is lost, as when a partition falls between the two."""
        self.muted = True

    def cut(self) -> None:
        self.muted = False
        with self._lock:
            listener, self._listener = self._listener, None
            sockets, self._sockets = self._sockets, set()
            self.cuts += 1
            if listener is not None and self._held is None:
                self._held = self._bind()
        if listener is not None:
            listener.close()
        for s in sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def close(self) -> None:
        self.cut()
        with self._lock:
            held, self._held = self._held, None
        if held is not None:
            held.close()

    def _bind(self) -> socket.socket:
        """A socket bound to the proxy's port (a new one if none yet) without listening;
        SO_REUSEPORT lets it share the port with the listener it is about to replace."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((self.listen, self.port))
        except OSError:
            sock.close()  # not left for the garbage collector to warn about in a later test
            raise
        return sock

    def url(self, url: str) -> str:
        """``url`` with its host:port pointed at this proxy."""
        scheme, rest = url.split("://", 1)
        auth, _, tail = rest.rpartition("@")
        path = tail.split("/", 1)[1] if "/" in tail else ""
        return f"{scheme}://{auth + '@' if auth else ''}{self.listen}:{self.port}/{path}"

    def _accept(self, listener: socket.socket) -> None:
        while self._listener is listener:
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            client.settimeout(None)
            upstream.settimeout(None)
            with self._lock:
                if self._listener is not listener:
                    client.close()
                    upstream.close()
                    return
                self._sockets.update((client, upstream))
            for src, dst, answers in ((client, upstream, False), (upstream, client, True)):
                pump = threading.Thread(target=self._pump, args=(src, dst, answers), daemon=True)
                pump.start()

    def _pump(self, src: socket.socket, dst: socket.socket, answers: bool) -> None:
        try:
            while data := src.recv(65536):
                if not (answers and self.muted):
                    dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
        with self._lock:
            self._sockets.discard(src)
            self._sockets.discard(dst)
        src.close()
