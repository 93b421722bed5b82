"""Ray nodes and MLflow servers on 127.0.0.1 for the integration tests and `chaos.py`.

Each server is started in its own session (process group), so stopping it ends exactly the
processes started here and nothing else on the machine (no `ray stop`, which would also stop
other people's Ray). A cluster runs with Ray 2.60's token auth, the token kept in the
environment (no ~/.ray/auth_token is written).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import requests

BIN = Path(sys.executable).parent


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """`count` distinct free ports: every socket stays bound until all are chosen (one at a
    time, the system may hand the same port out twice, and Ray refuses a node whose
    components share one)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def wait_for(predicate, timeout_s: float, what: str, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.3)
    tail = log.read_text()[-3000:] if log and log.exists() else ""
    raise TimeoutError(f"{what} not ready after {timeout_s} s\n{tail}")


def stop(process: subprocess.Popen, grace_s: float = 30.0) -> None:
    """SIGTERM the process we started (it ends its children), then SIGKILL its group."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)  # the group we created with start_new_session
    except ProcessLookupError:
        pass
    process.wait(timeout=10)


# What `ray start` prints when the node gives up waiting on the GCS during start-up.
STARTUP_TIMEOUT = "timed out during startup"


@dataclass
class RayCluster:
    gcs_address: str
    dashboard_url: str
    env: dict[str, str]
    root: Path  # the nodes' --temp-dir parent: sessions, logs, unpacked job uploads
    processes: list[subprocess.Popen] = field(default_factory=list)

    @property
    def pids(self) -> set[int]:
        return {p.pid for p in self.processes}


def _chosen_ports(flags: tuple[str, ...]) -> dict[str, int]:
    """Several nodes share this machine, so every port of a node is chosen (distinct), not defaulted."""
    return dict(zip(flags, free_ports(len(flags))))


def _as_arguments(ports: dict[str, int]) -> list[str]:
    return [item for flag, port in ports.items() for item in (flag, str(port))]


NODE_PORT_FLAGS = ("--node-manager-port", "--object-manager-port", "--dashboard-agent-listen-port",
                   "--dashboard-agent-grpc-port", "--runtime-env-agent-port", "--metrics-export-port")
HEAD_PORT_FLAGS = ("--port", "--dashboard-port", "--ray-client-server-port", *NODE_PORT_FLAGS)


NODE_FLAGS = ["--num-cpus", "1", "--object-store-memory", str(100 * 1024**2), "--disable-usage-stats",
              "--node-ip-address", "127.0.0.1", "--block"]


def add_worker_node(cluster: RayCluster, name: str) -> subprocess.Popen:
    """Start one more 1-CPU node (temp dir `cluster.root / name`) and wait until it has joined.

    A node that gives up during start-up (Ray's "timed out during startup": its GCS calls
    stalled, as on a 2-core machine under the test suite's load) is started once more, with
    fresh ports and temp dir; any other exit is an error."""
    for attempt in range(2):
        label = name if attempt == 0 else f"{name}-retry"
        log = cluster.root / f"{label}.log"
        process = subprocess.Popen(
            [str(BIN / "ray"), "start", "--address", cluster.gcs_address, "--temp-dir", str(cluster.root / label),
             *NODE_FLAGS, *_as_arguments(_chosen_ports(NODE_PORT_FLAGS))],
            env=cluster.env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True,
        )
        cluster.processes.append(process)
        wait_for(lambda: "Ray runtime started" in log.read_text() or process.poll() is not None, 120,
                 f"ray node {label}", log)
        if process.poll() is None:
            return process
        if attempt == 0 and STARTUP_TIMEOUT in log.read_text():
            continue
        break
    raise RuntimeError(f"ray node {label} exited with {process.returncode}\n{log.read_text()[-3000:]}")


@contextmanager
def started_ray_cluster(prefix: str = "wdr", nodes: int = 2, extra_env: dict[str, str] | None = None) -> Iterator[RayCluster]:
    """A Ray head (Jobs API on: the dashboard) and `nodes - 1` more (`node2`, ...), 1 CPU each,
    stopped on exit; `extra_env` joins every node's environment."""
    root = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))  # short: Ray's socket paths have a length limit
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(
        RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(16), RAY_USAGE_STATS_ENABLED="0",
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", OMP_NUM_THREADS="1", **(extra_env or {}),
    )
    ports = _chosen_ports(HEAD_PORT_FLAGS)
    gcs, dashboard = ports["--port"], ports["--dashboard-port"]
    head_log = root / "head.log"
    cluster = RayCluster(f"127.0.0.1:{gcs}", f"http://127.0.0.1:{dashboard}", env, root)
    try:
        cluster.processes.append(subprocess.Popen(
            [str(BIN / "ray"), "start", "--head", "--include-dashboard=true", "--dashboard-host", "127.0.0.1",
             "--temp-dir", str(root / "head"), *NODE_FLAGS, *_as_arguments(ports)],
            env=env, stdout=head_log.open("w"), stderr=subprocess.STDOUT, start_new_session=True,
        ))

        def dashboard_up() -> bool:
            try:  # 401 without the token: up, and token auth is on
                return requests.get(f"{cluster.dashboard_url}/api/version", timeout=2).status_code in (200, 401)
            except requests.RequestException:
                return False

        wait_for(dashboard_up, 120, "ray head", head_log)
        for number in range(2, nodes + 1):
            add_worker_node(cluster, f"node{number}")
        yield cluster
    finally:
        for process in reversed(cluster.processes):
            stop(process)
        shutil.rmtree(root, ignore_errors=True)


def node_raylet(cluster: RayCluster, node: str) -> int | None:
    """The pid of the raylet of `node` ("head", "node2", ...), found by its temp dir."""
    temp_dir = str(cluster.root / node)
    for pid, (_, cmdline, _) in processes().items():
        if cmdline.split(" ")[0].endswith("/raylet") and f"{temp_dir}/" in cmdline:
            return pid
    return None


# MLflow 3.x starts a job runner beside every server (eight processes that each import MLflow,
# for its GenAI jobs): this project runs none, and on 2 cores they slow the server's start 2x.
def _mlflow_server_env() -> dict[str, str]:
    return {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}


@dataclass
class MlflowServer:
    uri: str
    process: subprocess.Popen
    log: Path
    admin_password: str | None = None  # None: no authentication (a benchmark's server)

    @property
    def credentials(self) -> dict[str, str]:
        """The variables a client (the runner, its workers, MlflowClient) takes its login from."""
        if self.admin_password is None:
            return {}
        return {"MLFLOW_TRACKING_USERNAME": "admin", "MLFLOW_TRACKING_PASSWORD": self.admin_password}

    def log_in(self, monkeypatch) -> None:
        """Put the login in this test's environment: for the commands it starts and MlflowClient."""
        for name, value in self.credentials.items():
            monkeypatch.setenv(name, value)

    def up(self) -> bool:
        try:
            return requests.get(f"{self.uri}/health", timeout=2).status_code == 200
        except requests.RequestException:
            return False


def start_mlflow_server(root: Path, port: int | None = None, admin_password: str | None = None,
                        backend_store_uri: str | None = None, workers: int = 1,
                        env: dict[str, str] | None = None, auth: bool = True,
                        auth_cache_s: int = 60) -> MlflowServer:
    """`mlflow server` on 127.0.0.1 with a sqlite backend (or `backend_store_uri`) and proxied
    artifacts under `root`, in a session of its own; started without waiting (see
    `MlflowServer.up`). MLflow's basic-auth app guards it (`auth`, on for every test): user
    `admin`, `admin_password` (a fresh one unless given; a server started again on the same
    `root` keeps its first, so pass it). A password check is a deliberately slow hash (0.4 s a
    request on 2 cores); `auth_cache_s` keeps a good login that long, as docs/reliability.md
    advises a lab's server (0: every request checked). `env`: added to its environment (a
    database's PGUSER / PGPASSWORD)."""
    port = port or free_port()
    log = root / "server.log"
    env, auth_app = {**_mlflow_server_env(), **(env or {})}, []
    if not auth:
        admin_password = None
    elif admin_password is None:
        admin_password = secrets.token_urlsafe(18)
    if admin_password is not None:
        (root / "basic_auth.ini").write_text(
            f"[mlflow]\ndefault_permission = READ\ndatabase_uri = sqlite:///{root}/basic_auth.db\n"
            f"admin_username = admin\nadmin_password = {admin_password}\n"
            f"auth_cache_ttl_seconds = {auth_cache_s}\n"
            "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n")
        env["MLFLOW_AUTH_CONFIG_PATH"] = str(root / "basic_auth.ini")
        env["MLFLOW_FLASK_SERVER_SECRET_KEY"] = secrets.token_hex(16)  # its CSRF protection's key
        auth_app = ["--app-name", "basic-auth"]
    process = subprocess.Popen(
        [str(BIN / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers), *auth_app,
         "--backend-store-uri", backend_store_uri or f"sqlite:///{root}/mlflow.db", "--artifacts-destination", str(root / "artifacts")],
        cwd=root, env=env, stdout=log.open("a"), stderr=subprocess.STDOUT, start_new_session=True,
    )
    return MlflowServer(f"http://127.0.0.1:{port}", process, log, admin_password)


def start_mlflow_ui(tracking_uri: str, log: Path, port: int | None = None, workers: int | None = None) -> MlflowServer:
    """`mlflow ui` over `tracking_uri` on 127.0.0.1, as the README starts it; not waited for.
    `workers`: its server processes (MLflow's default, 4, unless given; four that each import
    MLflow as they start take 2-3 times as long as one to answer on 2 cores)."""
    port = port or free_port()
    process = subprocess.Popen(
        [str(BIN / "mlflow"), "ui", "--host", "127.0.0.1", "--port", str(port), "--backend-store-uri", tracking_uri,
         *(["--workers", str(workers)] if workers else [])],
        env=_mlflow_server_env(), stdout=log.open("a"), stderr=subprocess.STDOUT, start_new_session=True,
    )
    return MlflowServer(f"http://127.0.0.1:{port}", process, log)


def processes() -> dict[int, tuple[int, str, float]]:
    """pid -> (parent pid, command line, start time in clock ticks), from /proc."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        table[int(entry.name)] = (int(fields[1]), cmdline, float(fields[19]))
    return table
