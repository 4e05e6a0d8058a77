//! Placeholder: the memory planner (issue 6).
