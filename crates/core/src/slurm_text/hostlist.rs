//! Slurm hostlist expressions (`gpu[01-04,07],login1`), expanded to node names. Pure.
//!
//! Slurm writes a job's nodes this way (`squeue`'s NodeList, the JSON `nodes` field); the job's
//! per-node details (`gres_detail`) come in the same order as the expansion. Supported: comma
//! separated items, each a prefix, at most one bracket of ranges and single numbers, and a
//! suffix; zero padding is kept (`01-04` gives `01`..`04`). Anything else is refused, never guessed.

/// The most names one expression may expand to: a guard against `n[0-4294967295]`.
pub const MAX_NODES: usize = 1 << 20;

/// The most bytes the names of one expression may take together (64 bytes for each of
/// [`MAX_NODES`]): a guard against a long prefix on a long range, which the count alone lets
/// through (3 KB of `nnn...n[0-999999]` would be 3 GB of names).
pub const MAX_BYTES: usize = 64 * MAX_NODES;

/// The node names of `expression`, in Slurm's order.
pub fn expand(expression: &str) -> Result<Vec<String>, String> {
    let (mut names, mut bytes) = (Vec::new(), 0usize);
    for item in split_top_level(expression)? {
        if item.is_empty() {
            return Err(format!("empty node name in `{expression}`"));
        }
        match item.find('[') {
            None => {
                bytes += item.len();
                names.push(item.to_string());
            }
            Some(open) => {
                let close = item[open..]
                    .find(']')
                    .map(|i| open + i)
                    .ok_or_else(|| format!("unclosed `[` in `{item}`"))?;
                let (prefix, ranges, suffix) = (&item[..open], &item[open + 1..close], &item[close + 1..]);
                if suffix.contains(['[', ']']) {
                    return Err(format!("more than one bracket in `{item}`: not supported"));
                }
                for range in ranges.split(',') {
                    expand_range(prefix, range, suffix, &mut names, &mut bytes)?;
                    if names.len() > MAX_NODES {
                        return Err(format!("`{expression}` names more than {MAX_NODES} nodes"));
                    }
                }
            }
        }
    }
    Ok(names)
}

/// Splits at commas outside brackets.
fn split_top_level(expression: &str) -> Result<Vec<&str>, String> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in expression.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => {
                depth = depth
                    .checked_sub(1)
                    .ok_or_else(|| format!("`]` without `[` in `{expression}`"))?
            }
            ',' if depth == 0 => {
                items.push(&expression[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(format!("unclosed `[` in `{expression}`"));
    }
    items.push(&expression[start..]);
    Ok(items)
}

fn expand_range(
    prefix: &str,
    range: &str,
    suffix: &str,
    names: &mut Vec<String>,
    bytes: &mut usize,
) -> Result<(), String> {
    let (low, high) = range.split_once('-').unwrap_or((range, range));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(low) || !digits(high) {
        return Err(format!("`{range}` is not a number or a range of numbers"));
    }
    let parse = |s: &str| s.parse::<u64>().map_err(|_| format!("`{s}` is out of range"));
    let (from, to) = (parse(low)?, parse(high)?);
    if from > to {
        return Err(format!("`{range}` runs backwards"));
    }
    if to - from >= MAX_NODES as u64 {
        return Err(format!("`{range}` names more than {MAX_NODES} nodes"));
    }
    let width = low.len();
    // No name is longer than the range's high end, padded, between the prefix and the suffix.
    let longest = prefix.len() + width.max(high.len()) + suffix.len();
    *bytes = bytes.saturating_add(((to - from + 1) as usize).saturating_mul(longest));
    if *bytes > MAX_BYTES {
        return Err(format!(
            "`{prefix}[{range}]{suffix}` names more than {MAX_BYTES} bytes of nodes"
        ));
    }
    for n in from..=to {
        names.push(format!("{prefix}{n:0width$}{suffix}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(expression: &str) -> Vec<String> {
        expand(expression).unwrap()
    }

    #[test]
    fn expressions_slurm_writes() {
        assert_eq!(names("vm"), ["vm"]);
        assert_eq!(names("gpu[01-03]"), ["gpu01", "gpu02", "gpu03"]);
        assert_eq!(names("gpu[1,3-4],login"), ["gpu1", "gpu3", "gpu4", "login"]);
        assert_eq!(
            names("rack1-n[8-10]-ib"),
            ["rack1-n8-ib", "rack1-n9-ib", "rack1-n10-ib"]
        );
        assert_eq!(names("a[098-100]"), ["a098", "a099", "a100"]);
    }

    #[test]
    fn anything_else_is_refused() {
        for bad in [
            "",
            "a,",
            "a[",
            "a]",
            "a[1-]",
            "a[x]",
            "a[3-1]",
            "a[1]b[2]",
            "a[0-99999999]",
            // 3 GB of names, a count under MAX_NODES: out of memory in the hostlist fuzz target.
            format!("{}[0-999999]", "n".repeat(3000)).as_str(),
        ] {
            assert!(expand(bad).is_err(), "{bad}");
        }
    }
}
