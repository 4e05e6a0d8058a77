//! Scenario files are read on every call (tests and jobs change them live) but parsed only when
//! their bytes change. Comparing bytes, not mtimes: two writes within one timestamp tick must not
//! be missed.

use std::io::ErrorKind;
use std::path::Path;
use std::sync::{Arc, Mutex};

pub struct Cache<T> {
    last: Mutex<Option<(Vec<u8>, Arc<T>)>>,
}

impl<T> Cache<T> {
    pub const fn new() -> Cache<T> {
        Cache {
            last: Mutex::new(None),
        }
    }

    /// `Ok(None)` when the file does not exist; `Err` names the file and what is wrong with it.
    pub fn load(&self, path: &Path, parse: fn(&str) -> Result<T, String>) -> Result<Option<Arc<T>>, String> {
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        let mut last = self.last.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((cached_bytes, value)) = last.as_ref() {
            if *cached_bytes == bytes {
                return Ok(Some(Arc::clone(value)));
            }
        }
        let text = std::str::from_utf8(&bytes).map_err(|_| format!("{}: not UTF-8", path.display()))?;
        let value = Arc::new(parse(text).map_err(|e| format!("{}: {e}", path.display()))?);
        *last = Some((bytes, Arc::clone(&value)));
        Ok(Some(value))
    }
}
