//! NVML's return codes (`nvmlReturn_t`), their names as scenario files spell them, and the strings
//! `nvmlErrorString` gives. Numbers checked against nvml-wrapper-sys 0.10's bindings (NVML 13 header).

use std::ffi::CStr;

/// `nvmlReturn_t`: a C enum, `unsigned int` in the bindings.
pub type Return = u32;

pub const SUCCESS: Return = 0;
pub const UNINITIALIZED: Return = 1;
pub const INVALID_ARGUMENT: Return = 2;
pub const NOT_SUPPORTED: Return = 3;
pub const NO_PERMISSION: Return = 4;
pub const NOT_FOUND: Return = 6;
pub const INSUFFICIENT_SIZE: Return = 7;
pub const DRIVER_NOT_LOADED: Return = 9;
pub const FUNCTION_NOT_FOUND: Return = 13;
pub const GPU_IS_LOST: Return = 15;
pub const MEMORY: Return = 20;
pub const ARGUMENT_VERSION_MISMATCH: Return = 25;
pub const UNKNOWN: Return = 999;

/// Every code: (name without the `NVML_ERROR_` prefix, number, `nvmlErrorString` text).
const TABLE: &[(&str, Return, &CStr)] = &[
    ("SUCCESS", 0, c"Success"),
    ("UNINITIALIZED", 1, c"Uninitialized"),
    ("INVALID_ARGUMENT", 2, c"Invalid Argument"),
    ("NOT_SUPPORTED", 3, c"Not Supported"),
    ("NO_PERMISSION", 4, c"Insufficient Permissions"),
    ("ALREADY_INITIALIZED", 5, c"Already Initialized"),
    ("NOT_FOUND", 6, c"Not Found"),
    ("INSUFFICIENT_SIZE", 7, c"Insufficient Size"),
    ("INSUFFICIENT_POWER", 8, c"Insufficient External Power"),
    ("DRIVER_NOT_LOADED", 9, c"Driver Not Loaded"),
    ("TIMEOUT", 10, c"Timeout"),
    ("IRQ_ISSUE", 11, c"Interrupt request issue"),
    ("LIBRARY_NOT_FOUND", 12, c"NVML Shared Library Not Found"),
    ("FUNCTION_NOT_FOUND", 13, c"Function Not Found"),
    ("CORRUPTED_INFOROM", 14, c"Corrupted infoROM"),
    ("GPU_IS_LOST", 15, c"GPU is lost"),
    ("RESET_REQUIRED", 16, c"GPU requires restart"),
    (
        "OPERATING_SYSTEM",
        17,
        c"The operating system has blocked the request.",
    ),
    (
        "LIB_RM_VERSION_MISMATCH",
        18,
        c"RM has detected an NVML/RM version mismatch.",
    ),
    ("IN_USE", 19, c"In use by another client"),
    ("MEMORY", 20, c"Insufficient Memory"),
    ("NO_DATA", 21, c"No data"),
    (
        "VGPU_ECC_NOT_SUPPORTED",
        22,
        c"The requested vgpu operation is not available because ECC is enabled",
    ),
    ("INSUFFICIENT_RESOURCES", 23, c"Insufficient resources"),
    ("FREQ_NOT_SUPPORTED", 24, c"Frequency not supported"),
    ("ARGUMENT_VERSION_MISMATCH", 25, c"Argument version mismatch"),
    ("DEPRECATED", 26, c"Deprecated"),
    ("NOT_READY", 27, c"Not ready"),
    ("GPU_NOT_FOUND", 28, c"GPU not found"),
    ("INVALID_STATE", 29, c"Invalid state"),
    ("RESET_TYPE_NOT_SUPPORTED", 30, c"Reset type not supported"),
    ("UNKNOWN", 999, c"Unknown Error"),
];

/// The error a scenario names, as `NO_PERMISSION` or `NVML_ERROR_NO_PERMISSION`. `SUCCESS` is no error.
pub fn error_by_name(name: &str) -> Option<Return> {
    let bare = name.strip_prefix("NVML_ERROR_").unwrap_or(name);
    TABLE
        .iter()
        .find(|(known, code, _)| *known == bare && *code != SUCCESS)
        .map(|(_, code, _)| *code)
}

/// What `nvmlErrorString` answers; codes NVML does not define read as real NVML's "Unknown Error".
pub fn error_string(code: Return) -> &'static CStr {
    TABLE
        .iter()
        .find(|(_, known, _)| *known == code)
        .map_or(c"Unknown Error", |(_, _, text)| text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_nvml_numbers() {
        let cases = [
            ("DRIVER_NOT_LOADED", Some(9)),
            ("NVML_ERROR_NO_PERMISSION", Some(4)),
            ("LIB_RM_VERSION_MISMATCH", Some(18)),
            ("GPU_IS_LOST", Some(15)),
            ("ARGUMENT_VERSION_MISMATCH", Some(25)),
            ("UNKNOWN", Some(999)),
            ("SUCCESS", None),
            ("unknown", None),
            ("", None),
        ];
        for (name, code) in cases {
            assert_eq!(error_by_name(name), code, "{name}");
        }
    }

    #[test]
    fn strings_for_known_and_unknown_codes() {
        assert_eq!(error_string(7), c"Insufficient Size");
        assert_eq!(error_string(0), c"Success");
        assert_eq!(error_string(12345), c"Unknown Error");
    }
}
