//! The companion binary: `gpu-mem-quota <command>`. Each command is a thin wrapper over the library.
use std::process::ExitCode;

fn main() -> ExitCode {
    gmq_commands::cli::main(std::env::args().skip(1).collect())
}
