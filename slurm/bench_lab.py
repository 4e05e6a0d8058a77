"""The running multi-node lab, for the benchmarks that drive it (slurm/bench-scale, slurm/bench-soak).

Its nodes from `etc/nodes`, its Slurm tools run in the controller's network namespace (and the lab's
root, for a Slurm in one), as slurm/lab-nodes and the end-to-end tests run them.
"""

import hashlib
import os
import re
import subprocess
import sys

TEST_USER = os.environ.get("GMQ_TEST_USER", "gmq-user")
PROGRAM = os.path.basename(sys.argv[0])


def say(text):
    print(f"{PROGRAM}: {text}", flush=True)


def die(text):
    print(f"{PROGRAM}: error: {text}", file=sys.stderr)
    sys.exit(1)


def _read(lab, name):
    """A file of the lab's etc/, stripped; "" where there is none."""
    try:
        with open(os.path.join(lab, "etc", name)) as f:
            return f.read().strip()
    except OSError:
        return ""


def tool_prefix(lab, uts=False):
    """What runs a command where the lab's slurmctld is: nothing for a one-node lab; for a multi-node
    lab its controller's network namespace (and UTS namespace, with its host name, where `uts`), as
    slurm/lab-nodes sets them up, and the lab's root for a Slurm in one."""
    netns = _read(lab, "login-netns")
    if not netns:
        return []
    prefix = ["/usr/bin/nsenter", f"--net={netns}"]
    if uts:
        # slurm/lab-nodes' nodes_nsdir: /run/gmq-lab- and the first 4 hex digits of the lab path's md5.
        prefix.append(f"--uts=/run/gmq-lab-{hashlib.md5(lab.encode()).hexdigest()[:4]}/ctl.uts")
    prefix.append("--")
    root = _read(lab, "slurm-root")
    return prefix + (["/usr/sbin/chroot", root] if root else [])


class Lab:
    """The running multi-node lab: its nodes, and its Slurm tools run where slurmctld is reachable."""

    def __init__(self, path):
        self.path = path
        self.nodes = [line.split()[0] for line in _read(path, "nodes").splitlines() if line.strip()]
        self.prefix = tool_prefix(path)
        if not self.nodes or not self.prefix:
            die(f"no multi-node lab at {path} (NODES=16 GPUS=8 slurm/dev-cluster start)")
        self.env = dict(os.environ, SLURM_CONF=os.path.join(path, "etc/slurm.conf"))

    def tool(self, *args, check=True):
        out = subprocess.run(self.prefix + list(args), env=self.env, capture_output=True, text=True,
                             timeout=60)
        if check and out.returncode != 0:
            die(f"{' '.join(args)}: {out.stderr.strip()}")
        return out.stdout

    def as_user(self, *args):
        home = f"/home/{TEST_USER}"
        return self.tool("/usr/sbin/runuser", "-u", TEST_USER, "--", "/usr/bin/env", "-i", "-C", home,
                         f"HOME={home}", f"USER={TEST_USER}", "PATH=/usr/bin:/bin",
                         f"SLURM_CONF={self.env['SLURM_CONF']}", *args)

    def gpus_per_node(self):
        line = self.tool("scontrol", "show", "node", self.nodes[0], "-o")
        m = re.search(r"Gres=gpu:(?:\w+:)?(\d+)", line)
        return int(m.group(1)) if m else 1

    def node_dir(self, node):
        return os.path.join(self.path, "nodes", node)

    def status_file(self, node, job):
        return os.path.join(self.path, "nodes", node, "gmq/run/jobs", str(job), "status.json")
