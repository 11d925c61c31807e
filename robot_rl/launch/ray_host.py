"""The Ray actor class of `robot-rl launch --backend ray`: it holds one process (learner or actor) on its node.

Plain Python (no Ray import), so that it is testable without Ray; :mod:`.ray_backend` wraps it with
``ray.remote``. A host restarted by Ray runs ``__init__`` again, which starts the process again.
"""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

from robot_rl.launch import processes


class ProcessHost:
    """Start ``argv`` (in ``cwd``) with its output appended to ``log_path``; report, restart and stop it."""

    def __init__(self, argv: list[str], log_path: str, cwd: str | None = None) -> None:
        self.argv, self.log_path, self.cwd = argv, Path(log_path), cwd
        self._offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        self.process: subprocess.Popen[bytes] = processes.start_logged(argv, self.log_path, cwd)

    def poll(self) -> int | None:
        """The process's exit code, None while it runs."""
        return self.process.poll()

    def restart(self) -> None:
        """Start the process again (after it exited)."""
        if self.process.poll() is None:
            return
        self.process = processes.start_logged(self.argv, self.log_path, self.cwd)

    def new_output(self) -> list[str]:
        """The lines the process wrote since the last call (complete lines only)."""
        if not self.log_path.exists():
            return []
        with open(self.log_path, "rb") as f:
            f.seek(self._offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self._offset += end
        return [line + "\n" for line in data[:end].decode(errors="replace").splitlines()]

    def node_ip(self) -> str:
        """The node's address as other nodes reach it."""
        try:
            import ray

            return str(ray.util.get_node_ip_address())
        except ImportError:
            return socket.gethostbyname(socket.gethostname())

    def stop(self, grace_s: float) -> int | None:
        """SIGTERM, SIGKILL after ``grace_s``; the exit code."""
        processes.stop([self.process], grace_s)
        return self.process.returncode
