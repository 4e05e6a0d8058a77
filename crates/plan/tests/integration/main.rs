//! gmq-plan's tests: the planner's search, presets, techniques and errors. One binary; each file a
//! module.

mod plan_activations;
mod plan_errors;
mod plan_mechanisms;
mod plan_presets;
mod plan_search;
mod plan_techniques;
mod plan_validation;
mod plan_zero;
