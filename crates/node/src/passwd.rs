//! User names from uids (the passwd database, through NSS).

use nix::unistd::{Uid, User};

/// The login name of `uid`, or `None` when the passwd database has no entry for it (or the
/// lookup fails: nix grows getpwuid_r's buffer on ERANGE up to 1 MiB).
pub fn user_name(uid: u32) -> Option<String> {
    let user = User::from_uid(Uid::from_raw(uid)).ok()??;
    // nix turns a null pw_name into ""; that is no name either.
    Some(user.name).filter(|name| !name.is_empty())
}

#[cfg(test)]
mod tests {
    #[test]
    fn root_is_root() {
        assert_eq!(super::user_name(0).as_deref(), Some("root"));
        assert_eq!(super::user_name(4_000_000_000), None);
    }
}
