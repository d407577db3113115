//! The data directory of `listwatch serve` is private to the user running it: the directory
//! and every directory below it have mode 0700, every file 0600, because it holds the CA key,
//! the admin token and the store (with every Secret).
//!
//! What the server creates there is created with those modes from the start (the store in
//! `storage::embedded`, the credentials in `apiserver::server::tls`). [`make_private`] runs
//! first at start: it creates the directory if it is missing and tightens what an older
//! version left readable by others, logging one line per entry it changes.

use std::io;
use std::path::{Path, PathBuf};

/// The mode of directories in the data directory (and of the directory itself).
pub const DIR_MODE: u32 = 0o700;
/// The mode of files in the data directory.
pub const FILE_MODE: u32 = 0o600;

/// One permission change [`make_private`] made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModeFix {
    /// The entry whose mode changed.
    pub path: PathBuf,
    /// Its permission bits before.
    pub from: u32,
    /// Its permission bits after ([`DIR_MODE`] or [`FILE_MODE`]).
    pub to: u32,
}

/// Creates `dir` (and missing parents) with mode 0700 if it does not exist; otherwise gives
/// it, and every directory and file below it whose mode lets group or others in, mode 0700
/// (directories) or 0600 (files), logging a warning for each. Symbolic links are neither
/// followed nor changed. Returns the changes made, in the order they were made.
///
/// # Errors
/// `dir` is not a directory, or creating it, reading it or changing a mode failed.
pub fn make_private(dir: &Path) -> io::Result<Vec<ModeFix>> {
    let mut fixes = Vec::new();
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let mut builder = std::fs::DirBuilder::new();
            builder.recursive(true);
            #[cfg(unix)]
            {
                use std::os::unix::fs::DirBuilderExt as _;
                builder.mode(DIR_MODE);
            }
            builder.create(dir)?;
        }
        Err(e) => return Err(e),
        // A data directory given as a symbolic link is the user's choice: its target is
        // tightened like any data directory.
        Ok(_) => {
            let meta = std::fs::metadata(dir)?;
            if !meta.is_dir() {
                return Err(io::Error::other(format!(
                    "{} exists and is not a directory",
                    dir.display()
                )));
            }
            tighten(dir, &meta, &mut fixes)?;
        }
    }
    Ok(fixes)
}

/// Tightens `path` (described by `meta`, not a symbolic link) and, for a directory,
/// everything below it.
fn tighten(path: &Path, meta: &std::fs::Metadata, fixes: &mut Vec<ModeFix>) -> io::Result<()> {
    let is_dir = meta.is_dir();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let from = meta.permissions().mode() & 0o7777;
        let to = if is_dir { DIR_MODE } else { FILE_MODE };
        if from & 0o077 != 0 {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(to))?;
            tracing::warn!(
                path = %path.display(),
                from = format!("{from:04o}"),
                to = format!("{to:04o}"),
                "the data directory was readable by other users; permissions tightened"
            );
            fixes.push(ModeFix {
                path: path.to_path_buf(),
                from,
                to,
            });
        }
    }
    if is_dir {
        for entry in std::fs::read_dir(path)? {
            let entry = entry?;
            let meta = entry.metadata()?;
            if !meta.file_type().is_symlink() {
                tighten(&entry.path(), &meta, fixes)?;
            }
        }
    }
    Ok(())
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
    }

    fn set(p: &Path, m: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    }

    #[test]
    fn a_missing_directory_is_created_private() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/b");
        assert_eq!(make_private(&dir).unwrap(), []);
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&tmp.path().join("a")), 0o700);
    }

    #[test]
    fn loose_modes_are_tightened_and_reported() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        let pki = dir.join("pki");
        std::fs::create_dir_all(&pki).unwrap();
        let (store, cert, key) = (
            dir.join("listwatch.redb"),
            pki.join("ca.crt"),
            pki.join("ca.key"),
        );
        for f in [&store, &cert, &key] {
            std::fs::write(f, "x").unwrap();
        }
        set(&dir, 0o755);
        set(&pki, 0o750);
        set(&store, 0o644);
        set(&cert, 0o604);
        set(&key, 0o600);
        // A link to something outside is neither followed nor changed.
        let outside = tmp.path().join("outside");
        std::fs::write(&outside, "x").unwrap();
        set(&outside, 0o644);
        std::os::unix::fs::symlink(&outside, dir.join("link")).unwrap();

        let mut fixes = make_private(&dir).unwrap();
        fixes.sort_by(|a, b| a.path.cmp(&b.path));
        let fix = |path: &Path, from, to| ModeFix {
            path: path.to_path_buf(),
            from,
            to,
        };
        assert_eq!(
            fixes,
            [
                fix(&dir, 0o755, 0o700),
                fix(&store, 0o644, 0o600),
                fix(&pki, 0o750, 0o700),
                fix(&cert, 0o604, 0o600),
            ]
        );
        for (p, m) in [
            (&dir, 0o700),
            (&pki, 0o700),
            (&store, 0o600),
            (&cert, 0o600),
        ] {
            assert_eq!(mode(p), m, "{}", p.display());
        }
        assert_eq!(mode(&key), 0o600);
        assert_eq!(mode(&outside), 0o644);
        // Once private, nothing more to do.
        assert_eq!(make_private(&dir).unwrap(), []);
    }
}
