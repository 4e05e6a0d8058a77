#!/usr/bin/env python3
"""Records docs/img/nodes-metrics.csv and nodes-report.txt on the multi-node lab, for render_nodes.py.

As root, with a lab of three nodes up (`NODES=3 slurm/dev-cluster start`) and its default policy:

    python3 docs/img/capture_nodes.py [--lab /var/lib/gpu-mem-quota-lab-nodes]

It submits three jobs as the test user, the way a user would (sbatch in the controller's network
namespace), and reads every node's Prometheus textfiles (the policy's textfile_dir, which a node
exporter would serve) every half second until they have ended:

- `two-node`: -N2, one GPU per node, a 20G quota. On its second node the task grows 8G, 14G, 25G
  (over the quota: the watchdog there warns, then requeues the whole job after the grace period);
  on its first node it stays at 10G. The restart holds 14G on both nodes for 20 s.
- `nearly-full`: one GPU on n3, 30G: grows 12G, 20G, 28G (past 90 %, a warning) and ends.
- `steady`: one GPU on n1, 12G: 6G for 45 s.

Each CSV row is one sample of one series: the seconds since the capture began, the node (Prometheus'
`instance` label, which the scrape adds), the metric, its labels and value.
"""

import argparse
import csv
import re
import subprocess
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
USER = "gmq-user"
SAMPLE_S = 0.5
LINE = re.compile(r'^(gpu_mem_quota_\w+)\{([^}]*)\} (\S+)$')
LABEL = re.compile(r'(\w+)="([^"]*)"')

# A task's body: `claim SIZE` holds fake GPU memory on the task's GPU for its pid.
CLAIM = ('G=${SLURM_STEP_GPUS:-$SLURM_JOB_GPUS}; G=${G%%,*}; f=/var/lib/fake-nvml/procs/$G/$$; '
         "trap 'rm -f $f' EXIT; claim() { echo \"$1\" > $f; }")
TASKS = {
    "two-node": CLAIM + """
run=${SLURM_RESTART_COUNT:-0}
if [ "$run" = 0 ] && [ "$SLURM_NODEID" = 1 ]; then
    claim 8G; sleep 6; claim 14G; sleep 6; claim 25G; sleep 120
elif [ "$run" = 0 ]; then
    claim 10G; sleep 140
else
    claim 14G; sleep 20
fi
""",
    "nearly-full": CLAIM + "\nclaim 12G; sleep 8; claim 20G; sleep 8; claim 28G; sleep 20\n",
    "steady": CLAIM + "\nclaim 6G; sleep 45\n",
}
OPTIONS = {
    "two-node": ["-N2", "--ntasks-per-node=1", "--gres=gpu:1", "--gpu-mem-quota=20G"],
    "nearly-full": ["-w", "n3", "--gres=gpu:1", "--gpu-mem-quota=30G"],
    "steady": ["-w", "n1", "--gres=gpu:1", "--gpu-mem-quota=12G"],
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lab", default="/var/lib/gpu-mem-quota-lab-nodes")
    args = parser.parse_args()
    lab = Path(args.lab)
    netns = (lab / "etc/login-netns").read_text().strip()
    nodes = [line.split()[0] for line in (lab / "etc/nodes").read_text().splitlines() if line.strip()]
    conf = str(lab / "etc/slurm.conf")
    tool = ["/usr/bin/nsenter", f"--net={netns}", "--"]
    root = lab / "etc/slurm-root"
    if root.exists():
        tool += ["/usr/sbin/chroot", root.read_text().strip()]
    env = {"SLURM_CONF": conf, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}

    work = Path(f"/home/{USER}/gmq-capture")
    subprocess.run(tool + ["runuser", "-u", USER, "--", "mkdir", "-p", str(work)], check=True, env=env)
    jobs = {}
    for name, body in TASKS.items():
        script = work / f"{name}.sh"
        script.write_text("#!/bin/bash\n" + body)
        script.chmod(0o755)
        wrap = f"srun {script}" if name == "two-node" else str(script)
        out = subprocess.run(
            tool + ["runuser", "-u", USER, "--", "env", f"SLURM_CONF={conf}", "sbatch", "--parsable",
                    "-J", name, "-o", str(work / f"{name}-%j.out"), "--open-mode=append",
                    *OPTIONS[name], "--wrap", wrap],
            check=True, capture_output=True, text=True, env=env)
        jobs[name] = out.stdout.strip().split(";")[0]
    print("jobs:", jobs)

    rows = []
    start = time.monotonic()
    idle_since = None
    while time.monotonic() - start < 300:
        t = round(time.monotonic() - start, 2)
        for node in nodes:
            for prom in sorted((lab / "nodes" / node / "gmq/metrics").glob("gpu_mem_quota_*.prom")):
                try:
                    text = prom.read_text()
                except FileNotFoundError:
                    continue  # the job's watchdog removed it between the listing and the read
                for line in text.splitlines():
                    match = LINE.match(line)
                    if match:
                        labels = dict(LABEL.findall(match.group(2)))
                        rows.append({"t": t, "instance": node, "metric": match.group(1),
                                     "job_id": labels.get("job_id", ""), "gpu": labels.get("gpu", ""),
                                     "kind": labels.get("kind", ""), "value": match.group(3)})
        queued = subprocess.run(tool + ["squeue", "-h", "-j", ",".join(jobs.values()), "-o", "%i"],
                                capture_output=True, text=True, env=env).stdout.strip()
        if queued:
            idle_since = None
        elif idle_since is None:
            idle_since = t
        elif t - idle_since > 2:
            break
        time.sleep(SAMPLE_S)

    with open(HERE / "nodes-metrics.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, ["t", "instance", "metric", "job_id", "gpu", "kind", "value"])
        writer.writeheader()
        writer.writerows(rows)
    binary = str(lab / "bin/gpu-mem-quota")
    report = subprocess.run(tool + [binary, "report", "-j", jobs["two-node"]], capture_output=True,
                            text=True, env=env)
    (HERE / "nodes-report.txt").write_text(report.stdout)
    (HERE / "nodes-jobs.txt").write_text("".join(f"{name} {job}\n" for name, job in jobs.items()))
    print(f"{len(rows)} samples over {rows[-1]['t'] if rows else 0:.0f} s; report:\n{report.stdout}")


if __name__ == "__main__":
    main()
