"""slurm/bench-day's pure half: the seeded workload and how the runs are read and counted (the cluster
half runs in `slurm/dev-cluster test`, as the day benchmark's smoke test)."""

import importlib.machinery
import importlib.util
import json
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "slurm" / "bench-day"
loader = importlib.machinery.SourceFileLoader("bench_day", str(SCRIPT))
spec = importlib.util.spec_from_loader("bench_day", loader)
day = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # dataclasses look their module up
loader.exec_module(day)

GIB = 1 << 30


def test_the_workload_is_the_same_for_a_seed_and_differs_between_seeds():
    assert day.workload(1, 120) == day.workload(1, 120)
    assert day.workload(1, 120) != day.workload(2, 120)
    assert day.workload(1, 12) == day.workload(1, 120)[:12]  # a smoke test replays the day's first jobs


def test_the_workload_has_every_class_and_growers_within_reason():
    jobs = day.workload(1, 120)
    kinds = {kind: [j for j in jobs if j.kind == kind] for kind in ("train", "infer", "sweep")}
    assert all(kinds.values())
    assert all(j.qos == "high" for j in kinds["infer"]) and all(j.qos == "scavenger" for j in kinds["sweep"])
    assert {j.user for j in jobs} == set(day.USERS)
    for job in jobs:
        need = job.need_gib * GIB
        at_micro = (job.fixed_mib + job.per_sample_mib * job.micro) << 20
        assert 0.9 * need <= at_micro <= 0.95 * need, job  # what a job needs, it uses with little to spare
        if job.grows_past:
            assert job.peak_bytes() > 1.2 * need, job
            # Half the micro-batch fits again: what the restart hints lead to.
            assert job.peak_bytes(job.micro // 2 or 1) <= need or job.micro == 1, job
    assert 0.15 <= sum(j.grows_past for j in jobs) / len(jobs) <= 0.3  # 0.45 x 30 % + 0.3 x 20 %
    assert all(a.arrival <= b.arrival for a, b in zip(jobs, jobs[1:]))
    assert not any(j.release_between_steps for j in jobs)  # the caching allocator keeps memory reserved


def test_half_the_jobs_declare_more_than_they_need_and_the_jobs_stay_the_same():
    jobs, exact = day.workload(1, 120), day.workload(1, 120, overdeclaring=0.0)
    over = [j for j in jobs if j.needed_gib is not None]
    assert 0.35 <= len(over) / len(jobs) <= 0.65
    for job in over:
        assert 1.3 * job.needed_gib <= job.declared_gib <= min(day.GPU_GIB, 4 * job.needed_gib + 1), job
    assert all(j.needed_gib is None for j in exact)
    # Only the declarations differ: the same jobs, arriving at the same moments.
    assert [day.replace(j, declared_gib=j.need_gib, needed_gib=None) for j in jobs] == exact
    saw = day.workload(1, 120, saw_tooth=True)
    assert 0.2 <= sum(j.release_between_steps for j in saw) / len(saw) <= 0.6
    assert [day.replace(j, release_between_steps=False) for j in saw] == jobs


def test_each_configuration_asks_slurm_for_what_it_says():
    job = next(j for j in day.workload(1, 40) if j.kind == "sweep")
    assert f"--gres=shard:{day.NO_QUOTA_SLOT}" in day.sbatch_options("no-quota", job)
    assert f"--gres=shard:{job.declared_gib}" in day.sbatch_options("shards", job)
    assert "--gres=gpu:1" in day.sbatch_options("whole-gpu", job)
    assert "--gres=shard:27" in day.sbatch_options("no-quota", job, no_quota_slot=27)
    assert f"--gres=shard:{job.declared_gib}" in day.sbatch_options("shards-retry", job)
    for config in day.GMQ_CONFIGS:
        ours = day.sbatch_options(config, job)
        assert f"--gpu-mem-quota={job.declared_gib}G" in ours and "--gpu-mem-preemptible" in ours
        assert not any(o.startswith("--gres") for o in ours)  # job_submit.lua makes the shards


def test_only_the_retrying_configuration_exits_for_requeueexit_and_only_while_retries_are_left():
    plain = day.job_script("shards", "/w/loop.py", "--steps 3", "/w/shards")
    assert plain.startswith("#!/bin/sh\nexec /usr/bin/python3 /w/loop.py --steps 3 ") and "oom-exit" not in plain
    retry = day.job_script("shards-retry", "/w/loop.py", "--steps 3", "/w/r")
    assert f'code={day.RETRY_EXIT}; [ "${{SLURM_RESTART_COUNT:-0}}" -lt {day.MAX_RETRIES} ] || code=1' in retry
    assert "--oom-exit $code" in retry and "\nexec " in retry
    assert f"RequeueExit={day.RETRY_EXIT}" in day.SITE_SETTINGS


def progress(*events):
    return [json.dumps({"t": 0, "event": kind, **fields}) for kind, fields in events]


def test_runs_are_read_from_the_progress_lines_and_classified():
    lines = progress(
        ("start", {"step": 0, "restart": 0}), ("step", {"step": 1, "bytes": 10 * GIB}),
        ("checkpoint", {"step": 1}), ("step", {"step": 2, "bytes": 10 * GIB}),
        ("oom", {"step": 2, "asked": 13 * GIB, "held": 12 * GIB}),
        ("start", {"step": 1, "restart": 1}), ("step", {"step": 2, "bytes": 9 * GIB}),
        ("oom", {"step": 2, "asked": 9 * GIB, "held": 1 * GIB}),
        ("start", {"step": 2, "restart": 2}), ("step", {"step": 3, "bytes": 9 * GIB}), ("done", {"step": 3}))
    lines.insert(3, "not json")
    runs = day.runs_of(lines)
    assert [(r.restart, r.start_step, r.last_step, r.ended) for r in runs] == [
        (0, 0, 2, "oom"), (1, 1, 2, "oom"), (2, 2, 3, "done")]
    declared = 12 * GIB
    assert [day.run_end(r, declared, set(), False) for r in runs] == ["oom-own", "killed-by-neighbour", "completed"]
    assert day.run_end(day.Run(0, 0, 5, 4, "term"), declared, {"preempted"}, False) == "preempted"
    assert day.run_end(day.Run(0, 0, 5, 4, "term"), declared, {"warn", "over_quota"}, False) == "requeued-over-quota"
    assert day.run_end(day.Run(0, 0, 5, 4, "term"), declared, set(), True) == "cancelled-at-cap"
    # Slurm's preempt/qos requeues with SIGTERM and leaves no watchdog event.
    assert day.run_end(day.Run(0, 0, 5, 4, "term"), declared, set(), False) == "preempted"
    assert day.requeue_cause("oom-own", set(), "shards-retry") == "OOM, RequeueExit"
    assert day.requeue_cause("oom-own", {"oom"}, "gmq-watchdog") == "OOM, self-healed"
    assert day.requeue_cause("oom-own", set(), "shards") == "other"
    assert day.run_end(day.Run(0, 0, 5, 4, "lost"), declared, set(), False) == "lost"


def test_the_figures_count_what_the_runs_did():
    jobs = day.workload(1, 3)
    high = day.JobSpec("infer-x", "infer", "gmq-bo", "chemistry", "high", 10, 1, 1, 9216, 400, 10, 0.0, False)
    runs = [day.Run(0, 0, 6, 4, "oom", asked=high.declared_gib * GIB), day.Run(1, 4, 10, 10, "done")]
    outcomes = [
        day.JobOutcome(high, "1", "COMPLETED", runs, ["killed-by-neighbour", "completed"], ["OOM, self-healed"]),
        day.JobOutcome(jobs[0], "2", "FAILED", [day.Run(0, 0, 3, 0, "oom", asked=1)], ["killed-by-neighbour"]),
    ]
    samples = [{"used": 0.5, "reserved": 0.75, "waiting": 1, "blocked": 0},  # a requeued job's delay
               {"used": 1.0, "reserved": 1.0, "waiting": 1, "blocked": 1},
               {"used": 0.1, "reserved": 0.1, "waiting": 0, "blocked": 0}]
    row = day.figures("shards", outcomes, samples, 1800.0, False)
    assert row["killed_by_neighbour"] == 2
    assert (row["high_priority_jobs"], row["high_priority_interrupted"]) == (1, 1)
    assert row["high_priority_restarted_or_failed"] == 1
    assert row["requeue_causes"] == {"OOM, self-healed": 1}
    assert (row["completed"], row["completed_per_hour"]) == (1, 2.0)
    assert row["goodput"] == round(10 * day.STEP_SECONDS / 1800.0, 2)
    assert (row["used_over_capacity_while_waiting"], row["reserved_over_capacity_while_waiting"]) == (0.75, 0.875)
    assert (row["used_over_capacity_while_blocked"], row["seconds_with_work_blocked"]) == (1.0, 1)
    assert (row["steps_redone"], row["steps_redone_max_per_restart"], row["steps_of_jobs_not_completed"]) == (2, 2, 3)


def test_reserved_memory_is_read_from_squeue_in_every_release_spelling():
    assert day.reserved_bytes("gres:shard:20") == 20 * GIB
    assert day.reserved_bytes("gres/shard:12") == 12 * GIB
    assert day.reserved_bytes("gres:gpu:fake:1") == 80 * GIB
    assert day.reserved_bytes("gres/gpu:1,gres/shard:2") == 82 * GIB
    assert day.reserved_bytes("N/A") == 0
    # 26.05 prints "-" for the shards of a GPU taken whole (sinfo's GresUsed): no shards.
    assert day.reserved_bytes("gres/gpu:1,gres/shard:-") == 80 * GIB


def test_runs_are_summed_up_as_min_median_max_and_the_best_median_is_named_whoever_it_is():
    rows = [{"config": c, **{key: 0 for key, _, _ in day.COLUMNS}} for c in ("shards", "gmq-watchdog")] * 3
    for i, row in enumerate(rows):
        rows[i] = dict(row, killed_by_neighbour=i, goodput=2.5 if row["config"] == "shards" else 2.0,
                       used_over_capacity_while_blocked=None if i == 0 else 0.5)
    summary = day.summarize(rows)
    assert [s["config"] for s in summary] == ["shards", "gmq-watchdog"] and summary[0]["runs"] == 3
    assert summary[0]["killed_by_neighbour"] == {"min": 0, "median": 2, "max": 4, "runs": 3}
    assert summary[0]["used_over_capacity_while_blocked"]["runs"] == 2  # a run without blocked time has none
    winners = {title: configs for title, configs, _ in day.best(summary)}
    assert winners["goodput"] == ["shards"] and winners["killed by neighbour"] == ["shards"]
    assert "requeues" not in winners  # no better way
    text = day.table(summary)
    assert "2 (0-4)" in text and "50%" in text


def test_seeds_and_the_order_of_configurations():
    assert day.seed_list("1-3,7,2") == [1, 2, 3, 7]
    assert [day.rotation(["a", "b", "c"], i)[0] for i in range(4)] == ["a", "b", "c", "a"]


def test_runs_of_several_files_are_summed_up_together(tmp_path, capsys):
    def one(seed, killed, **settings):
        row = {"config": "shards", "seed": seed, "repeat": 1, **{key: 0 for key, _, _ in day.COLUMNS}}
        row["killed_by_neighbour"] = killed
        path = tmp_path / f"s{seed}.json"
        path.write_text(json.dumps({"seeds": [seed], "repeats": 1, "jobs": 120, **settings, "runs": [row],
                                    "samples": {f"shards seed {seed} run 1": [{"t": 0}]}}))
        return str(path)

    out = tmp_path / "all"
    day.combine([one(1, 2), one(2, 4), one(3, 9, jobs=60)], str(out))
    merged = json.loads((out / "figures.json").read_text())
    assert merged["seeds"] == [1, 2, 3] and len(merged["runs"]) == 3 and len(merged["samples"]) == 3
    assert merged["summary"][0]["killed_by_neighbour"] == {"min": 2, "median": 4, "max": 9, "runs": 3}
    # A run made with other settings says so beside its figures; the others do not repeat them.
    assert merged["runs"][2]["settings"]["jobs"] == 60 and "settings" not in merged["runs"][0]
    assert "4 (2-9)" in capsys.readouterr().out
