"""Stand-ins for Slurm's `sbatch`, `srun`, `scontrol` and for `hostname`, so that a job script
runs on this machine with every "node" a set of processes on 127.0.0.1.

`write_standins(folder, root)` writes them as executables into `folder`; put it first on PATH.
`srun -w NODE ray start ...` runs Ray with the node's own ports and temp dir under `root`
(several nodes share this machine, so nothing may be defaulted); any other command runs as is.
`sbatch --nodes=N SCRIPT ARGS` runs SCRIPT in the foreground with the job's variables set.
"""

from __future__ import annotations

import stat
import sys
from pathlib import Path

SRUN = r'''
import os, sys
sys.path.insert(0, {repo!r})
from tests.support.local_servers import free_ports
args = sys.argv[1:]
node = "node"
while args and args[0].startswith("-"):  # --nodes=1 --ntasks=1 -w NODE
    flag = args.pop(0)
    if flag == "-w":
        node = args.pop(0)
if args[:1] and args[0].endswith("/ray") and args[1:2] == ["start"]:
    flags = ["--node-manager-port", "--object-manager-port", "--dashboard-agent-listen-port",
             "--dashboard-agent-grpc-port", "--runtime-env-agent-port", "--metrics-export-port"]
    if "--head" in args:
        flags += ["--dashboard-port", "--ray-client-server-port"]
        args += ["--include-dashboard=true", "--dashboard-host", "127.0.0.1"]
    args += [a for flag, port in zip(flags, free_ports(len(flags))) for a in (flag, str(port))]
    args += ["--temp-dir", os.path.join({root!r}, node), "--object-store-memory", str(100 * 1024**2)]
    if "--node-ip-address" not in " ".join(args):
        args += ["--node-ip-address", "127.0.0.1"]
os.execvp(args[0], args)
'''

SCONTROL = r'''
import re, sys
assert sys.argv[1:3] == ["show", "hostnames"], sys.argv
match = re.fullmatch(r"(\w+?)\[(\d+)-(\d+)\]", sys.argv[3])
names = [f"{{match[1]}}{{i}}" for i in range(int(match[2]), int(match[3]) + 1)] if match else sys.argv[3].split(",")
print("\n".join(names))
'''

SBATCH = r'''
import os, sys
args = sys.argv[1:]
nodes = 1
while args[0].startswith("--"):
    flag = args.pop(0)
    if flag.startswith("--nodes="):
        nodes = int(flag.split("=", 1)[1])
os.environ.update(SLURM_JOB_ID="1", SLURM_JOB_NUM_NODES=str(nodes), SLURM_JOB_NODELIST=f"node[1-{{nodes}}]",
                  SLURM_CPUS_PER_TASK=os.environ.get("SLURM_CPUS_PER_TASK", "1"))
os.execvp("bash", ["bash", *args])
'''

HOSTNAME = r'''
print("127.0.0.1")
'''


def write_standins(folder: Path, root: Path) -> None:
    repo = str(Path(__file__).resolve().parents[2])
    folder.mkdir(parents=True, exist_ok=True)
    for name, body in {"srun": SRUN, "scontrol": SCONTROL, "sbatch": SBATCH, "hostname": HOSTNAME}.items():
        path = folder / name
        path.write_text(f"#!{sys.executable}\n" + body.format(repo=repo, root=str(root)))
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
