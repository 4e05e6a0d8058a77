//! A small safe handle over the raw SPANK API: what a hook may ask of Slurm, as Rust values
//! (`gmq_node::hooks::SpankHandle`, which the hook bodies are generic over).

use std::ffi::{c_char, c_int, CStr, CString};
use std::fmt;
use std::marker::PhantomData;

use super::{log, options, sys};
use gmq_node::hooks::{LogLevel, PluginOption, SpankHandle};

/// Where the plugin is running (`spank_context()`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Context {
    /// srun on the submit host.
    Local,
    /// slurmstepd on a compute node, for one step.
    Remote,
    /// sbatch or salloc.
    Allocator,
    /// slurmd itself.
    Slurmd,
    /// the spank prolog/epilog stepd.
    JobScript,
    Unknown,
}

/// A SPANK call that failed, with Slurm's own words for why.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SpankError {
    call: &'static str,
    code: sys::spank_err_t,
}

impl fmt::Display for SpankError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // SAFETY: spank_strerror returns a static string for every code.
        let text = unsafe { CStr::from_ptr(sys::spank_strerror(self.code)) };
        write!(f, "{} failed: {}", self.call, text.to_string_lossy())
    }
}

fn check(call: &'static str, code: sys::spank_err_t) -> Result<(), SpankError> {
    if code == sys::ESPANK_SUCCESS as sys::spank_err_t {
        Ok(())
    } else {
        Err(SpankError { call, code })
    }
}

fn c_string(call: &'static str, text: &str) -> Result<CString, SpankError> {
    CString::new(text).map_err(|_| SpankError {
        call,
        code: sys::slurm_err_t_ESPANK_BAD_ARG,
    })
}

/// A `spank_get_item` item whose one variadic argument is a `T *`; made only by `item!`, which
/// also names the call for error messages.
struct Item<T> {
    item: sys::spank_item::Type,
    call: &'static str,
    written: PhantomData<T>,
}

/// `item!(S_JOB_UID: libc::uid_t)`: the item and the type Slurm writes for it.
macro_rules! item {
    ($name:ident: $type:ty) => {
        Item::<$type> {
            item: sys::spank_item::$name,
            call: concat!("spank_get_item(", stringify!($name), ")"),
            written: PhantomData,
        }
    };
}

/// The handle Slurm passes to a hook, plus the hook's plugstack arguments.
pub(crate) struct Spank {
    raw: sys::spank_t,
    args: Vec<String>,
}

/// The longest environment value [`Spank::getenv`] reads: Linux's limit for one argument or
/// variable (`MAX_ARG_STRLEN`, 128 KiB).
const MAX_ENV_VALUE: usize = 128 * 1024;

impl Spank {
    /// # Safety
    /// `raw`, `ac` and `av` must be what Slurm passed to the hook being run.
    pub(crate) unsafe fn from_hook(raw: sys::spank_t, ac: c_int, av: *mut *mut c_char) -> Spank {
        let mut args = Vec::new();
        if !av.is_null() {
            for i in 0..ac.max(0) as usize {
                // SAFETY: Slurm passes `ac` valid entries in `av` (the caller's contract).
                let word = unsafe { *av.add(i) };
                if !word.is_null() {
                    // SAFETY: a non-null entry of `av` is a NUL-terminated string Slurm owns for
                    // the hook's duration; it is copied at once.
                    let text = unsafe { CStr::from_ptr(word) };
                    args.push(text.to_string_lossy().into_owned());
                }
            }
        }
        Spank { raw, args }
    }

    pub(crate) fn context(&self) -> Context {
        use sys::spank_context::*;
        // SAFETY: no arguments; reads Slurm's global plugin stack.
        match unsafe { sys::spank_context() } {
            S_CTX_LOCAL => Context::Local,
            S_CTX_REMOTE => Context::Remote,
            S_CTX_ALLOCATOR => Context::Allocator,
            S_CTX_SLURMD => Context::Slurmd,
            S_CTX_JOB_SCRIPT => Context::JobScript,
            _ => Context::Unknown,
        }
    }

    fn register(&self, option: &PluginOption) -> Result<(), SpankError> {
        let mut raw = options::to_raw(option);
        // SAFETY: `raw` points at 'static strings; Slurm copies what it keeps.
        check("spank_option_register", unsafe {
            sys::spank_option_register(self.raw, &mut raw)
        })
    }

    fn option_value(&self, option: &PluginOption) -> Result<Option<String>, SpankError> {
        let mut raw = options::to_raw(option);
        let mut value: *mut c_char = std::ptr::null_mut();
        // SAFETY: `raw` is valid for the call; Slurm sets `value` to a string it owns, or NULL.
        let code = unsafe { sys::spank_option_getopt(self.raw, &mut raw, &mut value) };
        if code == sys::slurm_err_t_ESPANK_ERROR {
            return Ok(None); // "not used on the command line nor in the job environment"
        }
        check("spank_option_getopt", code)?;
        if value.is_null() {
            return Ok(Some(String::new()));
        }
        // SAFETY: non-NULL and NUL-terminated, owned by Slurm's option cache for the step's lifetime.
        Ok(Some(
            unsafe { CStr::from_ptr(value) }.to_string_lossy().into_owned(),
        ))
    }

    fn set(&self, name: &str, value: &str) -> Result<(), SpankError> {
        let name = c_string("spank_setenv", name)?;
        let value = c_string("spank_setenv", value)?;
        // SAFETY: both strings are valid for the call; Slurm copies them.
        check("spank_setenv", unsafe {
            sys::spank_setenv(self.raw, name.as_ptr(), value.as_ptr(), 1)
        })
    }

    fn unset(&self, name: &str) -> Result<(), SpankError> {
        let name = c_string("spank_unsetenv", name)?;
        // SAFETY: the string is valid for the call.
        check("spank_unsetenv", unsafe {
            sys::spank_unsetenv(self.raw, name.as_ptr())
        })
    }

    /// Reads a variable of the job's environment, whatever its length (up to [`MAX_ENV_VALUE`]
    /// bytes): a long value read as unset would be overwritten, or an identity taken as unknown.
    fn get(&self, name: &str) -> Result<Option<String>, SpankError> {
        let name = c_string("spank_getenv", name)?;
        let mut len = 4096;
        loop {
            let mut buf = vec![0u8; len];
            // SAFETY: buf is writable for its length; Slurm NUL-terminates within it.
            let code = unsafe {
                sys::spank_getenv(
                    self.raw,
                    name.as_ptr(),
                    buf.as_mut_ptr().cast(),
                    buf.len() as c_int,
                )
            };
            if code == sys::slurm_err_t_ESPANK_ENV_NOEXIST {
                return Ok(None);
            }
            if code == sys::slurm_err_t_ESPANK_NOSPACE && len < MAX_ENV_VALUE {
                len = (len * 8).min(MAX_ENV_VALUE);
                continue;
            }
            check("spank_getenv", code)?;
            let text = CStr::from_bytes_until_nul(&buf).map_err(|_| SpankError {
                call: "spank_getenv",
                code: sys::slurm_err_t_ESPANK_NOSPACE,
            })?;
            return Ok(Some(text.to_string_lossy().into_owned()));
        }
    }

    /// Reads one `spank_get_item` item that Slurm writes through a single `T *`.
    fn item<T: Copy + Default>(&self, item: Item<T>) -> Result<T, String> {
        let mut value = T::default();
        // SAFETY: `Item`s are made only with `item!`, in this file, and each use below pairs an item
        // with the C type spank.h documents for it (`uint32_t *`, `uid_t *`, `gid_t *`, `int *`):
        // Slurm writes one `T` into `value`, which we own, and keeps no pointer to it.
        check(item.call, unsafe {
            sys::spank_get_item(self.raw, item.item, &mut value as *mut T)
        })
        .map_err(|e| e.to_string())?;
        Ok(value)
    }
}

impl SpankHandle for Spank {
    fn plugin_args(&self) -> &[String] {
        &self.args
    }

    fn register_option(&self, option: &PluginOption) -> Result<(), String> {
        self.register(option).map_err(|e| e.to_string())
    }

    fn getopt(&self, option: &PluginOption) -> Result<Option<String>, String> {
        self.option_value(option).map_err(|e| e.to_string())
    }

    fn given(&self, option: &PluginOption) -> Option<String> {
        options::given(option)
    }

    fn getenv(&self, name: &str) -> Result<Option<String>, String> {
        self.get(name).map_err(|e| e.to_string())
    }

    fn setenv(&self, name: &str, value: &str) -> Result<(), String> {
        self.set(name, value).map_err(|e| e.to_string())
    }

    fn unsetenv(&self, name: &str) -> Result<(), String> {
        self.unset(name).map_err(|e| e.to_string())
    }

    fn own_env(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|value| !value.is_empty())
    }

    fn job_id(&self) -> Result<u32, String> {
        self.item(item!(S_JOB_ID: u32))
    }

    fn job_uid(&self) -> Result<u32, String> {
        self.item(item!(S_JOB_UID: libc::uid_t))
    }

    fn job_gid(&self) -> Result<u32, String> {
        self.item(item!(S_JOB_GID: libc::gid_t))
    }

    fn step_id(&self) -> Result<u32, String> {
        self.item(item!(S_JOB_STEPID: u32))
    }

    fn task_global_id(&self) -> Result<u32, String> {
        self.item(item!(S_TASK_GLOBAL_ID: u32))
    }

    fn task_local_id(&self) -> Result<i32, String> {
        // spank.h: `int *`, where the global id is a `uint32_t *`.
        self.item(item!(S_TASK_ID: c_int))
    }

    /// slurmstepd's count from slurmctld (the job's own `SLURM_RESTART_COUNT` is the user's to set
    /// in srun steps).
    fn restart_count(&self) -> Result<u32, String> {
        self.item(item!(S_SLURM_RESTART_COUNT: u32))
    }

    fn slurm_version(&self) -> u32 {
        sys::SLURM_VERSION_NUMBER
    }

    fn log(&self, level: LogLevel, line: &str) {
        log::log(level, line);
    }

    fn tell_job(&self, line: &str) {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "{line}");
    }
}
