//! The data directory is private: the sled store holds every tool call's arguments and every
//! tool result, which carry users' secrets.
//!
//! On unix, [`ensure_private`] creates a missing directory (and missing parents) with mode
//! `0700`. An existing directory that the group or others can access (any of `0o077`) is
//! **tightened** to `0700` and a warning says what its mode was. When that is not possible
//! (the worker does not own it, e.g. a volume root shared through a group) the worker still
//! starts and logs an error naming the directory and its mode: refusing to start would take
//! the worker down over a deployment choice the operator may have made on purpose.
//!
//! Elsewhere the directory is only created.

use anyhow::Context as _;
use std::path::Path;

/// What [`ensure_private`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Private {
    /// It did not exist and was created `0700`.
    Created,
    /// It existed and was already private (nothing changed).
    Unchanged,
    /// It existed with this mode (group/other bits set) and is `0700` now.
    Tightened {
        /// The permission bits it had.
        was: u32,
    },
    /// It is group/world accessible with this mode and could not be tightened.
    StillOpen {
        /// The permission bits it has.
        mode: u32,
    },
}

/// Makes `dir` exist and be private (see the module docs), logging what it changed.
pub fn ensure_private(dir: &Path) -> anyhow::Result<Private> {
    let outcome = imp::ensure_private(dir)?;
    match outcome {
        Private::Created | Private::Unchanged => {}
        Private::Tightened { was } => tracing::warn!(
            dir = %dir.display(),
            was = %format!("{was:04o}"),
            now = "0700",
            "the data directory was accessible to other users; tightened to 0700 (it holds \
             tool-call arguments and results)"
        ),
        Private::StillOpen { mode } => tracing::error!(
            dir = %dir.display(),
            mode = %format!("{mode:04o}"),
            "the data directory is accessible to other users and could not be tightened (not \
             its owner?); it holds tool-call arguments and results: make it 0700"
        ),
    }
    Ok(outcome)
}

#[cfg(unix)]
mod imp {
    use super::*;
    use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};

    /// Group and other permission bits.
    const OPEN_BITS: u32 = 0o077;

    pub(super) fn ensure_private(dir: &Path) -> anyhow::Result<Private> {
        match std::fs::metadata(dir) {
            Ok(meta) => {
                if !meta.is_dir() {
                    anyhow::bail!("data directory {} is not a directory", dir.display());
                }
                let mode = meta.permissions().mode() & 0o7777;
                if mode & OPEN_BITS == 0 {
                    return Ok(Private::Unchanged);
                }
                let private = std::fs::Permissions::from_mode((mode & !OPEN_BITS) | 0o700);
                match std::fs::set_permissions(dir, private) {
                    Ok(()) => Ok(Private::Tightened { was: mode }),
                    Err(_) => Ok(Private::StillOpen { mode }),
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)
                    .with_context(|| format!("create data directory {}", dir.display()))?;
                // the umask can only remove bits, but say exactly what it is
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                    .with_context(|| format!("chmod 0700 {}", dir.display()))?;
                Ok(Private::Created)
            }
            Err(e) => Err(e).with_context(|| format!("inspect data directory {}", dir.display())),
        }
    }
}

#[cfg(not(unix))]
mod imp {
    use super::*;

    pub(super) fn ensure_private(dir: &Path) -> anyhow::Result<Private> {
        if dir.is_dir() {
            return Ok(Private::Unchanged);
        }
        std::fs::create_dir_all(dir)
            .with_context(|| format!("create data directory {}", dir.display()))?;
        Ok(Private::Created)
    }
}

#[cfg(test)]
#[cfg(unix)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn a_missing_directory_and_its_missing_parents_are_created_0700() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("a").join("b");
        assert_eq!(ensure_private(&dir).unwrap(), Private::Created);
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&t.path().join("a")), 0o700);
        assert_eq!(ensure_private(&dir).unwrap(), Private::Unchanged);
    }

    #[test]
    fn an_existing_group_or_world_readable_directory_is_tightened() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("d");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(
            ensure_private(&dir).unwrap(),
            Private::Tightened { was: 0o755 }
        );
        assert_eq!(mode(&dir), 0o700);
    }

    #[test]
    fn a_file_in_place_of_the_directory_is_an_error() {
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("f");
        std::fs::write(&f, b"x").unwrap();
        assert!(ensure_private(&f).is_err());
    }
}
