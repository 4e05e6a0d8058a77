//! What slurmctld says of one node's state, from `sinfo --Format` ([`NODE_FORMAT`]): the node's
//! name and its complete state (`down+not_responding`), each in its own `|`-terminated column.
//! Node names and states are the admin's and Slurm's, never text a user wrote.

/// sinfo's `--Format` for [`parse_node_down`]: one line per node and partition.
pub const NODE_FORMAT: &str = "NodeList:|,StateComplete:|";

/// Whether slurmctld has `node` DOWN (its base state: `down`, `down+not_responding`,
/// `down+drain`, ...): the state in which it ends or requeues the node's jobs for a node failure
/// (`kill_running_job_by_node_name`: a slurmd silent for `SlurmdTimeout`, or an admin's
/// `State=DOWN`). A node merely not responding yet (`idle+not_responding`) is not down. The error
/// says what is missing or malformed: no line for the node, a line that is not two columns, or
/// two lines that disagree.
pub fn parse_node_down(output: &str, node: &str) -> Result<bool, String> {
    let mut down = None;
    for line in output.lines().filter(|l| !l.trim().is_empty()) {
        let values: Vec<&str> = line.split('|').collect();
        let [name, state, ""] = values.as_slice() else {
            return Err(format!("not a `{NODE_FORMAT}` line: {line:?}"));
        };
        if name.trim() != node {
            continue;
        }
        let base = state.trim().split('+').next().unwrap_or("");
        if base.is_empty() {
            return Err(format!("node {node}: no state in {line:?}"));
        }
        let this = base.eq_ignore_ascii_case("down");
        if down.is_some_and(|d| d != this) {
            return Err(format!("node {node}: two states"));
        }
        down = Some(this);
    }
    down.ok_or_else(|| format!("no line for node {node}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_is_down_by_its_base_state() {
        let cases: &[(&str, Result<bool, ()>)] = &[
            ("gpu01|down+not_responding|\n", Ok(true)),
            ("gpu01|down|\n", Ok(true)),
            ("gpu01|down+drain+not_responding|\n", Ok(true)),
            ("gpu01|DOWN+NOT_RESPONDING|\n", Ok(true)),
            // Not responding yet (before SlurmdTimeout), drained, failing: its jobs run on.
            ("gpu01|idle+not_responding|\n", Ok(false)),
            ("gpu01|mixed|\n", Ok(false)),
            ("gpu01|allocated+drain|\n", Ok(false)),
            ("gpu01|idle+drain+fail|\n", Ok(false)),
            // One line per partition of the node; other nodes' lines.
            (
                "gpu01|down+not_responding|\ngpu01|down+not_responding|\n",
                Ok(true),
            ),
            ("gpu010|down|\ngpu01|mixed|\n", Ok(false)),
            // Nothing to go by.
            ("", Err(())),
            ("gpu02|down|\n", Err(())),
            ("gpu01|down\n", Err(())),
            ("gpu01|down|x|\n", Err(())),
            ("gpu01||\n", Err(())),
            ("gpu01|down|\ngpu01|idle|\n", Err(())),
        ];
        for (output, want) in cases {
            assert_eq!(
                parse_node_down(output, "gpu01").map_err(|_| ()),
                *want,
                "{output:?}"
            );
        }
    }
}
