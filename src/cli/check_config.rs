//! Placeholder: built by its issue.
use std::process::ExitCode;

pub fn run(_argv: Vec<String>) -> ExitCode {
    eprintln!("gpu-mem-quota: not built yet");
    ExitCode::from(2)
}
