"""A ``Proxy`` in a process of its own, for a test whose own process is busy (producers on
many threads): there its forwarding would wait for the GIL, and the service behind it
look slow. SIGUSR1 cuts it, SIGUSR2 restores it.

    python -m tests.faults.proxy_process TARGET_PORT   # prints the port it listens on
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path

from .proxy import Proxy

ROOT = Path(__file__).resolve().parents[2]


class ProxyProcess:
    """The proxy's process, to ``cut``, ``restore`` and ``close``; ``port``: where it listens."""

    def __init__(self, target_port: int) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tests.faults.proxy_process", str(target_port)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._proc.stdout is not None
        self.port = int(self._proc.stdout.readline())

    def url(self, url: str) -> str:
        """``url`` with its host:port pointed at this proxy."""
        scheme, rest = url.split("://", 1)
        auth, _, tail = rest.rpartition("@")
        path = tail.split("/", 1)[1] if "/" in tail else ""
        return f"{scheme}://{auth + '@' if auth else ''}127.0.0.1:{self.port}/{path}"

    def cut(self) -> None:
        self._proc.send_signal(signal.SIGUSR1)

    def restore(self) -> None:
        self._proc.send_signal(signal.SIGUSR2)

    def close(self) -> None:
        self._proc.terminate()
        self._proc.wait(10)
        if self._proc.stdout is not None:
            self._proc.stdout.close()


def main() -> None:
    proxy = Proxy(int(sys.argv[1]))
    signal.signal(signal.SIGUSR1, lambda *_: proxy.cut())
    signal.signal(signal.SIGUSR2, lambda *_: proxy.restore())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop = threading.Event()
    print(proxy.port, flush=True)
    while not stop.wait(0.5):
        pass
    proxy.close()


if __name__ == "__main__":
    main()
