//! Byte counts as scenario files write them. NVML counts bytes, so a bare number here is **bytes**
//! (unlike `--mem` and `gpu_mem_quota::size`, where it is MiB). A suffix `K`, `M`, `G`, `T`
//! (case-insensitive, optionally `KiB`...) is binary: `30G` = 30 GiB.

/// Parses `123456`, `30G`, `512MiB`. Fractions, signs and decimal units (`GB`) are refused.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let digits_end = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, suffix) = text.split_at(digits_end);
    if digits.is_empty() {
        return Err(format!(
            "'{text}' is not a size (expected e.g. 30G or a byte count)"
        ));
    }
    let unit: u64 = match suffix.to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KIB" => 1 << 10,
        "M" | "MIB" => 1 << 20,
        "G" | "GIB" => 1 << 30,
        "T" | "TIB" => 1 << 40,
        _ => {
            return Err(format!(
                "'{text}': unknown size suffix '{suffix}' (use K, M, G or T)"
            ))
        }
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .ok_or_else(|| format!("'{text}' is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        let cases: &[(&str, Option<u64>)] = &[
            ("0", Some(0)),
            ("1234", Some(1234)),
            ("1234B", Some(1234)),
            ("30G", Some(30 << 30)),
            ("30g", Some(30 << 30)),
            ("512MiB", Some(512 << 20)),
            ("4K", Some(4096)),
            ("2T", Some(2 << 40)),
            (" 80G\n", Some(80 << 30)),
            ("1.5G", None),
            ("-1", None),
            ("30GB", None),
            ("G", None),
            ("", None),
            ("unavailable", None),
            ("99999999999999999999", None),
            ("17179869184G", None),
        ];
        for (text, want) in cases {
            assert_eq!(parse_bytes(text).ok(), *want, "{text:?}");
        }
    }

    #[test]
    fn errors_name_the_input() {
        assert!(parse_bytes("30GB").unwrap_err().contains("'30GB'"));
        assert!(parse_bytes("lots").unwrap_err().contains("'lots'"));
    }
}
