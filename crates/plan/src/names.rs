//! The names of the planner's closed vocabularies: each enum's `ALL` table of values and names.

/// The name of `value` in `table` (an enum's `ALL`).
pub(crate) fn name_in<T: Copy + PartialEq>(table: &[(T, &'static str)], value: T) -> &'static str {
    table
        .iter()
        .find(|(v, _)| *v == value)
        .map_or("", |(_, name)| name)
}
