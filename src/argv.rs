//! A small parser for `--key value`, `--key=value`, `--flag` and positional words.
//! Commands declare which keys take values and which are flags; anything else is an error.

use std::collections::BTreeMap;

#[derive(Debug, Default)]
pub struct Parsed {
    pub values: BTreeMap<String, String>,
    pub flags: Vec<String>,
    pub positional: Vec<String>,
}

impl Parsed {
    pub fn value(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str)
    }

    pub fn flag(&self, key: &str) -> bool {
        self.flags.iter().any(|f| f == key)
    }
}

/// Parses `argv` given the keys that take a value and the flags (both without the leading `--`).
/// `-h` is `--help`. A repeated key, an unknown key, or a missing value is an error message.
pub fn parse(argv: &[String], value_keys: &[&str], flag_keys: &[&str]) -> Result<Parsed, String> {
    let mut parsed = Parsed::default();
    let mut words = argv.iter();
    while let Some(word) = words.next() {
        if word == "-h" {
            parsed.flags.push("help".into());
            continue;
        }
        let Some(option) = word.strip_prefix("--") else {
            parsed.positional.push(word.clone());
            continue;
        };
        let (key, inline) = match option.split_once('=') {
            Some((k, v)) => (k, Some(v.to_string())),
            None => (option, None),
        };
        if flag_keys.contains(&key) {
            if inline.is_some() {
                return Err(format!("--{key} takes no value"));
            }
            parsed.flags.push(key.to_string());
        } else if value_keys.contains(&key) {
            let value = match inline {
                Some(v) => v,
                None => words
                    .next()
                    .cloned()
                    .ok_or_else(|| format!("--{key} needs a value"))?,
            };
            if parsed.values.insert(key.to_string(), value).is_some() {
                return Err(format!("--{key} given more than once"));
            }
        } else {
            return Err(format!("unknown option --{key}"));
        }
    }
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<String> {
        words.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn values_flags_and_words() {
        let p = parse(
            &argv(&["--user", "alice", "--json", "--qos=high", "file"]),
            &["user", "qos"],
            &["json"],
        )
        .unwrap();
        assert_eq!(p.value("user"), Some("alice"));
        assert_eq!(p.value("qos"), Some("high"));
        assert!(p.flag("json"));
        assert_eq!(p.positional, vec!["file"]);
    }

    #[test]
    fn errors() {
        assert_eq!(
            parse(&argv(&["--nope"]), &[], &[]).unwrap_err(),
            "unknown option --nope"
        );
        assert_eq!(
            parse(&argv(&["--user"]), &["user"], &[]).unwrap_err(),
            "--user needs a value"
        );
        assert_eq!(
            parse(&argv(&["--json=1"]), &[], &["json"]).unwrap_err(),
            "--json takes no value"
        );
        assert_eq!(
            parse(&argv(&["--u=a", "--u=b"]), &["u"], &[]).unwrap_err(),
            "--u given more than once"
        );
    }
}
