//! gmq-core's tests over its public interface: the policy files, the record format, Slurm's
//! texts, predictions and the watchdog's engine driven by tables. One binary; each file a module.

mod common;

mod config_cost;
mod config_example;
mod config_job_settings;
mod config_quota;
mod config_validation;
mod predict_series;
mod record_format;
mod record_settle;
mod slurm_text_parse;
mod watchdog_heal;
mod watchdog_lifetime;
mod watchdog_tick;
