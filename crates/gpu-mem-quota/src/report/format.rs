//! How figures read in a report: sizes, percentages, aligned columns. Pure.

use gmq_core::size::ByteSize;

const UNITS: [(u64, char); 4] = [(1 << 40, 'T'), (1 << 30, 'G'), (1 << 20, 'M'), (1 << 10, 'K')];

/// A size for people: Slurm's exact form when it is one (`40G`, `41M`), else one decimal in the
/// largest unit it reaches (`34.5G`), bytes below 1 KiB.
pub(crate) fn human_size(bytes: u64) -> String {
    match UNITS.iter().find(|(unit, _)| bytes >= *unit) {
        Some((unit, _)) if bytes.is_multiple_of(*unit) => ByteSize::from_bytes(bytes).to_string(),
        Some((unit, suffix)) => format!("{:.1}{suffix}", bytes as f64 / *unit as f64),
        None if bytes == 0 => "0".to_string(),
        None => format!("{bytes}B"),
    }
}

/// `75.0%`.
pub(crate) fn percent(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_string(), |v| format!("{v:.1}%"))
}

/// Rows as left-aligned columns two spaces apart, header first; trailing spaces trimmed.
pub(crate) fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
    }
    let header: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    let mut out = String::new();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            let width = widths.get(i).copied().unwrap_or(0);
            line.push_str(&format!("{cell:<width$}  "));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        let table = [
            (0, "0"),
            (512, "512B"),
            (10, "10B"),
            (40 << 30, "40G"),
            (41 << 20, "41M"),
            ((30 << 30) + (1 << 20), "30.0G"),
            (36507222016 + (512 << 20), "34.5G"),
            (3 << 40, "3T"),
        ];
        for (bytes, want) in table {
            assert_eq!(human_size(bytes), want, "{bytes}");
        }
    }

    #[test]
    fn columns_align() {
        let text = table(
            &["A", "BB"],
            &[vec!["xyz".into(), "1".into()], vec!["".into(), "".into()]],
        );
        assert_eq!(text, "A    BB\nxyz  1\n\n");
    }
}
