//! Every context's start (the plugstack arguments, the options) and the submit host: sbatch and
//! salloc (allocator context) and srun (local context).
//!
//! Option values are checked by the option callback while Slurm parses the command line; the
//! request is then checked against the policy's caps in `init_post_opt`. Either refusal stops the
//! command before anything reaches slurmctld. Only what is known here is checked (the user; the
//! account, partition and QOS are often chosen later): the node checks again, authoritatively.

use super::{say, HookPhase, SpankHandle, OPTIONS, QUOTA};
use gmq_core::admission;
use gmq_core::config;
use gmq_core::plugin_args::{parse_plugin_args, PluginArgs};
use gmq_core::quota::Identity;
use gmq_core::request;

pub fn check_plugin_args(spank: &impl SpankHandle) -> Result<PluginArgs, String> {
    parse_plugin_args(spank.plugin_args()).map_err(|e| e.to_string())
}

/// slurmd, loading the plugin: its plugstack arguments, said once in slurmd's log.
pub fn slurmd_init(spank: &impl SpankHandle) -> Result<(), String> {
    let args = check_plugin_args(spank)?;
    say(spank, HookPhase::Init).info(&format!("loaded (config={})", args.config.display()));
    Ok(())
}

/// sbatch, salloc, srun and slurmstepd: the plugstack arguments, and the options registered.
pub fn register_options(spank: &impl SpankHandle) -> Result<(), String> {
    check_plugin_args(spank)?;
    for option in OPTIONS {
        spank
            .register_option(option)
            .map_err(|e| format!("cannot register --{}: {e}", option.name.to_string_lossy()))?;
    }
    Ok(())
}

/// The submit host, after the command line is parsed: the request against the policy's caps.
pub fn check_request(spank: &impl SpankHandle) -> Result<(), String> {
    let Some(value) = spank.given(&QUOTA) else {
        return Ok(());
    };
    let request = request::parse_quota_option(&value).map_err(|e| e.to_string())?;
    let args = check_plugin_args(spank)?;
    let policy = config::load_for_job(&args.config, args.on_config_error);
    let uid = nix::unistd::getuid().as_raw();
    let who = Identity {
        user: crate::passwd::user_name(uid),
        ..Identity::default()
    };
    let verdict = admission::on_submit(request, &policy, &who)?;
    if let Some(warning) = verdict.warning {
        say(spank, HookPhase::Submit).error(&warning);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::fake::FakeSpank;
    use crate::hooks::LogLevel;

    fn policy(text: &str) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), text).unwrap();
        file
    }

    #[test]
    fn slurmd_says_which_policy_it_loaded() {
        let file = policy("");
        let spank = FakeSpank::new(file.path());
        slurmd_init(&spank).unwrap();
        assert_eq!(
            spank.lines(LogLevel::Info),
            vec![format!("init: loaded (config={})", file.path().display())]
        );
        let bad = FakeSpank {
            args: vec!["nonsense=1".into()],
            ..FakeSpank::new(file.path())
        };
        assert!(slurmd_init(&bad).is_err());
        assert!(register_options(&bad).is_err());
    }

    #[test]
    fn every_option_is_registered() {
        let file = policy("");
        let spank = FakeSpank::new(file.path());
        register_options(&spank).unwrap();
        assert_eq!(
            *spank.registered.borrow(),
            vec!["gpu-mem-quota", "gpu-mem-batch", "gpu-mem-preemptible"]
        );
    }

    #[test]
    fn a_request_over_the_cap_stops_the_submission() {
        let file = policy("[defaults]\nmax = \"30G\"\n");
        let nothing = FakeSpank::new(file.path());
        assert_eq!(check_request(&nothing), Ok(()));
        let within = FakeSpank::new(file.path()).with_option(&QUOTA, "20G");
        assert_eq!(check_request(&within), Ok(()));
        let over = FakeSpank::new(file.path()).with_option(&QUOTA, "35G");
        let refusal = check_request(&over).unwrap_err();
        assert!(
            refusal.contains("--gpu-mem-quota=35G exceeds the 30G cap"),
            "{refusal}"
        );
        let forged = FakeSpank::new(file.path()).with_option(&QUOTA, "banana");
        assert!(check_request(&forged).unwrap_err().contains("banana"));
    }
}
