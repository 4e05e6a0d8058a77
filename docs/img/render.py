#!/usr/bin/env python3
"""Renders docs/img/job-154.png from the recorded data next to it: `python3 docs/img/render.py`.

job-154-series.csv: the job's Prometheus textfile sampled every ~0.5 s on the dev cluster while its
watchdog ran (t in seconds, bytes, and Slurm's restart count). job-154-report.txt: what
`gpu-mem-quota report -j 154` said about the job afterwards. Needs matplotlib (`pip install matplotlib`).
"""

import csv
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).resolve().parent
SERIES = HERE / "job-154-series.csv"
REPORT = HERE / "job-154-report.txt"
OUT = HERE / "job-154.png"

GIB = 1 << 30
UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
# A pause between samples longer than this means the job's file was gone: the job was not running.
GAP_S = 2.0


def read_series(path):
    rows = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            rows.append(
                {
                    "t": float(row["t"]),
                    "used": int(row["used_bytes"]) / GIB,
                    "peak": int(row["peak_bytes"]) / GIB,
                    "quota": int(row["quota_bytes"]) / GIB if row["quota_bytes"] else None,
                    "restarts": int(row["restarts"]),
                }
            )
    return rows


def quota_from_report(report):
    """The QUOTA column of the report's first run line, in GiB (Slurm size syntax: 30G)."""
    lines = report.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("RUN "))
    column = lines[header].split().index("QUOTA")
    size = lines[header + 1].split()[column]
    number, unit = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]?)", size).groups()
    return float(number) * UNITS.get(unit, 1 << 20) / GIB  # a bare number is MiB


def runs(rows):
    """The samples split where the file was absent (the job pending between two runs)."""
    out = [[rows[0]]]
    for before, row in zip(rows, rows[1:]):
        if row["t"] - before["t"] > GAP_S:
            out.append([])
        out[-1].append(row)
    return out


def main():
    rows = read_series(SERIES)
    report = REPORT.read_text().rstrip("\n")
    # The capture read the quota where the file had none; the report has it from the job's record.
    quotas = {r["quota"] for r in rows if r["quota"] is not None}
    quota = quotas.pop() if len(quotas) == 1 else quota_from_report(report)
    requeue_t = next(r["t"] for r in rows if r["restarts"] > 0)
    parts = runs(rows)

    plt.rcParams.update({"font.size": 9, "axes.spines.top": False, "axes.spines.right": False})
    fig = plt.figure(figsize=(9.6, 4.9), dpi=100)
    chart = fig.add_axes([0.075, 0.33, 0.9, 0.58])
    text = fig.add_axes([0.0, 0.0, 1.0, 0.2])
    text.axis("off")

    # Each sample holds until the next one; the last of a run holds for one more interval.
    step = sorted(b["t"] - a["t"] for a, b in zip(rows, rows[1:]))[len(rows) // 2]
    for n, part in enumerate(parts):
        t = [r["t"] for r in part] + [part[-1]["t"] + step]
        used = [r["used"] for r in part] + [part[-1]["used"]]
        peak = [r["peak"] for r in part] + [part[-1]["peak"]]
        # Peak wide and pale under used: where they agree, used shows with an orange edge.
        chart.step(t, peak, where="post", color="#ff7f0e", linewidth=4, alpha=0.45,
                   label="peak" if n == 0 else None)
        chart.step(t, used, where="post", color="#1f77b4", linewidth=1.8,
                   label="used" if n == 0 else None)
    chart.axhline(quota, color="#d62728", linewidth=1.2, linestyle=(0, (6, 3)), zorder=1,
                  label=f"quota ({quota:g} GiB)")

    for before, after in zip(parts, parts[1:]):
        start, end = before[-1]["t"] + step, after[0]["t"]
        chart.axvspan(start, end, color="0.9", zorder=0)
        chart.text((start + end) / 2, quota * 0.55, "pending\n(requeued)", ha="center", va="center",
                   color="0.35")
    chart.axvline(requeue_t, color="0.2", linewidth=1, linestyle=":")
    top = max(r["peak"] for r in rows) * 1.12
    chart.annotate("watchdog requeues the job\n(over quota past the grace period)",
                   xy=(requeue_t, top * 0.93), xytext=(-8, 0), textcoords="offset points",
                   ha="right", va="center", fontsize=8.5)
    first_restart = parts[1][0]["t"] if len(parts) > 1 else requeue_t
    chart.annotate("restarts with hints,\nstays within 30G" if quota == 30 else "restarts with hints",
                   xy=(first_restart, top * 0.93), xytext=(8, 0), textcoords="offset points",
                   ha="left", va="center", fontsize=8.5)

    chart.set_xlim(0, rows[-1]["t"] + 0.5)
    chart.set_ylim(0, top)
    chart.set_xlabel("seconds since the capture started")
    chart.set_ylabel("GPU memory (GiB)")
    chart.grid(axis="y", color="0.9")
    chart.legend(loc="upper left", bbox_to_anchor=(0.0, 0.8), frameon=False)
    fig.suptitle("Job 154 on the dev cluster: over its 30G quota, requeued, back within it"
                 if quota == 30 else "Job 154 on the dev cluster", x=0.075, ha="left", y=0.97,
                 fontsize=11, fontweight="bold")

    text.text(0.012, 0.97, "$ gpu-mem-quota report -j 154\n" + report, family="monospace",
              fontsize=7.3, va="top", ha="left")
    fig.savefig(OUT, dpi=100, metadata={"Software": None})
    print(f"{OUT}: {OUT.stat().st_size} bytes")


if __name__ == "__main__":
    main()
