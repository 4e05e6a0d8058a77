//! A job's GPUs per node from `scontrol -d --oneliner show job ID` (Slurm 22.05, whose squeue has
//! no per-node GRES column and whose `squeue --json` prints the whole cluster). Pure.
//!
//! The detail comes after the job's fields, one group of nodes with the same allocation at a time
//! (src/api/job_info.c, `slurm_sprint_job_info`): `  Nodes=gpu[01-02] CPU_IDs=0-3 Mem=0
//! GRES=gpu:a100:2(IDX:0,2)`. The line also holds text the user wrote (job name, comment, command,
//! paths), which could imitate a group. So every `Nodes=`, `CPU_IDs=` and ` GRES=` in the line must
//! belong to a well-formed group, and no node may appear in two: an imitation makes the detail
//! unreadable, never a fact.

use super::hostlist;
use super::job_json::gpu_indices;

/// The job's nodes and, in the same order, the GPU indices it holds on each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpusByNode {
    pub nodes: Vec<String>,
    pub gpus: Vec<Vec<u32>>,
}

/// Job `job_id`'s GPUs per node from `scontrol -d --oneliner show job` output; the error says what
/// is missing or ambiguous.
pub fn parse_gres_detail(output: &str, job_id: u32) -> Result<GpusByNode, String> {
    let wanted = format!("JobId={job_id} ");
    let mut records = output.lines().filter(|line| line.starts_with(&wanted));
    let line = match (records.next(), records.next()) {
        (Some(line), None) => line,
        (None, _) => return Err(format!("no record for job {job_id}")),
        (Some(_), Some(_)) => return Err(format!("more than one record for job {job_id}")),
    };
    let mut found = GpusByNode {
        nodes: Vec::new(),
        gpus: Vec::new(),
    };
    let mut groups = 0;
    for (at, _) in line.match_indices("  Nodes=") {
        let words: Vec<&str> = line[at + 2..].splitn(5, ' ').collect();
        let [nodes, cpus, mem, gres, ..] = words.as_slice() else {
            continue;
        };
        let (Some(nodes), Some(_), Some(_), Some(gres)) = (
            nodes.strip_prefix("Nodes="),
            cpus.strip_prefix("CPU_IDs="),
            mem.strip_prefix("Mem=").filter(|m| m.parse::<u64>().is_ok()),
            gres.strip_prefix("GRES="),
        ) else {
            continue;
        };
        groups += 1;
        let gpus = gpu_indices(gres).map_err(|e| format!("job {job_id}: GRES `{gres}`: {e}"))?;
        for node in hostlist::expand(nodes).map_err(|e| format!("job {job_id}: Nodes `{nodes}`: {e}"))? {
            if found.nodes.contains(&node) {
                return Err(format!(
                    "ambiguous: node {node} is in two groups of job {job_id}'s detail"
                ));
            }
            found.nodes.push(node);
            found.gpus.push(gpus.clone());
        }
    }
    let imitations = [" Nodes=", "CPU_IDs=", " GRES="]
        .into_iter()
        .find(|key| line.matches(key).count() != groups);
    if let Some(key) = imitations {
        return Err(format!(
            "ambiguous: `{}` appears {} times for {groups} group(s) of node details (a job name, \
             comment or path imitating them?)",
            key.trim(),
            line.matches(key).count()
        ));
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 22.05.8 on the dev cluster, cut: a shard job on GPU 1.
    const SHARD_JOB: &str = "JobId=12 JobName=wrap UserId=gmq-user(2001) GroupId=gmq-user(2001) \
JobState=RUNNING NodeList=vm BatchHost=vm NumNodes=1 NumCPUs=1 TRES=cpu=1,node=1,billing=9,gres/shard=8 \
Socks/Node=* JOB_GRES=shard:8   Nodes=vm CPU_IDs=1 Mem=0 GRES=shard:8(IDX:1) MinCPUsNode=1 \
Command=(null) WorkDir=/home/gmq-user StdErr=/dev/null TresPerNode=gres:shard:8 \n";

    #[test]
    fn gpus_per_node_from_the_detail() {
        let found = parse_gres_detail(SHARD_JOB, 12).unwrap();
        assert_eq!(found.nodes, ["vm"]);
        assert_eq!(found.gpus, [vec![1]]);
        let two = SHARD_JOB.replace(
            "  Nodes=vm CPU_IDs=1 Mem=0 GRES=shard:8(IDX:1)",
            "  Nodes=gpu[01-02] CPU_IDs=0-3 Mem=0 GRES=gpu:a100:2(IDX:0,2)  Nodes=gpu03 CPU_IDs=0 Mem=0 GRES=",
        );
        let found = parse_gres_detail(&two, 12).unwrap();
        assert_eq!(found.nodes, ["gpu01", "gpu02", "gpu03"]);
        assert_eq!(found.gpus, [vec![0, 2], vec![0, 2], vec![]]);
    }

    #[test]
    fn user_text_imitating_a_group_makes_the_detail_unreadable() {
        for forged in [
            "JobName=x  Nodes=vm CPU_IDs=0 Mem=0 GRES=gpu:fake:4(IDX:0-3)",
            "JobName=x  Nodes=vm",
            "JobName=x GRES=gpu:1(IDX:3)",
        ] {
            let line = SHARD_JOB.replace("JobName=wrap", forged);
            let e = parse_gres_detail(&line, 12).unwrap_err();
            assert!(e.contains("ambiguous"), "{forged}: {e}");
        }
        let comment = SHARD_JOB.replace("WorkDir=/home/gmq-user", "WorkDir=/x  CPU_IDs=0");
        assert!(parse_gres_detail(&comment, 12).unwrap_err().contains("ambiguous"));
        assert!(parse_gres_detail(SHARD_JOB, 13)
            .unwrap_err()
            .contains("no record"));
    }
}
