//! User names from uids (the passwd database, through NSS).

use std::ffi::CStr;

/// The login name of `uid`, or `None` when the passwd database has no entry for it.
pub fn user_name(uid: u32) -> Option<String> {
    let mut buf = vec![0u8; 4096];
    loop {
        // SAFETY: an all-zero passwd is a valid value to be overwritten.
        let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the call; buf outlives the use of entry's strings.
        let rc = unsafe { libc::getpwuid_r(uid, &mut entry, buf.as_mut_ptr().cast(), buf.len(), &mut found) };
        if rc == libc::ERANGE && buf.len() < 1 << 20 {
            buf.resize(buf.len() * 4, 0);
            continue;
        }
        if rc != 0 || found.is_null() || entry.pw_name.is_null() {
            return None;
        }
        // SAFETY: getpwuid_r filled pw_name with a NUL-terminated string inside buf.
        return Some(
            unsafe { CStr::from_ptr(entry.pw_name) }
                .to_string_lossy()
                .into_owned(),
        );
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn root_is_root() {
        assert_eq!(super::user_name(0).as_deref(), Some("root"));
        assert_eq!(super::user_name(4_000_000_000), None);
    }
}
