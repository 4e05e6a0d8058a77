//! What a user asks for on the command line, validated. The option names live here, once.

use std::fmt;

use crate::size::{parse_size, ByteSize, SizeError};

/// `--gpu-mem-quota=SIZE`: the GPU memory the job may use on each GPU it is given.
pub const QUOTA_OPTION: &str = "gpu-mem-quota";

/// A bad option value; the message names the option and the value, as users need to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptionError {
    pub(crate) option: &'static str,
    pub(crate) value: String,
    pub reason: SizeError,
}

impl fmt::Display for OptionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid --{} '{}': {}",
            self.option,
            self.value.escape_debug(),
            self.reason
        )
    }
}

impl std::error::Error for OptionError {}

/// Validates the value of `--gpu-mem-quota`.
pub fn parse_quota_option(value: &str) -> Result<ByteSize, OptionError> {
    parse_size(value).map_err(|reason| OptionError {
        option: QUOTA_OPTION,
        value: value.to_string(),
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_option_and_value() {
        let e = parse_quota_option("banana").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("invalid --gpu-mem-quota 'banana': not a size"),
            "{e}"
        );
        // A control character in a forged value is shown escaped, never written raw to a log.
        let e = parse_quota_option("4\n0G").unwrap_err();
        assert!(
            e.to_string().starts_with("invalid --gpu-mem-quota '4\\n0G'"),
            "{e}"
        );
    }

    #[test]
    fn accepts_a_quota() {
        assert_eq!(parse_quota_option("40G").unwrap().bytes(), 42949672960);
    }
}
