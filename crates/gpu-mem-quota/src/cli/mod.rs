//! The `gpu-mem-quota` command line: a table of commands, each a thin wrapper over library code.
//! Argument parsing is shared (`args`, over lexopt): each command declares its options and help
//! in one [`args::Spec`].

/// The argument parser, shared with the watchdog's command line (`launch::params`).
pub(crate) use gmq_core::argv as args;
mod check_config;
mod keep_record;
mod plan;
mod report;
mod status;
mod watchdog;

use std::process::ExitCode;

/// One command: its command line (name, options, help), a one-line summary for the top-level
/// help, and its entry point.
pub struct Command {
    pub spec: &'static args::Spec,
    pub summary: &'static str,
    pub run: fn(Vec<String>) -> ExitCode,
}

/// Every command, in the order `--help` lists them.
const COMMANDS: &[Command] = &[
    Command {
        spec: &check_config::SPEC,
        summary: "validate the admin policy; --explain an identity's quota",
        run: check_config::run,
    },
    Command {
        spec: &keep_record::SPEC,
        summary: "from EpilogSlurmctld: copy the record to the SystemComment (beside jobstats)",
        run: keep_record::run,
    },
    Command {
        spec: &plan::SPEC,
        summary: "predict a training job's per-GPU memory and fit it to a quota",
        run: plan::run,
    },
    Command {
        spec: &report::SPEC,
        summary: "a job's GPU-memory quota, peak, efficiency and events, from accounting",
        run: report::run,
    },
    Command {
        spec: &status::SPEC,
        summary: "the jobs watched on this node: GPU memory used, quota, peak, state",
        run: status::run,
    },
    Command {
        spec: &watchdog::SPEC,
        summary: "watch one job's GPU memory on this node (started by the plugin, as root)",
        run: watchdog::run,
    },
];

pub const VERSION: &str = env!("CARGO_PKG_VERSION");

fn usage() -> String {
    let mut text = format!(
        "gpu-mem-quota {VERSION}: GPU-memory quotas for Slurm\n\n\
         Usage: gpu-mem-quota <command> [options]\n       gpu-mem-quota --help | --version\n\nCommands:\n"
    );
    for c in COMMANDS {
        text.push_str(&format!("  {:<14} {}\n", c.spec.command, c.summary));
    }
    text.push_str(
        "\nThe SPANK plugin (gpu_mem_quota.so) adds --gpu-mem-quota=SIZE to sbatch, srun and salloc.\n\
         Run 'gpu-mem-quota <command> --help' for a command's options.\n",
    );
    text
}

/// Runs the command line (without the program name) and returns the process exit status.
pub fn main(argv: Vec<String>) -> ExitCode {
    let Some(first) = argv.first() else {
        eprint!("{}", usage());
        return ExitCode::from(2);
    };
    match first.as_str() {
        "-h" | "--help" | "help" => {
            print!("{}", usage());
            ExitCode::SUCCESS
        }
        "-V" | "--version" => {
            println!("gpu-mem-quota {VERSION}");
            ExitCode::SUCCESS
        }
        name => match COMMANDS.iter().find(|c| c.spec.command == name) {
            Some(command) => (command.run)(argv[1..].to_vec()),
            None => {
                eprintln!("gpu-mem-quota: unknown command '{name}'\n\n{}", usage());
                ExitCode::from(2)
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every command's help names each option it accepts, and accepts each option it names
    /// (besides `--help` and the plugin's `--gpu-mem-quota`).
    #[test]
    fn each_help_is_true_to_its_options() {
        for command in COMMANDS {
            let spec = command.spec;
            let help = (spec.help)();
            for option in spec.options {
                let long = format!("--{}", option.long);
                assert!(
                    help.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                        .any(|w| w == long),
                    "{}: the help does not mention {long}",
                    spec.command
                );
                if let Some(letter) = option.short {
                    assert!(
                        help.contains(&format!("-{letter}, {long}")),
                        "{}: -{letter}",
                        spec.command
                    );
                }
            }
            for word in help.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')) {
                let Some(name) = word.strip_prefix("--").filter(|n| !n.is_empty()) else {
                    continue;
                };
                assert!(
                    name == "help" || name == "gpu-mem-quota" || spec.options.iter().any(|o| o.long == name),
                    "{}: the help names --{name}, which it does not accept",
                    spec.command
                );
            }
        }
    }
}
