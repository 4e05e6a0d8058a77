//! The submit host: sbatch and salloc (allocator context) and srun (local context).
//!
//! Option values are checked by the option callback while Slurm parses the command line; the
//! request is then checked against the policy's caps in `init_post_opt`. Either refusal stops the
//! command before anything reaches slurmctld. Only what is known here is checked (the user; the
//! account, partition and QOS are often chosen later): the node checks again, authoritatively.

use super::handle::Spank;
use super::{log, options};
use gmq_core::admission;
use gmq_core::config;
use gmq_core::plugin_args::{parse_plugin_args, PluginArgs};
use gmq_core::quota::Identity;
use gmq_core::request;

pub(crate) fn check_plugin_args(spank: &Spank) -> Result<PluginArgs, String> {
    parse_plugin_args(spank.plugin_args()).map_err(|e| e.to_string())
}

pub(crate) fn register_options(spank: &Spank) -> Result<(), String> {
    for option in options::ALL {
        spank
            .register_option(option)
            .map_err(|e| format!("cannot register --{}: {e}", option.name.to_string_lossy()))?;
    }
    Ok(())
}

pub(crate) fn check_request(spank: &Spank) -> Result<(), String> {
    let Some(value) = options::given(&options::QUOTA) else {
        return Ok(());
    };
    let request = request::parse_quota_option(&value).map_err(|e| e.to_string())?;
    let args = check_plugin_args(spank)?;
    let policy = config::load_for_job(&args.config, args.on_config_error);
    let uid = nix::unistd::getuid().as_raw();
    let who = Identity {
        user: gmq_node::passwd::user_name(uid),
        ..Identity::default()
    };
    let verdict = admission::on_submit(request, &policy, &who)?;
    if let Some(warning) = verdict.warning {
        log::error(&warning);
    }
    Ok(())
}
