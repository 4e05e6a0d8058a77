//! The command line every command shares: options declared once per command ([`Opt`]), parsed
//! with lexopt (`--job 12`, `--job=12`, `-j 12`, `-j12`; `--` ends the options), and what every
//! command does first ([`Spec::parse`]): `-h`/`--help` prints the help (exit 0); an unknown option,
//! a missing or unexpected value, a repeated option or a stray word is a usage error (exit 2).

use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;

use lexopt::Arg;

/// One option a command accepts: its long name (without `--`), an optional short letter, and
/// whether it takes a value. `-h`/`--help` is every command's and is not declared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opt {
    pub long: &'static str,
    pub short: Option<char>,
    takes_value: bool,
}

impl Opt {
    /// `--long VALUE` (or `--long=VALUE`).
    pub const fn value(long: &'static str) -> Opt {
        Opt {
            long,
            short: None,
            takes_value: true,
        }
    }

    /// `--long`, no value.
    pub const fn flag(long: &'static str) -> Opt {
        Opt {
            long,
            short: None,
            takes_value: false,
        }
    }

    /// The same option, also spelt `-letter`.
    pub const fn short(self, letter: char) -> Opt {
        Opt {
            short: Some(letter),
            ..self
        }
    }
}

/// What a command line said, by long option name.
#[derive(Debug, Default)]
pub struct Parsed {
    values: BTreeMap<&'static str, String>,
    flags: Vec<&'static str>,
    /// The words that are not options, in order.
    pub positional: Vec<String>,
    /// `-h` or `--help` was given.
    pub(crate) help: bool,
}

impl Parsed {
    /// The value of `--key`, if given.
    pub fn value(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str)
    }

    /// Whether the flag `--key` was given.
    pub fn flag(&self, key: &str) -> bool {
        self.flags.contains(&key)
    }
}

/// Parses `argv` against `options`. Errors name the option as it was typed: "unknown option
/// --nope", "--user needs a value", "--json takes no value", "--qos given more than once".
pub(crate) fn parse(argv: &[String], options: &[Opt]) -> Result<Parsed, String> {
    let mut parser = lexopt::Parser::from_args(argv);
    let mut parsed = Parsed::default();
    while let Some(arg) = parser.next().map_err(message)? {
        let (typed, option) = match arg {
            Arg::Short('h') | Arg::Long("help") => {
                parsed.help = true;
                continue;
            }
            Arg::Value(word) => {
                parsed.positional.push(word.to_string_lossy().into_owned());
                continue;
            }
            Arg::Short(letter) => (
                format!("-{letter}"),
                options.iter().find(|o| o.short == Some(letter)),
            ),
            Arg::Long(name) => (format!("--{name}"), options.iter().find(|o| o.long == name)),
        };
        let Some(option) = option else {
            return Err(format!("unknown option {typed}"));
        };
        if !option.takes_value {
            parsed.flags.push(option.long);
            continue;
        }
        let value = parser.value().map_err(|_| format!("{typed} needs a value"))?;
        if parsed
            .values
            .insert(option.long, value.to_string_lossy().into_owned())
            .is_some()
        {
            return Err(format!("{typed} given more than once"));
        }
    }
    Ok(parsed)
}

/// lexopt's errors in our words.
fn message(error: lexopt::Error) -> String {
    match error {
        lexopt::Error::UnexpectedValue { option, .. } => format!("{option} takes no value"),
        lexopt::Error::MissingValue { option: Some(option) } => format!("{option} needs a value"),
        other => other.to_string(),
    }
}

/// One command's command line: what [`parse`] needs, how many positional words it takes, and its
/// help.
pub struct Spec {
    /// The command's name, as typed after `gpu-mem-quota`.
    pub command: &'static str,
    pub options: &'static [Opt],
    /// The most words that are not options (check-config's PATH: 1; the others: 0).
    pub max_positional: usize,
    /// The text `--help` prints.
    pub help: fn() -> String,
    /// Whether a usage error is followed by the whole help (short ones) or by a pointer to
    /// `--help` (plan's help is long).
    pub error_shows_help: bool,
}

impl Spec {
    /// What every command does first. `Ok`: go on with what was parsed. `Err`: the help was
    /// printed (status 0) or a usage error was (status 2); return that status.
    pub fn parse(&self, argv: &[String]) -> Result<Parsed, ExitCode> {
        let parsed = parse(argv, self.options).map_err(|e| self.usage_error(&e))?;
        if parsed.help {
            // A reader that stops early (`| head`) closes the pipe: that is not worth a panic.
            let _ = std::io::stdout().lock().write_all((self.help)().as_bytes());
            return Err(ExitCode::SUCCESS);
        }
        if let Some(word) = parsed.positional.get(self.max_positional) {
            return Err(self.usage_error(&format!("unexpected argument '{word}'")));
        }
        Ok(parsed)
    }

    /// Prints `gpu-mem-quota COMMAND: message` and the help (or where to find it) to stderr;
    /// returns status 2.
    /// [`Spec::parse`], then the command's own reading of what was parsed (`read`), whose `Err`
    /// is a usage error. `Err`: the exit code to return now (help printed, or the error said).
    pub fn parse_with<T>(
        &self,
        argv: &[String],
        read: impl FnOnce(&Parsed) -> Result<T, String>,
    ) -> Result<T, ExitCode> {
        let parsed = self.parse(argv)?;
        read(&parsed).map_err(|message| self.usage_error(&message))
    }

    pub fn usage_error(&self, message: &str) -> ExitCode {
        let command = self.command;
        if self.error_shows_help {
            eprintln!("gpu-mem-quota {command}: {message}\n\n{}", (self.help)());
        } else {
            eprintln!(
                "gpu-mem-quota {command}: {message}\nRun 'gpu-mem-quota {command} --help' for the options."
            );
        }
        ExitCode::from(2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<String> {
        words.iter().map(|s| s.to_string()).collect()
    }

    const OPTIONS: &[Opt] = &[
        Opt::value("user").short('u'),
        Opt::value("qos"),
        Opt::flag("json"),
    ];

    #[test]
    fn values_flags_and_words() {
        let p = parse(
            &argv(&["--user", "alice", "--json", "--qos=high", "file"]),
            OPTIONS,
        )
        .unwrap();
        assert_eq!(p.value("user"), Some("alice"));
        assert_eq!(p.value("qos"), Some("high"));
        assert!(p.flag("json"));
        assert!(!p.help);
        assert_eq!(p.positional, vec!["file"]);
        for short in [&["-u", "bob"][..], &["-ubob"], &["-u=bob"]] {
            assert_eq!(
                parse(&argv(short), OPTIONS).unwrap().value("user"),
                Some("bob"),
                "{short:?}"
            );
        }
        // A value may start with a dash; `--` ends the options.
        let p = parse(&argv(&["--qos", "-x", "--", "--json"]), OPTIONS).unwrap();
        assert_eq!(p.value("qos"), Some("-x"));
        assert!(!p.flag("json"));
        assert_eq!(p.positional, vec!["--json"]);
        assert!(parse(&argv(&["-h"]), OPTIONS).unwrap().help);
        assert!(parse(&argv(&["--help"]), OPTIONS).unwrap().help);
    }

    #[test]
    fn errors() {
        let error = |words: &[&str]| parse(&argv(words), OPTIONS).unwrap_err();
        assert_eq!(error(&["--nope"]), "unknown option --nope");
        assert_eq!(error(&["-x"]), "unknown option -x");
        assert_eq!(error(&["--user"]), "--user needs a value");
        assert_eq!(error(&["-u"]), "-u needs a value");
        assert_eq!(error(&["--json=1"]), "--json takes no value");
        assert_eq!(error(&["--qos=a", "--qos=b"]), "--qos given more than once");
        assert_eq!(error(&["-u", "a", "--user", "b"]), "--user given more than once");
    }
}
