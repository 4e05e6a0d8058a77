//! The submit host: sbatch and salloc (allocator context) and srun (local context).
//! Option values are validated by the option callback while Slurm parses the command line, so a
//! bad value stops the command before anything reaches slurmctld.

use super::handle::Spank;
use super::options;
use crate::plugin_args::{parse_plugin_args, PluginArgs};

pub fn check_plugin_args(spank: &Spank) -> Result<PluginArgs, String> {
    parse_plugin_args(spank.plugin_args()).map_err(|e| e.to_string())
}

pub fn register_options(spank: &Spank) -> Result<(), String> {
    for option in options::ALL {
        spank
            .register_option(option)
            .map_err(|e| format!("cannot register --{}: {e}", option.name.to_string_lossy()))?;
    }
    Ok(())
}
