//! Reading a policy in the tests and checking the errors it gives: shared by the config_* tests
//! here and in gpu-mem-quota, and by gmq-plan's.
#![allow(dead_code)] // each user takes what it needs

use gmq_core::config::{self, Config};

/// The policy `text` as file `t.toml`; its errors one per line.
pub(crate) fn parse(text: &str) -> Result<Config, Vec<String>> {
    config::parse(text, "t.toml").map_err(|e| e.to_string().lines().map(String::from).collect())
}

/// The errors for `lines` placed in `table`, two lines down from the top (a comment line first, so
/// that a wrong line number shows).
pub(crate) fn errors_in(table: &str, lines: &str) -> Vec<String> {
    match parse(&format!("# policy\n[{table}]\n{lines}\n")) {
        Ok(_) => panic!("expected errors for [{table}] {lines}"),
        Err(errors) => errors,
    }
}

/// Each (line, expected) case, alone in `table`, gives exactly one error, starting with `expected`.
pub(crate) fn assert_one_error_each(table: &str, cases: &[(&str, &str)]) {
    for &(line, expected) in cases {
        let found = errors_in(table, line);
        assert_eq!(found.len(), 1, "{line}: {found:?}");
        assert!(
            found[0].starts_with(expected),
            "{line}:\n  got  {}\n  want {expected}",
            found[0]
        );
    }
}
