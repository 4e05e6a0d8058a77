#!/usr/bin/env python3
"""Renders docs/img/nodes.png: the Grafana dashboard's panels over the three-node lab's metrics.

`python3 docs/img/render_nodes.py` reads what capture_nodes.py recorded next to it
(nodes-metrics.csv: every node's textfile metrics every half second, labelled by node as a
Prometheus scrape labels them `instance`; nodes-report.txt; nodes-jobs.txt) and draws the panels
of etc/grafana-dashboard.json with their queries evaluated over those samples: the "Node
$instance" row repeated for each node, the "Job $job_id" row's used/peak/quota panel for the
two-node job, and "Quota events by kind" over the nodes' event counters. It is not a
Grafana screenshot (no Grafana here); the queries, layout and data are the dashboard's and the
lab's. Needs matplotlib.
"""

import csv
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).resolve().parent
GIB = 1 << 30
WARN = 0.9  # the panels' "over 90 % of quota"
COLOURS = ["#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2"]


def read_samples():
    """{(metric, instance, job_id, gpu or kind): [(t, value)]}, in time order."""
    series = defaultdict(list)
    with open(HERE / "nodes-metrics.csv", newline="") as f:
        for row in csv.DictReader(f):
            key = (row["metric"], row["instance"], row["job_id"], row["gpu"] or row["kind"])
            series[key].append((float(row["t"]), float(row["value"])))
    return series


def jobs():
    names = {}
    for line in (HERE / "nodes-jobs.txt").read_text().splitlines():
        name, job = line.split()
        names[job] = name
    return names


def steps(axis, points, scale=1.0, **style):
    t = [p[0] for p in points]
    v = [p[1] / scale for p in points]
    axis.step(t, v, where="post", **style)


def runs(points, gap=2.0):
    """A series split where it was absent (the job pending between two runs)."""
    out = [[points[0]]]
    for before, point in zip(points, points[1:]):
        if point[0] - before[0] > gap:
            out.append([])
        out[-1].append(point)
    return out


def main():
    series = read_samples()
    names = jobs()
    two_node = next(job for job, name in names.items() if name == "two-node")
    colour = {job: COLOURS[i % len(COLOURS)] for i, job in enumerate(sorted(names))}
    instances = sorted({key[1] for key in series})
    end = max(t for points in series.values() for t, _ in points) + 1

    plt.rcParams.update({"font.size": 8, "axes.spines.top": False, "axes.spines.right": False})
    rows = len(instances) + 1
    fig, axes = plt.subplots(rows, 2, figsize=(10.5, 2.25 * rows + 1.2), dpi=100,
                             gridspec_kw={"width_ratios": [1.35, 1]})
    fig.subplots_adjust(left=0.07, right=0.985, top=0.93, bottom=0.2, hspace=0.75, wspace=0.18)
    fig.suptitle("etc/grafana-dashboard.json on the three-node lab: each node's row, then the "
                 f"two-node job {two_node}", x=0.07, ha="left", fontsize=11, fontweight="bold")

    for row, instance in enumerate(instances):
        used_ax, share_ax = axes[row]
        over = set()
        for (metric, inst, job, gpu), points in sorted(series.items()):
            if inst != instance or metric != "gpu_mem_quota_used_bytes":
                continue
            label = f"{job} ({names.get(job, '?')}) GPU {gpu}"
            limit = dict(series.get(("gpu_mem_quota_limit_bytes", inst, job, gpu), []))
            for n, part in enumerate(runs(points)):
                steps(used_ax, part, GIB, color=colour[job], linewidth=1.6,
                      label=label if n == 0 else None)
                quota = [(t, limit[t]) for t, _ in part if t in limit]
                if quota:
                    steps(used_ax, quota, GIB, color=colour[job], linewidth=1, linestyle=(0, (5, 3)))
                # used / (limit > 0): the "Usage as a share of quota" panel's query.
                share = [(t, v / limit[t]) for t, v in part if limit.get(t, 0) > 0]
                steps(share_ax, share, color=colour[job], linewidth=1.6)
                if any(v > WARN for _, v in share):
                    over.add(job)
        used_ax.set_title(f"Node {instance}  ·  GPU memory used (solid) vs quota (dashed), per job and GPU",
                          loc="left", fontsize=8.5)
        share_ax.set_title(f"Usage as a share of quota  ·  over 90 %: {len(over)} job(s)",
                           loc="left", fontsize=8.5)
        share_ax.axhline(WARN, color="#d62728", linewidth=0.8, linestyle=":")
        used_ax.set_ylabel("GiB")
        used_ax.set_ylim(0, 32)
        share_ax.set_ylim(0, 1.4)
        share_ax.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
        used_ax.legend(loc="upper right", frameon=False, fontsize=7)
        for ax in (used_ax, share_ax):
            ax.set_xlim(0, end)
            ax.grid(axis="y", color="0.92")

    # The job row: its series on every node (the panel's query has no instance filter).
    job_ax, events_ax = axes[-1]
    for i, instance in enumerate(instances):
        used = series.get(("gpu_mem_quota_used_bytes", instance, two_node, "0"))
        if not used:
            continue
        peak = series.get(("gpu_mem_quota_peak_bytes", instance, two_node, "0"), [])
        limit = series.get(("gpu_mem_quota_limit_bytes", instance, two_node, "0"), [])
        c = COLOURS[(i + 2) % len(COLOURS)]
        for n, part in enumerate(runs(used)):
            steps(job_ax, part, GIB, color=c, linewidth=1.6,
                  label=f"used, {instance} GPU 0" if n == 0 else None)
        for n, part in enumerate(runs(peak)):
            steps(job_ax, part, GIB, color=c, linewidth=4, alpha=0.3,
                  label=f"peak, {instance}" if n == 0 else None)
        for part in runs(limit):
            steps(job_ax, part, GIB, color="#d62728", linewidth=1, linestyle=(0, (5, 3)))
    job_ax.set_title(f"Job {two_node}  ·  used, peak and quota (dashed) per GPU, both nodes",
                     loc="left", fontsize=8.5)
    job_ax.set_ylabel("GiB")
    job_ax.set_xlabel("seconds since the capture began")
    job_ax.set_xlim(0, end)
    job_ax.set_ylim(0, 32)
    job_ax.legend(loc="upper right", frameon=False, fontsize=7, ncol=2)
    job_ax.grid(axis="y", color="0.92")

    # "Quota events by kind": the nodes' counters (gpu_mem_quota_node_events_total), which stay
    # when the jobs end; their increase over the capture, by node and kind.
    kinds = ["warn", "over_quota", "preempted", "requeued", "cancelled", "held", "oom"]
    increase = defaultdict(float)
    first = min(t for points in series.values() for t, _ in points)
    for (metric, instance, _, kind), points in series.items():
        if metric == "gpu_mem_quota_node_events_total":
            # A node's file made during the capture (its first event) started from nothing.
            baseline = points[0][1] if points[0][0] <= first + 1 else 0
            increase[(instance, kind)] += points[-1][1] - baseline
    left = [0.0] * len(kinds)
    for i, instance in enumerate(instances):
        values = [increase[(instance, k)] for k in kinds]
        events_ax.barh(kinds, values, left=left, color=COLOURS[(i + 2) % len(COLOURS)], label=instance)
        left = [a + b for a, b in zip(left, values)]
    events_ax.invert_yaxis()
    events_ax.set_title("Quota events by kind (node counters, over the capture)",
                        loc="left", fontsize=8.5)
    events_ax.set_xlim(0, max(2, max(left) + 1))
    events_ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    events_ax.legend(loc="lower right", frameon=False, fontsize=7)

    report = (HERE / "nodes-report.txt").read_text().rstrip("\n")
    fig.text(0.07, 0.145, f"$ gpu-mem-quota report -j {two_node}\n{report}", family="monospace",
             fontsize=6.8, va="top", ha="left")
    out = HERE / "nodes.png"
    fig.savefig(out, dpi=100, metadata={"Software": None})
    print(f"{out}: {out.stat().st_size} bytes")


if __name__ == "__main__":
    main()
