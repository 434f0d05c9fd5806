//! `nuvira cache list|clean [--repo DIR] [--json] [--deleted-folders]`: the sandboxes' warm build
//! caches.
//!
//! `list` shows every cache entry (key, toolchain, size, last use, project folder, Docker
//! volume), Docker cache volumes whose entry is gone and the containers kept for warm slots
//! (`nuvira_sandbox::docker_keep`); `clean` removes entries' folders, their Docker volumes and
//! the kept containers of their slots (all of them, or one repository's with `--repo`). Entries a running
//! test holds are left and named. Both also see the volumes and kept containers of cache folders
//! that were deleted; `clean --deleted-folders` removes only those. See `nuvira_sandbox::cache`
//! and docs/sandbox.md.
//!
//! Exit codes: 0 done; 2 bad arguments; 3 the cache folder cannot be used, or (clean) an entry
//! or volume could not be removed.

use crate::cli::esc;
use crate::exit;
use nuvira_sandbox::cache::{CacheRoot, EntryInfo, dir_size, volume_name};
use serde_json::json;
use std::path::{Path, PathBuf};

/// Arguments of `nuvira cache`.
#[derive(Debug, clap::Args)]
#[command(after_help = super::conventions::after_help(&[
    ("the cache entries of every project, with sizes and last use", "nuvira cache list"),
    ("remove this repository's caches and Docker volumes", "nuvira cache clean --repo ."),
]))]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, clap::Subcommand)]
enum Action {
    /// List the cache entries (and Docker cache volumes).
    List(Scope),
    /// Remove cache entries and their Docker volumes.
    Clean(Scope),
}

#[derive(Debug, clap::Args)]
struct Scope {
    /// Only this repository's entries (a folder that no longer exists is matched by path).
    #[arg(long, value_name = "DIR")]
    repo: Option<PathBuf>,
    /// Print JSON on stdout.
    #[arg(long)]
    json: bool,
    /// Docker volumes and kept containers of cache folders that no longer exist on this
    /// machine (a deleted temporary `NUVIRA_CACHE_DIR`'s, a test's): `list` shows them always,
    /// `clean --deleted-folders` removes only them.
    #[arg(long, conflicts_with = "repo")]
    deleted_folders: bool,
}

/// Runs the command.
pub fn execute(args: Args) -> u8 {
    let (scope, clean) = match &args.action {
        Action::List(s) => (s, false),
        Action::Clean(s) => (s, true),
    };
    // A repository that is gone is matched by its recorded path; one that is a file is a
    // mistake, as for every command's --repo.
    if let Some(repo) = &scope.repo
        && std::fs::metadata(repo).is_ok_and(|m| !m.is_dir())
    {
        eprintln!("error: {}", crate::cli::RepoError::NotAFolder(repo.clone()));
        return exit::INVALID;
    }
    let root = match CacheRoot::from_env() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {}", esc(&e.to_string()));
            return exit::ENVIRONMENT;
        }
    };
    let entries = match select(&root, scope.repo.as_deref()) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("error: {}", esc(&e));
            return exit::ENVIRONMENT;
        }
    };
    let rt = match crate::cli::runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: start the async runtime: {e}");
            return exit::ENVIRONMENT;
        }
    };
    rt.block_on(async {
        let docker = Docker::connect().await;
        if clean && scope.deleted_folders {
            return clean_deleted_folders(scope, &docker).await;
        }
        if clean {
            clean_entries(&root, scope, &entries, &docker).await
        } else {
            list_entries(&root, scope, &entries, &docker).await
        }
    })
}

/// The entries of `repo` (by key, or by recorded path when the folder is gone), or all.
fn select(root: &CacheRoot, repo: Option<&Path>) -> Result<Vec<EntryInfo>, String> {
    let all = root.list().map_err(|e| e.to_string())?;
    let Some(repo) = repo else { return Ok(all) };
    match nuvira_sandbox::cache::project_key(repo) {
        Ok((_, key)) => Ok(all
            .into_iter()
            .filter(|e| e.meta.project_key == key)
            .collect()),
        Err(_) => {
            let abs = std::path::absolute(repo).unwrap_or_else(|_| repo.to_path_buf());
            Ok(all.into_iter().filter(|e| e.meta.project == abs).collect())
        }
    }
}

/// The Docker side, when an engine answers.
enum Docker {
    #[cfg(feature = "docker")]
    Up(Box<nuvira_sandbox::DockerSandbox>),
    Down(String),
}

impl Docker {
    async fn connect() -> Self {
        #[cfg(feature = "docker")]
        {
            match nuvira_sandbox::DockerSandbox::connect().await {
                Ok((s, _)) => Self::Up(Box::new(s)),
                Err(e) => Self::Down(e.to_string()),
            }
        }
        #[cfg(not(feature = "docker"))]
        {
            Self::Down("this build has no Docker support".into())
        }
    }

    /// The cache volumes of cache folder `root` (name, entry key, project key, project) and
    /// their sizes; another cache folder's volumes on the same engine are not this one's to
    /// list or clean.
    async fn volumes(
        &self,
        root: &CacheRoot,
    ) -> Result<Vec<(String, String, String, String, u64)>, String> {
        match self {
            #[cfg(feature = "docker")]
            Self::Up(d) => {
                let sizes = nuvira_sandbox::docker_cache::volume_sizes(d.client()).await;
                let list =
                    nuvira_sandbox::docker_cache::list_volumes(d.client(), root.dir()).await?;
                Ok(list
                    .into_iter()
                    .map(|v| {
                        let size = sizes.get(&v.name).copied().unwrap_or(0);
                        (v.name, v.key, v.project_key, v.project, size)
                    })
                    .collect())
            }
            Self::Down(e) => {
                // Nothing to filter without an engine.
                let _ = root;
                Err(e.clone())
            }
        }
    }

    /// The kept containers of cache folder `root` (nuvira_sandbox::docker_keep): id, name,
    /// project key, project, slot, status.
    async fn kept(&self, root: &CacheRoot) -> Result<Vec<Kept>, String> {
        match self {
            #[cfg(feature = "docker")]
            Self::Up(d) => Ok(
                nuvira_sandbox::docker_keep::list_kept(d.client(), root.dir())
                    .await?
                    .into_iter()
                    .map(|k| Kept {
                        id: k.id,
                        name: k.name,
                        project_key: k.project_key,
                        project: k.project,
                        slot: k.slot,
                        status: k.status,
                    })
                    .collect(),
            ),
            Self::Down(e) => {
                let _ = root;
                Err(e.clone())
            }
        }
    }

    /// The volumes (name, cache folder, project, size) and kept containers of cache folders
    /// that no longer exist on this machine.
    async fn of_deleted_folders(&self) -> Result<(Vec<Gone>, Vec<Gone>), String> {
        match self {
            #[cfg(feature = "docker")]
            Self::Up(d) => {
                let client = d.client();
                let volumes = nuvira_sandbox::docker_cache::list_orphaned_volumes(client).await?;
                let sizes = if volumes.is_empty() {
                    std::collections::BTreeMap::new()
                } else {
                    nuvira_sandbox::docker_cache::volume_sizes(client).await
                };
                let kept = nuvira_sandbox::docker_keep::list_orphaned_kept(client).await?;
                Ok((
                    volumes
                        .into_iter()
                        .map(|v| Gone {
                            size: sizes.get(&v.name).copied().unwrap_or(0),
                            id: v.name.clone(),
                            name: v.name,
                            root: v.root,
                            project: v.project,
                            status: String::new(),
                        })
                        .collect(),
                    kept.into_iter()
                        .map(|k| Gone {
                            id: k.id,
                            name: k.name,
                            root: k.root,
                            project: k.project,
                            size: 0,
                            status: k.status,
                        })
                        .collect(),
                ))
            }
            Self::Down(e) => Err(e.clone()),
        }
    }

    async fn remove_kept(&self, ids: &[String]) -> Result<(), String> {
        #[cfg(not(feature = "docker"))]
        let _ = ids;
        match self {
            #[cfg(feature = "docker")]
            Self::Up(d) => nuvira_sandbox::docker_keep::remove_kept(d.client(), ids).await,
            Self::Down(e) => Err(e.clone()),
        }
    }

    async fn remove(&self, names: &[String]) -> Result<(), String> {
        #[cfg(not(feature = "docker"))]
        let _ = names;
        match self {
            #[cfg(feature = "docker")]
            Self::Up(d) => nuvira_sandbox::docker_cache::remove_volumes(d.client(), names).await,
            Self::Down(e) => Err(e.clone()),
        }
    }
}

/// A volume or kept container of a cache folder that no longer exists.
#[derive(Debug, Clone)]
struct Gone {
    /// The container's id, or the volume's name.
    id: String,
    name: String,
    root: String,
    project: String,
    size: u64,
    status: String,
}

/// A container kept for a warm slot.
#[derive(Debug, Clone)]
struct Kept {
    id: String,
    name: String,
    project_key: String,
    project: String,
    slot: u32,
    status: String,
}

fn human(bytes: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < units.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", units[i])
    }
}

fn ago(secs: u64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let d = now.saturating_sub(secs);
    match d {
        0..60 => format!("{d}s ago"),
        60..3600 => format!("{}m ago", d / 60),
        3600..86400 => format!("{}h ago", d / 3600),
        _ => format!("{}d ago", d / 86400),
    }
}

async fn list_entries(
    root: &CacheRoot,
    scope: &Scope,
    entries: &[EntryInfo],
    docker: &Docker,
) -> u8 {
    let volumes = docker.volumes(root).await;
    let vol_size = |name: &str| {
        volumes
            .as_ref()
            .ok()
            .and_then(|v| v.iter().find(|x| x.0 == name).map(|x| x.4))
    };
    let keys: Vec<&str> = entries.iter().map(|e| e.key.as_str()).collect();
    let wanted_project = |pk: &str, path: &str| match &scope.repo {
        None => true,
        Some(_) => entries
            .iter()
            .any(|e| e.meta.project_key == pk || e.meta.project.to_string_lossy() == path),
    };
    let orphans: Vec<_> = volumes
        .as_ref()
        .map(|v| {
            v.iter()
                .filter(|x| !keys.contains(&x.1.as_str()) && wanted_project(&x.2, &x.3))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    let kept: Vec<Kept> = docker
        .kept(root)
        .await
        .map(|k| {
            k.into_iter()
                .filter(|k| wanted_project(&k.project_key, &k.project))
                .collect()
        })
        .unwrap_or_default();
    // Another cache folder's, that folder deleted: shown whatever the scope, not this
    // folder's to clean but with `clean --deleted-folders`.
    let (gone_volumes, gone_kept) = docker.of_deleted_folders().await.unwrap_or_default();
    let rows: Vec<_> = entries
        .iter()
        .map(|e| {
            let volume = e.meta.volume.then(|| volume_name(&e.key));
            let size = dir_size(&e.dir) + volume.as_deref().and_then(vol_size).unwrap_or(0);
            (e, volume, size)
        })
        .collect();
    if scope.json {
        let v = json!({
            "cache_dir": root.dir(),
            "max_bytes": root.max_bytes(),
            "entries": rows.iter().map(|(e, volume, size)| json!({
                "key": e.key,
                "project_key": e.meta.project_key,
                "project": e.meta.project,
                "project_exists": e.project_exists,
                "toolchain": e.meta.kind,
                "slot": e.meta.slot,
                "size": size,
                "last_used": e.meta.last_used,
                "volume": volume,
                "dir": e.dir,
            })).collect::<Vec<_>>(),
            "orphan_volumes": orphans.iter().map(|o| json!({
                "name": o.0, "key": o.1, "project_key": o.2, "project": o.3, "size": o.4,
            })).collect::<Vec<_>>(),
            "kept_containers": kept.iter().map(|k| json!({
                "id": k.id, "name": k.name, "project_key": k.project_key, "project": k.project,
                "slot": k.slot, "status": k.status,
            })).collect::<Vec<_>>(),
            "volumes_of_deleted_cache_folders": gone_volumes.iter().map(|g| json!({
                "name": g.name, "cache_dir": g.root, "project": g.project, "size": g.size,
            })).collect::<Vec<_>>(),
            "containers_of_deleted_cache_folders": gone_kept.iter().map(|g| json!({
                "id": g.id, "name": g.name, "cache_dir": g.root, "project": g.project,
                "status": g.status,
            })).collect::<Vec<_>>(),
            "docker": volumes.as_ref().err(),
        });
        crate::cli::print_stdout(&format!("{v:#}\n"));
        return exit::SUCCESS;
    }
    let total: u64 = rows.iter().map(|r| r.2).sum();
    let (total, cap) = (human(total), human(root.max_bytes()));
    // With --repo the rows are one repository's, the cap the whole folder's.
    let sizes = if scope.repo.is_some() {
        format!("this repository's entries: {total}; the folder's cap: {cap}")
    } else {
        format!("{total} of {cap} cap")
    };
    let mut out = format!(
        "cache folder {} ({sizes})\n",
        esc(&root.dir().display().to_string())
    );
    if rows.is_empty() {
        out.push_str("no cache entries\n");
    }
    for (e, volume, size) in &rows {
        out.push_str(&format!(
            "{}  {}  {}  {}  {}{}{}\n",
            esc(&e.key),
            e.meta.kind,
            human(*size),
            ago(e.meta.last_used),
            esc(&e.meta.project.display().to_string()),
            if e.project_exists { "" } else { " (missing)" },
            volume
                .as_ref()
                .map(|v| format!("  volume {}", esc(v)))
                .unwrap_or_default(),
        ));
    }
    for o in &orphans {
        out.push_str(&format!(
            "volume {} without an entry ({}, {})\n",
            esc(&o.0),
            esc(&o.3),
            human(o.4)
        ));
    }
    for k in &kept {
        out.push_str(&format!(
            "container {} kept for {} (warm slot {}, {})\n",
            esc(&k.name),
            esc(&k.project),
            k.slot + 1,
            esc(&k.status)
        ));
    }
    for g in &gone_volumes {
        out.push_str(&format!(
            "volume {} of a deleted cache folder ({}, {})\n",
            esc(&g.name),
            esc(&g.root),
            human(g.size)
        ));
    }
    for g in &gone_kept {
        out.push_str(&format!(
            "container {} kept for a deleted cache folder ({}, {})\n",
            esc(&g.name),
            esc(&g.root),
            esc(&g.status)
        ));
    }
    if !gone_volumes.is_empty() || !gone_kept.is_empty() {
        out.push_str(
            "remove those of deleted cache folders with `nuvira cache clean --deleted-folders`\n",
        );
    }
    if let Err(e) = &volumes {
        out.push_str(&format!("docker volumes not listed: {}\n", esc(e)));
    }
    crate::cli::print_stdout(&out);
    exit::SUCCESS
}

/// `clean --deleted-folders`: the kept containers (first: they hold volumes), then the volumes,
/// of cache folders that no longer exist on this machine. Exit 3 when the engine does not
/// answer or a removal fails.
async fn clean_deleted_folders(scope: &Scope, docker: &Docker) -> u8 {
    let (volumes, kept) = match docker.of_deleted_folders().await {
        Ok(found) => found,
        Err(e) => {
            let message = format!(
                "list the Docker volumes of deleted cache folders: {e}; start the engine and run `nuvira cache clean --deleted-folders` again"
            );
            eprintln!("error: {}", esc(&message));
            if scope.json {
                crate::cli::print_stdout(&format!("{:#}\n", json!({ "docker": e })));
            }
            return exit::ENVIRONMENT;
        }
    };
    let ids: Vec<String> = kept.iter().map(|k| k.id.clone()).collect();
    let removed_containers = docker.remove_kept(&ids).await;
    let names: Vec<String> = volumes.iter().map(|v| v.name.clone()).collect();
    let removed_volumes = docker.remove(&names).await;
    if scope.json {
        let v = json!({
            "removed_containers": removed_containers
                .as_ref()
                .ok()
                .map(|()| kept.iter().map(|k| &k.name).collect::<Vec<_>>()),
            "removed_volumes": removed_volumes.as_ref().ok().map(|()| &names),
            "docker": removed_containers.as_ref().err().or(removed_volumes.as_ref().err()),
        });
        crate::cli::print_stdout(&format!("{v:#}\n"));
    } else {
        let mut out = String::new();
        match &removed_containers {
            Ok(()) => {
                for k in &kept {
                    out.push_str(&format!(
                        "removed container {} ({})\n",
                        esc(&k.name),
                        esc(&k.root)
                    ));
                }
            }
            Err(e) => out.push_str(&format!("kept containers not removed: {}\n", esc(e))),
        }
        match &removed_volumes {
            Ok(()) => {
                for v in &volumes {
                    out.push_str(&format!("removed volume {} ({})\n", esc(&v.name), esc(&v.root)));
                }
            }
            Err(e) => out.push_str(&format!(
                "docker volumes not removed: {}; a container may still use one (`docker ps -a --filter volume=NAME`)\n",
                esc(e)
            )),
        }
        if kept.is_empty() && volumes.is_empty() {
            out.push_str(
                "nothing to clean: no Docker volume or kept container of a deleted cache folder\n",
            );
        }
        crate::cli::print_stdout(&out);
    }
    if removed_containers.is_err() || removed_volumes.is_err() {
        exit::ENVIRONMENT
    } else {
        exit::SUCCESS
    }
}

async fn clean_entries(
    root: &CacheRoot,
    scope: &Scope,
    entries: &[EntryInfo],
    docker: &Docker,
) -> u8 {
    let removal = root.remove(entries);
    // The volumes of removed entries, and labelled volumes whose entry is gone, of the
    // projects in scope; never those of entries still in use.
    let volumes = docker.volumes(root).await;
    let in_scope = |pk: &str, path: &str| match &scope.repo {
        None => true,
        Some(_) => entries
            .iter()
            .any(|e| e.meta.project_key == pk || e.meta.project.to_string_lossy() == path),
    };
    let live: Vec<String> = root
        .list()
        .map(|l| l.into_iter().map(|e| e.key).collect())
        .unwrap_or_default();
    // Kept containers of the projects in scope whose slot is not in use (a run in one holds
    // its slot's workspace entry, which is then still listed): removed first, they hold volumes.
    let kept_doomed: Vec<Kept> = docker
        .kept(root)
        .await
        .map(|k| {
            k.into_iter()
                .filter(|k| in_scope(&k.project_key, &k.project))
                .filter(|k| {
                    let key = nuvira_sandbox::cache::entry_key(
                        &k.project_key,
                        nuvira_sandbox::cache::CacheKind::Workspace,
                        k.slot,
                    );
                    !live.contains(&key)
                })
                .collect()
        })
        .unwrap_or_default();
    let kept_ids: Vec<String> = kept_doomed.iter().map(|k| k.id.clone()).collect();
    let removed_containers = docker.remove_kept(&kept_ids).await;
    let doomed: Vec<String> = match &volumes {
        Ok(v) => v
            .iter()
            .filter(|x| !live.contains(&x.1) && in_scope(&x.2, &x.3))
            .map(|x| x.0.clone())
            .collect(),
        Err(_) => Vec::new(),
    };
    let removed_volumes = match volumes {
        Ok(_) => docker.remove(&doomed).await.map(|()| doomed.clone()),
        Err(e) => Err(e),
    };
    let mut code = exit::SUCCESS;
    if scope.json {
        let v = json!({
            "removed": removal.removed.iter().map(|e| json!({
                "key": e.key, "project": e.meta.project, "toolchain": e.meta.kind,
            })).collect::<Vec<_>>(),
            "in_use": removal.in_use,
            "failed": removal.failed.iter().map(|(k, why)| json!({ "key": k, "error": why })).collect::<Vec<_>>(),
            "removed_volumes": removed_volumes.as_ref().ok(),
            "removed_containers": removed_containers
                .as_ref()
                .ok()
                .map(|()| kept_doomed.iter().map(|k| &k.name).collect::<Vec<_>>()),
            "docker": removed_volumes.as_ref().err(),
        });
        crate::cli::print_stdout(&format!("{v:#}\n"));
    } else {
        let mut out = String::new();
        for e in &removal.removed {
            out.push_str(&format!(
                "removed {} ({})\n",
                esc(&e.key),
                esc(&e.meta.project.display().to_string())
            ));
        }
        for k in &removal.in_use {
            out.push_str(&format!(
                "left {}: a run is using it; run `nuvira cache clean` again when it is done\n",
                esc(k)
            ));
        }
        for (k, why) in &removal.failed {
            out.push_str(&format!(
                "could not remove {}: {}; check its permissions and run `nuvira cache clean` again\n",
                esc(k),
                esc(why)
            ));
        }
        match &removed_containers {
            Ok(()) => {
                for k in &kept_doomed {
                    out.push_str(&format!("removed container {}\n", esc(&k.name)));
                }
            }
            Err(e) => out.push_str(&format!("kept containers not removed: {}\n", esc(e))),
        }
        match &removed_volumes {
            Ok(v) => {
                for name in v {
                    out.push_str(&format!("removed volume {}\n", esc(name)));
                }
            }
            Err(e) => out.push_str(&format!("docker volumes not removed: {}\n", esc(e))),
        }
        if removal.removed.is_empty()
            && removal.in_use.is_empty()
            && removal.failed.is_empty()
            && doomed.is_empty()
            && kept_doomed.is_empty()
        {
            out.push_str("nothing to clean\n");
        }
        crate::cli::print_stdout(&out);
    }
    if !removal.in_use.is_empty() || !removal.failed.is_empty() {
        code = exit::ENVIRONMENT;
    }
    if let Err(e) = &removed_containers
        && !e.contains("no Docker engine")
        && !e.contains("no Docker support")
    {
        code = exit::ENVIRONMENT;
    }
    if let Err(e) = &removed_volumes
        && !e.contains("no Docker engine")
        && !e.contains("no Docker support")
    {
        code = exit::ENVIRONMENT;
    }
    code
}
