//! Nuvira's state folder `.nuvira/` and this machine's journal key.
//!
//! Anything under `.nuvira/` may have come with a checkout, so it is data from whoever wrote the
//! repository: no component of a path into it is ever followed as a symlink
//! ([`Workspace::state_folder`](crate::Workspace::state_folder)), the folders Nuvira creates there
//! are private (`0700`), and the journal trusts only transactions signed with a key that never
//! leaves this machine ([`key_path`]).

use crate::WorkspaceError;
use std::io;
use std::path::{Path, PathBuf};

/// The environment variable that overrides the folder of Nuvira's per-machine state (the
/// journal key). Unset, it is `$XDG_STATE_HOME/nuvira`, else `~/.local/state/nuvira`.
pub const STATE_DIR_ENV: &str = "NUVIRA_STATE_DIR";

/// The journal key's file name in the per-machine state folder.
const KEY_FILE: &str = "journal.key";

/// How many bytes the journal key has.
const KEY_LEN: usize = 32;

/// Whether `name` is a run id: `run-` then ASCII letters, digits and `-` (at least one), at
/// most 64 bytes. Only such names become paths under `.nuvira/runs` (the run history of the
/// `nuvira` crate, read by the CLI and by `nuvira-mcp`'s `nuvira://runs/<id>` resources), so a
/// name from a checkout or a client never climbs out of it nor reaches a terminal raw.
///
/// ```
/// use nuvira_workspace::is_run_id;
/// assert!(is_run_id("run-1764580000-0a1f"));
/// assert!(!is_run_id("run-"));
/// assert!(!is_run_id("run-../../etc"));
/// assert!(!is_run_id("run-\u{1b}[31m"));
/// ```
pub fn is_run_id(name: &str) -> bool {
    name.len() <= 64
        && name.strip_prefix("run-").is_some_and(|rest| {
            !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// The mode of every folder Nuvira creates in its state folders.
#[cfg(unix)]
const PRIVATE_DIR_MODE: u32 = 0o700;

/// The folder of Nuvira's per-machine state: `$NUVIRA_STATE_DIR`, else
/// `$XDG_STATE_HOME/nuvira` (when absolute), else `$HOME/.local/state/nuvira`. `None` when none
/// of them is set.
pub fn machine_state_dir() -> Option<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(dir) = var(STATE_DIR_ENV) {
        return Some(PathBuf::from(dir));
    }
    if let Some(xdg) = var("XDG_STATE_HOME").map(PathBuf::from)
        && xdg.is_absolute()
    {
        return Some(xdg.join("nuvira"));
    }
    var("HOME").map(|home| PathBuf::from(home).join(".local/state/nuvira"))
}

/// Where this machine's journal key lives (`<machine state dir>/journal.key`), if a state folder
/// is known ([`machine_state_dir`]). The key is 32 random bytes, created `0600` the first time
/// a transaction is written; a journal transaction whose manifest is not signed with it
/// (HMAC-SHA256) was not written on this machine and is never recovered or rolled back.
pub fn key_path() -> Option<PathBuf> {
    machine_state_dir().map(|d| d.join(KEY_FILE))
}

/// Why the journal key could not be used.
#[derive(Debug)]
pub(crate) struct KeyError {
    pub(crate) path: PathBuf,
    pub(crate) reason: String,
}

/// This machine's journal key.
pub(crate) struct Key([u8; KEY_LEN]);

impl Key {
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// Loads the journal key; with `create`, makes one when there is none yet. `Ok(None)`: there
/// is none and `create` is false.
pub(crate) fn load_key(create: bool) -> Result<Option<Key>, KeyError> {
    let Some(path) = key_path() else {
        return Err(KeyError {
            path: PathBuf::from(KEY_FILE),
            reason: format!("none of {STATE_DIR_ENV}, XDG_STATE_HOME and HOME is set"),
        });
    };
    let fail = |reason: String| KeyError {
        path: path.clone(),
        reason,
    };
    match read_key(&path) {
        Ok(key) => return Ok(Some(key)),
        Err(e) if e.kind() == io::ErrorKind::NotFound && create => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(fail(e.to_string())),
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    create_private_dir_all(dir).map_err(|e| fail(format!("create its folder: {e}")))?;
    let mut bytes = [0u8; KEY_LEN];
    getrandom::fill(&mut bytes).map_err(|e| fail(format!("get random bytes: {e}")))?;
    // Written whole to a private temp file, then linked into place only if no other process
    // made a key first: a reader never sees half a key, and two first runs agree on one key.
    let write = || -> io::Result<()> {
        use std::io::Write as _;
        let mut tmp = tempfile::Builder::new()
            .prefix(".journal-key-")
            .tempfile_in(dir)?;
        set_private(tmp.as_file())?;
        tmp.write_all(&bytes)?;
        tmp.as_file().sync_all()?;
        match tmp.persist_noclobber(&path) {
            Ok(_) => crate::sync_dir(dir),
            Err(e) if e.error.kind() == io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(e.error),
        }
    };
    write().map_err(|e| fail(format!("create it: {e}")))?;
    read_key(&path).map(Some).map_err(|e| fail(e.to_string()))
}

fn read_key(path: &Path) -> io::Result<Key> {
    let meta = std::fs::symlink_metadata(path)?;
    if !meta.is_file() {
        return Err(io::Error::other(
            "it is not a regular file: remove it (transactions signed with it will be ignored)",
        ));
    }
    let bytes = std::fs::read(path)?;
    let key: [u8; KEY_LEN] = bytes.as_slice().try_into().map_err(|_| {
        io::Error::other(format!(
            "it holds {} bytes, not {KEY_LEN}: remove it (transactions signed with it will be ignored)",
            bytes.len()
        ))
    })?;
    Ok(Key(key))
}

#[cfg(unix)]
fn set_private(file: &std::fs::File) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
}

#[cfg(not(unix))]
fn set_private(_file: &std::fs::File) -> io::Result<()> {
    Ok(())
}

/// Creates `dir` and its missing parents, the new ones private (`0700`).
fn create_private_dir_all(dir: &Path) -> io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(PRIVATE_DIR_MODE);
    }
    builder.create(dir)
}

/// Creates one private folder (`0700`); its parent must exist.
fn create_private_dir(dir: &Path) -> io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(PRIVATE_DIR_MODE);
    }
    builder.create(dir)
}

/// Narrows an existing folder of the state folder to `0700`.
fn make_private(dir: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::symlink_metadata(dir)?.permissions().mode() & 0o7777;
        if mode != PRIVATE_DIR_MODE {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(PRIVATE_DIR_MODE))?;
        }
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// `<root>/.nuvira/<parts>`, every component checked without following a symlink; see
/// [`Workspace::state_folder`](crate::Workspace::state_folder).
pub(crate) fn state_folder(
    root: &Path,
    parts: &[&str],
    create: bool,
) -> Result<Option<PathBuf>, WorkspaceError> {
    let mut path = root.to_path_buf();
    let mut shown = String::new();
    for (i, part) in std::iter::once(crate::STATE_DIR)
        .chain(parts.iter().copied())
        .enumerate()
    {
        if part.is_empty() || part == "." || part == ".." || part.contains(['/', '\\']) {
            return Err(WorkspaceError::InvalidPath {
                path: format!("{shown}/{part}"),
                reason: "a folder of the state folder must be one plain name".into(),
            });
        }
        path.push(part);
        if i > 0 {
            shown.push('/');
        }
        shown.push_str(part);
        match check_folder(&path, &shown)? {
            true => {
                if create {
                    make_private(&path)
                        .map_err(|e| WorkspaceError::io("make private", &shown, e))?;
                }
            }
            false if !create => return Ok(None),
            false => {
                match create_private_dir(&path) {
                    Ok(()) => {}
                    // Another process made it first: it must still be a real folder.
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                        if !check_folder(&path, &shown)? {
                            return Err(WorkspaceError::io("create", &shown, e));
                        }
                        continue;
                    }
                    Err(e) => return Err(WorkspaceError::io("create", &shown, e)),
                }
                if i == 0 {
                    // Keep Nuvira's state out of `git status` and out of commits.
                    write_gitignore(&path).map_err(|e| {
                        WorkspaceError::io("create", format!("{shown}/.gitignore"), e)
                    })?;
                }
                let parent = path.parent().unwrap_or(root);
                crate::sync_dir(parent).map_err(|e| WorkspaceError::io("sync", &shown, e))?;
            }
        }
    }
    Ok(Some(path))
}

/// Whether `path` is a real folder (`false`: it does not exist); a symlink or anything else is
/// refused, naming it as `shown`.
fn check_folder(path: &Path, shown: &str) -> Result<bool, WorkspaceError> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => Err(WorkspaceError::StateLink {
            link: shown.to_owned(),
            target: std::fs::read_link(path)
                .map(|t| t.display().to_string())
                .unwrap_or_else(|_| "?".into()),
        }),
        Ok(meta) if meta.is_dir() => Ok(true),
        Ok(_) => Err(WorkspaceError::StateNotFolder {
            path: shown.to_owned(),
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(WorkspaceError::io("inspect", shown, e)),
    }
}

fn write_gitignore(state: &Path) -> io::Result<()> {
    use std::io::Write as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(state.join(".gitignore"))?;
    f.write_all(b"*\n")?;
    f.sync_all()
}
