//! pnpm's store, as the project's `node_modules` records it.
//!
//! A `node_modules` that pnpm installed is tied to the store it was installed from: its
//! `node_modules/.modules.yaml` (JSON despite the name; YAML in older pnpm) records the store
//! as `storeDir` (e.g. `~/.local/share/pnpm/store/v11`). Before `pnpm exec` or `pnpm test`,
//! pnpm checks the dependencies; when the store it would use is not the recorded one, it
//! recreates `node_modules` ("Unexpected store location"), which needs the network the
//! sandboxes do not give. pnpm picks a store on the project's file system when the default one
//! cannot be hard linked from (a Docker volume, a tmpfs), so a sandbox copy elsewhere found
//! another store and reinstalled.
//!
//! Every sandbox therefore points pnpm at the recorded store ([`PnpmStore::env`]:
//! `pnpm_config_store_dir`, read by pnpm 11 and later, and `npm_config_store_dir`, read by
//! older pnpm; both set to the folder above the `v<N>` one, to which pnpm adds its store
//! version itself — pnpm 12 accepts the `v<N>` folder too). pnpm then finds what it expects
//! and runs the command without touching the store. The store is also made reachable where it
//! exists ([`PnpmStore::host`]): bound read-only at the same path by bubblewrap and Docker
//! (nothing the run does can change it; an install, which would need the network anyway,
//! fails instead of writing there).
//!
//! The recorded path comes from the repository, so it is not trusted: it must be absolute,
//! without `.` or `..`, end in `v<digits>`, and to be bound it must be a folder (not a
//! symbolic link) holding pnpm's `files/` folder. Anything else is ignored: the sandbox then
//! runs pnpm as before.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::{Component, Path, PathBuf};

/// The largest `.modules.yaml` read (a monorepo's lists every hoisted package).
const MAX_MODULES_FILE: u64 = 16 << 20;

/// The store a project's `node_modules` was installed from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PnpmStore {
    /// The recorded `storeDir` (ends in `v<N>`).
    pub store_dir: PathBuf,
    /// The store on this machine (canonical), when it exists and looks like a pnpm store: what
    /// a sandbox binds read-only at [`store_dir`](Self::store_dir).
    pub host: Option<PathBuf>,
}

impl PnpmStore {
    /// The variables that point pnpm at the store.
    ///
    /// ```
    /// use nuvira_sandbox::pnpm::PnpmStore;
    /// let store = PnpmStore { store_dir: "/h/.local/share/pnpm/store/v11".into(), host: None };
    /// assert_eq!(store.env()["pnpm_config_store_dir"], "/h/.local/share/pnpm/store");
    /// ```
    pub fn env(&self) -> BTreeMap<String, String> {
        let setting = self
            .store_dir
            .parent()
            .unwrap_or(&self.store_dir)
            .to_string_lossy()
            .into_owned();
        ["pnpm_config_store_dir", "npm_config_store_dir"]
            .into_iter()
            .map(|k| (k.to_owned(), setting.clone()))
            .collect()
    }
}

/// The store recorded by the `node_modules/.modules.yaml` nearest to the command's folder
/// `dir` (workspace-relative) in `workspace`, looking in `dir` and its parents up to the
/// workspace root; `None` when there is none or it records no acceptable store (see the
/// [module docs](self)).
pub fn recorded_store(workspace: &Path, dir: &Path) -> Option<PnpmStore> {
    let mut folder = Some(dir);
    while let Some(rel) = folder {
        if rel
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
        {
            return None;
        }
        let file = workspace.join(rel).join("node_modules/.modules.yaml");
        if let Some(text) = read_small(&file) {
            return store_of(&text).map(|store_dir| {
                let host = host_store(&store_dir);
                PnpmStore { store_dir, host }
            });
        }
        folder = rel.parent();
    }
    None
}

/// The file's text when it is a regular file (not a link) of at most [`MAX_MODULES_FILE`].
fn read_small(file: &Path) -> Option<String> {
    let meta = std::fs::symlink_metadata(file).ok()?;
    if !meta.is_file() || meta.len() > MAX_MODULES_FILE {
        return None;
    }
    let mut text = String::new();
    std::fs::File::open(file)
        .ok()?
        .take(MAX_MODULES_FILE)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// `storeDir` from the file's JSON (or, for older pnpm, a top-level `storeDir:` YAML line),
/// when acceptable.
fn store_of(text: &str) -> Option<PathBuf> {
    let raw = match serde_json::from_str::<serde_json::Value>(text) {
        Ok(v) => v.get("storeDir")?.as_str()?.to_owned(),
        Err(_) => {
            let line = text.lines().find_map(|l| l.strip_prefix("storeDir:"))?;
            line.trim().trim_matches(['"', '\'']).to_owned()
        }
    };
    let path = PathBuf::from(raw);
    let normal = path.is_absolute()
        && path
            .components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    let versioned = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix('v'))
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    (normal && versioned && path.parent() != Some(Path::new("/"))).then_some(path)
}

/// The store folder on this machine when it is a folder (not a link) holding `files/`.
fn host_store(store_dir: &Path) -> Option<PathBuf> {
    let meta = std::fs::symlink_metadata(store_dir).ok()?;
    if !meta.is_dir()
        || !std::fs::symlink_metadata(store_dir.join("files")).is_ok_and(|m| m.is_dir())
    {
        return None;
    }
    std::fs::canonicalize(store_dir).ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn only_an_absolute_versioned_store_path_is_accepted() {
        let ok = r#"{"layoutVersion": 5, "storeDir": "/home/u/.local/share/pnpm/store/v11"}"#;
        assert_eq!(
            store_of(ok),
            Some(PathBuf::from("/home/u/.local/share/pnpm/store/v11"))
        );
        assert_eq!(
            store_of("layoutVersion: 5\nstoreDir: /home/u/.pnpm-store/v3\n"),
            Some(PathBuf::from("/home/u/.pnpm-store/v3"))
        );
        for bad in [
            r#"{"storeDir": "relative/v11"}"#,
            r#"{"storeDir": "/home/u/../../etc/v11"}"#,
            r#"{"storeDir": "/home/u/.ssh"}"#,
            r#"{"storeDir": "/v11"}"#,
            r#"{"storeDir": "/x/v"}"#,
            r#"{"storeDir": "/x/v1a"}"#,
            r#"{"storeDir": 3}"#,
            "nothing here",
        ] {
            assert_eq!(store_of(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_nearest_modules_file_wins_and_a_linked_one_is_ignored() {
        let ws = tempfile::tempdir().unwrap();
        let store = tempfile::tempdir().unwrap();
        let v = store.path().join("v11");
        std::fs::create_dir_all(v.join("files")).unwrap();
        let record = |dir: &Path, at: &Path| {
            std::fs::create_dir_all(dir.join("node_modules")).unwrap();
            std::fs::write(
                dir.join("node_modules/.modules.yaml"),
                format!("{{\"storeDir\": \"{}\"}}", at.display()),
            )
            .unwrap();
        };
        record(ws.path(), &v);
        record(&ws.path().join("pkg"), Path::new("/elsewhere/v10"));
        let root = recorded_store(ws.path(), Path::new("")).unwrap();
        assert_eq!(root.store_dir, v);
        assert_eq!(root.host, Some(std::fs::canonicalize(&v).unwrap()));
        assert_eq!(
            root.env()["npm_config_store_dir"],
            store.path().to_string_lossy()
        );
        let nested = recorded_store(ws.path(), Path::new("pkg")).unwrap();
        assert_eq!(nested.store_dir, PathBuf::from("/elsewhere/v10"));
        assert_eq!(nested.host, None);
        // From a folder without its own node_modules: the root's.
        std::fs::create_dir(ws.path().join("docs")).unwrap();
        assert_eq!(
            recorded_store(ws.path(), Path::new("docs"))
                .unwrap()
                .store_dir,
            v
        );
        // A store folder that is a link is not bound.
        let link = store.path().join("v12");
        std::os::unix::fs::symlink(&v, &link).unwrap();
        record(ws.path(), &link);
        assert_eq!(recorded_store(ws.path(), Path::new("")).unwrap().host, None);
        // A .modules.yaml that is a link is not read.
        let other = tempfile::tempdir().unwrap();
        std::fs::create_dir(other.path().join("node_modules")).unwrap();
        std::os::unix::fs::symlink(
            ws.path().join("node_modules/.modules.yaml"),
            other.path().join("node_modules/.modules.yaml"),
        )
        .unwrap();
        assert_eq!(recorded_store(other.path(), Path::new("")), None);
    }
}
