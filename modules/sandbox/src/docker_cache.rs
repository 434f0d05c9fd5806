//! The Docker side of [`crate::cache`]: labelled named volumes.
//!
//! Each toolchain entry a run uses is a named volume `nuvira-cache-<entry key>` (labels
//! [`VOLUME_LABEL`]`=1`, [`VOLUME_KEY_LABEL`], [`VOLUME_PROJECT_LABEL`], [`VOLUME_PATH_LABEL`])
//! mounted read-write at `/nuvira-cache/<kind>`, with the tools pointed at it by
//! [`env_for`]. The host side of the entry holds its lock, its metadata and nothing else.
//!
//! The workspace: **kept in a volume, uploaded as a delta**. The project's workspace entry owns
//! the volume `nuvira-cache-<project key>-workspace`, mounted at `/workspace`, and a manifest
//! of what it holds ([`crate::sync::Manifest`]). A run uploads only the entries that are new
//! or changed ([`crate::sync::plan_delta`]); nothing changed, nothing is uploaded. Docker's
//! archive upload replaces a file or link by another type in place, but cannot delete: when
//! the workspace lost an entry, the volume is made again and everything uploaded. The
//! manifest is removed before the upload and written back only after it succeeded. A second
//! run of the project at the same time gets the second warm slot (its own workspace volume
//! and cargo volume, [`crate::cache::WARM_SLOTS`]); a run beyond the slots uploads the whole
//! workspace into its own container, as without the cache.
//!
//! What the container writes into `/workspace` is undone before the next run with the
//! `nuvira-host` image (`docker_track`: created entries deleted, a changed upload
//! made again). With other images it stays in the volume for the next run (Nuvira overwrites
//! only what it uploads): a run can leave files, or change a file the workspace did not
//! change, for the next run to see. `--no-cache` (or `nuvira cache clean`) gives a clean
//! start; see `docs/sandbox.md`.

use crate::cache::{
    CONTAINER_CACHE_DIR, CacheKind, CacheRoot, RunCache, VOLUME_KEY_LABEL, VOLUME_LABEL,
    VOLUME_PATH_LABEL, VOLUME_PROJECT_LABEL, VOLUME_ROOT_LABEL, env_for, volume_name,
};
use bollard::Docker;
use bollard::models::{Mount as DockerMount, MountTypeEnum, VolumeCreateOptions};
use bollard::query_parameters::{ListVolumesOptions, RemoveVolumeOptions};
use nuvira_api::{SandboxError, SandboxRequest};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// The caches of one Docker run.
pub(crate) struct DockerCache {
    pub(crate) run: RunCache,
    pub(crate) mounts: Vec<DockerMount>,
    pub(crate) env: BTreeMap<String, String>,
    /// The volumes of the entries used, by entry key.
    pub(crate) volumes: BTreeMap<String, String>,
    /// The workspace volume and what to upload into it, when this run holds it.
    pub(crate) workspace: Option<WorkspaceVolume>,
}

/// The workspace volume of a run.
pub(crate) struct WorkspaceVolume {
    /// The entries to upload (workspace-relative, parents first).
    pub(crate) upload: Vec<PathBuf>,
    /// The entries new or changed since the volume's last upload (a subset of `upload`).
    pub(crate) changed: std::collections::BTreeSet<PathBuf>,
    /// The special files left out.
    pub(crate) special: Vec<String>,
    /// What [`crate::SandboxInfo::workspace_copy`] says.
    pub(crate) note: String,
    /// Whether the command runs under the wrapper that keeps the volume a mirror
    /// ([`crate::docker_track`]).
    pub(crate) track: bool,
    /// What the last run created, to delete before this run's command (uploaded as the
    /// wrapper's prune script).
    pub(crate) prune: Vec<PathBuf>,
    /// The volume when this run made it (nothing has been in it yet).
    pub(crate) new_volume: Option<NewVolume>,
    /// The volume when an earlier run made it and wrote into its folder on this machine.
    pub(crate) old_volume: Option<OldVolume>,
    manifest: crate::sync::Manifest,
    manifest_path: PathBuf,
    /// Entries the run changed or deleted, made to match nothing in the manifest
    /// [`Self::commit`] saves.
    repair: std::sync::Mutex<Vec<PathBuf>>,
    entry_dir: PathBuf,
}

/// A workspace volume just made: its name, its mount point as the engine tells it, and when.
#[derive(Debug, Clone)]
pub(crate) struct NewVolume {
    pub(crate) name: String,
    pub(crate) mountpoint: PathBuf,
    /// When it was asked for (its folder cannot be older).
    pub(crate) asked: std::time::SystemTime,
}

/// A workspace volume an earlier run made, whose folder that run wrote into on this machine:
/// its mount point as the engine tells it now, and the folder's identity as it was then
/// ([`FOLDER_FILE`] in the slot's entry folder).
#[derive(Debug, Clone)]
pub(crate) struct OldVolume {
    pub(crate) name: String,
    pub(crate) mountpoint: PathBuf,
    pub(crate) folder: FolderId,
}

/// A folder's device, inode and birth time (ns since the epoch; 0 where the file system does
/// not keep one): an inode number a removed folder had is soon another's, its birth time not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FolderId {
    dev: u64,
    ino: u64,
    born: i128,
}

impl FolderId {
    pub(crate) fn of(meta: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        let born = meta
            .created()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| i128::try_from(d.as_nanos()).unwrap_or(0));
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
            born,
        }
    }

    fn parse(text: &str) -> Option<Self> {
        let mut it = text.split_whitespace();
        let id = Self {
            dev: it.next()?.parse().ok()?,
            ino: it.next()?.parse().ok()?,
            born: it.next()?.parse().ok()?,
        };
        it.next().is_none().then_some(id)
    }
}

/// In a slot's entry folder: `DEV INO BIRTH-NS` of the workspace volume's folder on this
/// machine, written after a run wrote the new volume's files there (`docker::local_volume_dir`
/// found the folder the engine's and new), removed whenever the volume is made again.
pub(crate) const FOLDER_FILE: &str = "volume-folder";

/// The manifest of what the workspace volume holds, in the slot's entry folder: a file of its
/// own, never the local and bwrap copy's `manifest` (the same entry serves both, and each
/// records what its own copy holds: one trusted for the other would leave a changed file out).
pub(crate) const VOLUME_MANIFEST: &str = "volume-manifest";

impl WorkspaceVolume {
    /// Records the new volume's folder once this run wrote into it, so that the next runs of
    /// the slot may write their changes there too.
    pub(crate) fn record_folder(&self, folder: FolderId) {
        let path = self.entry_dir.join(FOLDER_FILE);
        let text = format!("{} {} {}\n", folder.dev, folder.ino, folder.born);
        if let Err(e) = std::fs::write(&path, text) {
            tracing::debug!("{}: {e}", path.display());
        }
    }

    /// Makes the next run make the volume again (it is not the mirror it should be).
    pub(crate) fn mark_dirty(&self) {
        let _ = std::fs::remove_file(self.entry_dir.join(FOLDER_FILE));
        let _ = std::fs::remove_file(&self.manifest_path);
        if let Err(e) = std::fs::write(self.entry_dir.join(crate::docker_track::DIRTY_FILE), b"") {
            tracing::warn!("mark the workspace volume to be made again: {e}");
        }
    }

    /// Records what the volume now holds (after a successful upload and run): the manifest of
    /// the upload, the entries the run changed or deleted ([`Self::record_after`]) made to match
    /// nothing, so that the next run uploads them again (or makes the volume again when the
    /// workspace lost them).
    pub(crate) fn commit(&self) {
        let repair = self.repair.lock().map(|f| f.clone()).unwrap_or_default();
        let saved = if repair.is_empty() {
            self.manifest.save(&self.manifest_path)
        } else {
            let mut manifest = self.manifest.clone();
            manifest.invalidate(&repair);
            manifest.save(&self.manifest_path)
        };
        if let Err(e) = saved {
            tracing::warn!("the next run will upload the whole workspace: {e}");
        }
    }

    /// Records, from the run's listings (`None`: missing, e.g. the run was killed), what the
    /// next run must undo ([`crate::docker_track::reconcile`]).
    /// Uploaded files the run changed or deleted are made to match nothing in the manifest this
    /// run commits, so that the next run uploads them again.
    pub(crate) fn record_after(&self, all: Option<&[u8]>, newer: Option<&[u8]>) {
        let mut after = crate::docker_track::reconcile(&self.manifest, all, newer);
        if !after.dirty && !after.repair.is_empty() {
            match self.repair.lock() {
                Ok(mut repair) => repair.clone_from(&after.repair),
                Err(_) => after.dirty = true,
            }
        }
        crate::docker_track::save(&self.entry_dir, &after);
    }
}

fn labels(run: &RunCache, entry_key: &str) -> HashMap<String, String> {
    HashMap::from([
        (VOLUME_LABEL.to_owned(), "1".to_owned()),
        (VOLUME_KEY_LABEL.to_owned(), entry_key.to_owned()),
        (
            VOLUME_PROJECT_LABEL.to_owned(),
            run.project_key().to_owned(),
        ),
        (
            VOLUME_PATH_LABEL.to_owned(),
            run.project().to_string_lossy().into_owned(),
        ),
        (
            VOLUME_ROOT_LABEL.to_owned(),
            run.root().dir().to_string_lossy().into_owned(),
        ),
    ])
}

/// Makes the volume `name` unless it is there; `true` when it was made.
async fn ensure_volume(
    docker: &Docker,
    name: &str,
    labels: HashMap<String, String>,
) -> Result<bool, SandboxError> {
    if volume_exists(docker, name).await? {
        return Ok(false);
    }
    create_volume(docker, name, labels).await?;
    Ok(true)
}

async fn volume_exists(docker: &Docker, name: &str) -> Result<bool, SandboxError> {
    volume_mountpoint(docker, name).await.map(|m| m.is_some())
}

/// The volume's mount point as the engine tells it; `None` when there is no such volume.
async fn volume_mountpoint(docker: &Docker, name: &str) -> Result<Option<String>, SandboxError> {
    match docker.inspect_volume(name).await {
        Ok(v) => Ok(Some(v.mountpoint)),
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => Ok(None),
        Err(e) => Err(SandboxError::Failed(format!(
            "inspect the cache volume {name}: {e}"
        ))),
    }
}

/// Makes the volume `name`; its mount point as the engine tells it.
async fn create_volume(
    docker: &Docker,
    name: &str,
    labels: HashMap<String, String>,
) -> Result<String, SandboxError> {
    docker
        .create_volume(VolumeCreateOptions {
            name: Some(name.to_owned()),
            labels: Some(labels),
            ..Default::default()
        })
        .await
        .map(|v| v.mountpoint)
        .map_err(|e| SandboxError::Failed(format!("create the cache volume {name}: {e}")))
}

/// Whether a run's workspace volume can be kept a mirror ([`crate::docker_track`]): the
/// `nuvira-host` image (this machine's `/bin/sh` and `find`), no mount of the request inside
/// `/workspace` (the listing would take a mount point for a created entry), and none at
/// `/dev/shm` or `/dev` (the wrapper's marks are written there: a host folder's files).
fn trackable(request: &SandboxRequest) -> bool {
    let image = request.image.as_deref().unwrap_or(crate::DEFAULT_IMAGE);
    crate::is_host_image(image)
        && !request.mounts.iter().any(|m| {
            let at = crate::docker_keep::container_path(&m.container);
            Path::new(&m.container).starts_with(crate::CONTAINER_WORKDIR)
                || at == Path::new("/dev/shm")
                || at == Path::new("/dev")
        })
}

/// Removes the workspace volume to make it again. A container that still holds it is a stopped
/// run's (removed in the background, or left by a process that died: the run holds the slot,
/// so no other run uses the volume): it is removed first.
async fn remove_workspace_volume(docker: &Docker, name: &str) -> Result<(), SandboxError> {
    let fail = |e: String| SandboxError::Failed(format!("remove the workspace volume {name}: {e}"));
    let mut last = match remove_volume(docker, name).await {
        Ok(()) => return Ok(()),
        Err(e) => e,
    };
    // A removal in progress (the last run's, in the background) holds it a little longer.
    for _ in 0..100 {
        let filters = HashMap::from([("volume".to_owned(), vec![name.to_owned()])]);
        let holders = docker
            .list_containers(Some(bollard::query_parameters::ListContainersOptions {
                all: true,
                filters: Some(filters),
                ..Default::default()
            }))
            .await
            .map_err(|e| fail(e.to_string()))?;
        for c in holders {
            if let Some(id) = c.id {
                let _ = docker
                    .remove_container(
                        &id,
                        Some(bollard::query_parameters::RemoveContainerOptions {
                            force: true,
                            v: true,
                            ..Default::default()
                        }),
                    )
                    .await;
            }
        }
        match remove_volume(docker, name).await {
            Ok(()) => return Ok(()),
            Err(e) => last = e,
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    Err(fail(last))
}

/// Removes a volume; a missing one is fine. A volume in use by kept containers
/// ([`crate::docker_keep`], idle: a run in one holds the volume's entry, and an entry in use is
/// never removed) is removed after them.
pub(crate) async fn remove_volume(docker: &Docker, name: &str) -> Result<(), String> {
    let remove = || docker.remove_volume(name, Some(RemoveVolumeOptions { force: true }));
    match remove().await {
        Ok(())
        | Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => Ok(()),
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 409, ..
        }) => {
            crate::docker_keep::remove_kept_holding(docker, name).await;
            match remove().await {
                Ok(())
                | Err(bollard::errors::Error::DockerResponseServerError {
                    status_code: 404, ..
                }) => Ok(()),
                Err(e) => Err(e.to_string()),
            }
        }
        Err(e) => Err(e.to_string()),
    }
}

fn volume_mount(name: &str, target: &str) -> DockerMount {
    DockerMount {
        target: Some(target.to_owned()),
        source: Some(name.to_owned()),
        typ: Some(MountTypeEnum::VOLUME),
        read_only: Some(false),
        ..Default::default()
    }
}

/// Opens the caches of a Docker run: `Ok(None)` when the request does not ask for them or the
/// cache folder cannot be used (a warning).
///
/// # Errors
/// [`SandboxError::Failed`] when a volume cannot be made or the workspace cannot be read.
pub(crate) async fn prepare(
    docker: &Docker,
    request: &SandboxRequest,
    root: Option<&CacheRoot>,
) -> Result<Option<DockerCache>, SandboxError> {
    if !request.cache {
        return Ok(None);
    }
    let req = request.clone();
    let root = root.cloned();
    let opened = tokio::task::spawn_blocking(move || {
        root.map_or_else(CacheRoot::from_env, Ok)
            .and_then(|root| RunCache::open(&root, &req))
    })
    .await
    .map_err(|e| SandboxError::Failed(format!("open the cache: {e}")))?;
    let run = match opened {
        Ok(run) => run,
        Err(e) => {
            tracing::warn!("warm caches unused: {e}");
            return Ok(None);
        }
    };
    let mut mounts = Vec::new();
    let mut env = BTreeMap::new();
    let mut volumes = BTreeMap::new();
    // One round trip for all the volumes, not one after the other; the workspace volume is
    // looked up, and the workspace listed, at the same time.
    let toolchains = futures::future::try_join_all(run.toolchains().iter().map(|lease| {
        let name = volume_name(lease.key());
        let labels = labels(&run, lease.key());
        async move { ensure_volume(docker, &name, labels).await }
    }));
    let ws_exists = async {
        match run.workspace() {
            Some(ws) => volume_mountpoint(docker, &volume_name(ws.key()))
                .await
                .map(Some),
            None => Ok(None),
        }
    };
    let listed = async {
        let Some(ws) = run.workspace() else {
            return Ok(None);
        };
        let old = crate::sync::Manifest::load(&ws.entry_dir().join(VOLUME_MANIFEST));
        let (src, include_ignored) = (request.workspace.clone(), request.include_ignored);
        tokio::task::spawn_blocking(move || {
            crate::sync::plan_delta(&src, crate::walk_options(include_ignored), &old)
        })
        .await
        .map_err(|e| SandboxError::Failed(format!("list the workspace: {e}")))?
        .map_err(|e| SandboxError::Failed(format!("list the workspace: {e}")))
        .map(Some)
    };
    let (made, ws_exists, listed) = tokio::join!(toolchains, ws_exists, listed);
    made?;
    let (ws_exists, listed) = (ws_exists?, listed?);
    for lease in run.toolchains() {
        let name = volume_name(lease.key());
        let _ = lease.mark_volume();
        let target = format!("{CONTAINER_CACHE_DIR}/{}", lease.kind());
        env.extend(env_for(lease.kind(), Path::new(&target)));
        mounts.push(volume_mount(&name, &target));
        volumes.insert(lease.key().to_owned(), name);
    }

    let mut workspace = None;
    // All three are there, or none: they come from the same `run.workspace()`.
    if let Some(((ws, delta), exists)) = run.workspace().zip(listed).zip(ws_exists) {
        let name = volume_name(ws.key());
        let manifest_path = ws.entry_dir().join(VOLUME_MANIFEST);
        // No manifest, no knowing what the volume holds (an upload that failed, an entry of
        // a Nuvira that kept one manifest for the volume and the local copy): made again.
        let unrecorded = !manifest_path.exists();
        // Not trusted again until this run's upload has succeeded.
        let _ = std::fs::remove_file(&manifest_path);
        let entry_dir = ws.entry_dir().to_path_buf();
        let track = trackable(request);
        // What the last run left: a prune list (it was tracked), or dirty (not undone by one).
        let dirty = entry_dir.join(crate::docker_track::DIRTY_FILE).exists();
        let last_prune = crate::docker_track::load_prune(&entry_dir);
        let repaired: usize =
            std::fs::read_to_string(entry_dir.join(crate::docker_track::REPAIR_FILE))
                .ok()
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or(0);
        let _ = std::fs::remove_file(entry_dir.join(crate::docker_track::REPAIR_FILE));
        let _ = std::fs::remove_file(entry_dir.join(crate::docker_track::DIRTY_FILE));
        let _ = std::fs::remove_file(entry_dir.join(crate::docker_track::PRUNE_FILE));
        // Made again when the workspace lost an entry (an upload cannot delete), when the last
        // run left what a prune cannot undo, and when this run and the last differ in being
        // tracked (an untracked run cannot prune; what an untracked run left is unknown).
        // Also when the workspace now has an entry the last run created, or one inside a folder
        // it created: the wrapper would delete it after the upload (made again rather than the
        // list trimmed: the folder's other entries are the run's, the prune must go whole).
        let pruned: std::collections::BTreeSet<&Path> =
            last_prune.iter().flatten().map(PathBuf::as_path).collect();
        let uploads_pruned = !pruned.is_empty()
            && delta
                .upload
                .iter()
                .any(|u| u.ancestors().any(|a| pruned.contains(a)));
        let remake = !delta.deleted.is_empty()
            || dirty
            || uploads_pruned
            || unrecorded
            || (last_prune.is_some() != track);
        // (A missing volume is made without a removal first: a new project's first run.)
        let mut made_at = None;
        let folder_file = entry_dir.join(FOLDER_FILE);
        let old_volume = exists.as_ref().filter(|_| !remake).and_then(|mountpoint| {
            let text = std::fs::read_to_string(&folder_file).ok()?;
            let folder = FolderId::parse(&text)?;
            Some(OldVolume {
                name: name.clone(),
                mountpoint: PathBuf::from(mountpoint),
                folder,
            })
        });
        let fresh = if exists.is_some() && !remake {
            false
        } else {
            let _ = std::fs::remove_file(&folder_file);
            if exists.is_some() {
                remove_workspace_volume(docker, &name).await?;
            }
            let asked = std::time::SystemTime::now();
            let mountpoint = create_volume(docker, &name, labels(&run, ws.key())).await?;
            made_at = Some((mountpoint, asked));
            true
        };
        let new_volume = made_at.map(|(mountpoint, asked)| NewVolume {
            name: name.clone(),
            mountpoint: PathBuf::from(mountpoint),
            asked,
        });
        let prune = if fresh {
            Vec::new()
        } else {
            last_prune.unwrap_or_default()
        };
        let _ = ws.mark_volume();
        let changed = delta.upload.iter().cloned().collect();
        let (upload, note) = if fresh {
            let n = delta.all.len();
            (
                delta.all,
                format!(
                    "uploaded: all {n} entries into a new workspace volume{}",
                    if !delta.deleted.is_empty() {
                        format!(" ({} deleted or changed type)", delta.deleted.len())
                    } else if dirty {
                        " (the last run changed or deleted uploaded files)".to_owned()
                    } else if uploads_pruned {
                        " (new files where the last run had created some)".to_owned()
                    } else if unrecorded && exists.is_some() {
                        " (no record of what the old one held)".to_owned()
                    } else {
                        String::new()
                    }
                ),
            )
        } else {
            let note = format!(
                "uploaded: {} changed, {} unchanged",
                delta.upload.len(),
                delta.unchanged
            );
            (delta.upload, note)
        };
        let note = format!(
            "{note}{}{}{}",
            if prune.is_empty() {
                String::new()
            } else {
                format!(", {} left by the last run removed", prune.len())
            },
            if fresh || repaired == 0 {
                String::new()
            } else {
                format!(", {repaired} the last run changed or deleted uploaded again")
            },
            crate::cache::slot_note(ws.slot())
        );
        mounts.push(volume_mount(&name, crate::CONTAINER_WORKDIR));
        volumes.insert(ws.key().to_owned(), name);
        workspace = Some(WorkspaceVolume {
            upload,
            changed,
            special: crate::special_names(&delta.special),
            note,
            track,
            prune,
            new_volume,
            old_volume,
            manifest: delta.manifest,
            manifest_path,
            repair: Default::default(),
            entry_dir,
        });
    }
    Ok(Some(DockerCache {
        run,
        mounts,
        env,
        volumes,
        workspace,
    }))
}

/// The sizes of the cache volumes, as the engine reports them (`docker system df`; empty
/// when the engine does not tell). The engine walks every volume it has to answer, so
/// `finish` asks only now and then.
pub async fn volume_sizes(docker: &Docker) -> BTreeMap<String, u64> {
    try_volume_sizes(docker).await.unwrap_or_default()
}

/// [`volume_sizes`], `None` when the engine did not answer (within 30 s) or refused.
async fn try_volume_sizes(docker: &Docker) -> Option<BTreeMap<String, u64>> {
    // The engine runs one disk-usage walk at a time and refuses a second meanwhile:
    // wait for it, up to 40 s (a walk over large volumes, or several runs measuring at once,
    // takes seconds; this runs after the result, so the wait delays no run).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(40);
    let mut pause = std::time::Duration::from_millis(50);
    let df = loop {
        // No `type` filter: bollard cannot encode its list (the call failed on every run),
        // and engines before API 1.42 ignore it anyway.
        let df = tokio::time::timeout(
            std::time::Duration::from_secs(30),
            docker.df(None::<bollard::query_parameters::DataUsageOptions>),
        )
        .await;
        match df {
            Ok(Ok(df)) => break df,
            // 409 on newer engines; Docker 20.10 answers 500 "a disk usage operation is
            // already running".
            Ok(Err(bollard::errors::Error::DockerResponseServerError {
                status_code,
                message,
            })) if (status_code == 409
                || (status_code == 500 && message.contains("already running")))
                && std::time::Instant::now() + pause < deadline =>
            {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(std::time::Duration::from_millis(500));
            }
            Ok(Err(e)) => {
                tracing::warn!("the cache volumes' sizes are unknown: `docker system df`: {e}");
                return None;
            }
            Err(_) => {
                tracing::warn!(
                    "the cache volumes' sizes are unknown: `docker system df` timed out"
                );
                return None;
            }
        }
    };
    Some(
        df.volumes
            .unwrap_or_default()
            .into_iter()
            .filter(|v| v.labels.contains_key(VOLUME_LABEL))
            .map(|v| {
                let size = v
                    .usage_data
                    .map_or(0, |u| u64::try_from(u.size).unwrap_or(0));
                (v.name, size)
            })
            .collect(),
    )
}

/// How long a volume's measured size is trusted before a run measures it again.
pub const MEASURE_EVERY: std::time::Duration = std::time::Duration::from_secs(600);

/// Whether the run's volumes are to be measured now: one of them was never measured (a new
/// volume: its first run is a cold build, beside which the walk is nothing) or not for
/// [`MEASURE_EVERY`], or the cache's recorded total is at least half the cap (eviction may
/// be near, so the sizes must be current).
fn measure_due(cache: &DockerCache) -> bool {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let leases = cache
        .run
        .toolchains()
        .iter()
        .chain(cache.run.workspace())
        .filter(|l| cache.volumes.contains_key(l.key()));
    let stale = leases.map(|l| l.meta()).any(|m| {
        m.is_none_or(|m| {
            m.measured == 0 || now.saturating_sub(m.measured) >= MEASURE_EVERY.as_secs()
        })
    });
    stale || {
        let root = cache.run.root();
        let total: u64 = root
            .list()
            .map(|l| l.iter().map(|e| e.meta.size).sum())
            .unwrap_or(u64::MAX);
        total >= root.max_bytes() / 2
    }
}

/// What a Docker run leaves to do once its result is out: measure its volumes (when
/// [due](measure_due)) and record their sizes.
pub(crate) struct Measure {
    root: CacheRoot,
    /// Volume names by entry key.
    volumes: BTreeMap<String, String>,
}

impl Measure {
    /// Measures the volumes (`docker system df`) and records their sizes; an engine that does
    /// not tell leaves the estimates (the next run tries again).
    pub(crate) async fn run(self, docker: &Docker) {
        if let Some(sizes) = try_volume_sizes(docker).await {
            let bytes: BTreeMap<String, u64> = self
                .volumes
                .iter()
                .filter_map(|(key, vol)| sizes.get(vol).map(|s| (key.clone(), *s)))
                .collect();
            let root = self.root;
            let _ = tokio::task::spawn_blocking(move || root.record_volume_sizes(&bytes)).await;
        }
    }
}

/// Ends a Docker run's use of the caches: records sizes (the volumes' last measurement),
/// releases the entries and evicts by the cap. Returns the volumes of evicted entries, for the
/// caller to remove once the run's container is gone (the engine refuses to remove a volume a
/// container still uses), and, when the volumes are [due](measure_due) to be measured, the
/// measurement: walking every volume of the engine takes long enough (100 ms and more) to be
/// done after the result is out when the caller can ([`Measure::run`]).
pub(crate) async fn finish(cache: DockerCache) -> (Vec<String>, Option<Measure>) {
    let measure = measure_due(&cache).then(|| Measure {
        root: cache.run.root().clone(),
        volumes: cache.volumes.clone(),
    });
    let run = cache.run;
    let removal = tokio::task::spawn_blocking(move || run.finish_with_volumes(None))
        .await
        .unwrap_or_default();
    let evicted = removal
        .removed
        .iter()
        .filter(|e| e.meta.volume)
        .map(|e| volume_name(&e.key))
        .collect();
    (evicted, measure)
}

/// Removes the volumes [`finish`] returned; a failure is a warning (`nuvira cache clean`
/// removes what is left).
pub(crate) async fn remove_evicted(docker: &Docker, names: &[String]) {
    for name in names {
        if let Err(e) = remove_volume(docker, name).await {
            tracing::warn!("failed to remove the evicted cache volume {name}: {e}");
        }
    }
}

/// A cache volume, as the engine lists it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CacheVolume {
    /// The volume's name.
    pub name: String,
    /// Its entry key ([`VOLUME_KEY_LABEL`]).
    pub key: String,
    /// Its project key ([`VOLUME_PROJECT_LABEL`]).
    pub project_key: String,
    /// Its project path ([`VOLUME_PATH_LABEL`]).
    pub project: String,
    /// The cache folder it belongs to ([`VOLUME_ROOT_LABEL`]; empty for a volume made before
    /// that label).
    pub root: String,
}

impl CacheVolume {
    /// Whether the volume belongs to the cache folder `root` (a volume without the label is
    /// taken to, as before the label existed).
    pub fn belongs_to(&self, root: &std::path::Path) -> bool {
        self.root.is_empty() || std::path::Path::new(&self.root) == root
    }
}

/// Every volume labelled [`VOLUME_LABEL`] that belongs to the cache folder `root`
/// ([`CacheVolume::belongs_to`]: another cache folder's volumes on the same engine, another
/// user's or another test's, are not its to list or clean).
///
/// # Errors
/// The engine's error as text.
pub async fn list_volumes(docker: &Docker, root: &Path) -> Result<Vec<CacheVolume>, String> {
    list_volumes_where(docker, |v| v.belongs_to(root)).await
}

/// Every volume labelled [`VOLUME_LABEL`] whose cache folder ([`VOLUME_ROOT_LABEL`], an
/// absolute path) no longer exists on this machine: left by a cache folder that was deleted
/// (a temporary one, a test's). A folder that cannot be looked at (permissions) is taken to
/// exist; a volume without the label is never one.
///
/// # Errors
/// The engine's error as text.
pub async fn list_orphaned_volumes(docker: &Docker) -> Result<Vec<CacheVolume>, String> {
    list_volumes_where(docker, |v| root_is_gone(&v.root)).await
}

/// Whether `root` (a volume's or kept container's [`VOLUME_ROOT_LABEL`]) names an absolute
/// folder that is not there.
pub(crate) fn root_is_gone(root: &str) -> bool {
    let path = Path::new(root);
    path.is_absolute()
        && std::fs::symlink_metadata(path).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
}

async fn list_volumes_where(
    docker: &Docker,
    keep: impl Fn(&CacheVolume) -> bool,
) -> Result<Vec<CacheVolume>, String> {
    let filters = HashMap::from([("label".to_owned(), vec![format!("{VOLUME_LABEL}=1")])]);
    let list = docker
        .list_volumes(Some(ListVolumesOptions {
            filters: Some(filters),
        }))
        .await
        .map_err(|e| e.to_string())?;
    let label = |v: &bollard::models::Volume, k: &str| v.labels.get(k).cloned().unwrap_or_default();
    let mut out: Vec<CacheVolume> = list
        .volumes
        .unwrap_or_default()
        .iter()
        .map(|v| CacheVolume {
            name: v.name.clone(),
            key: label(v, VOLUME_KEY_LABEL),
            project_key: label(v, VOLUME_PROJECT_LABEL),
            project: label(v, VOLUME_PATH_LABEL),
            root: label(v, VOLUME_ROOT_LABEL),
        })
        .filter(|v| keep(v))
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// Removes cache volumes by name.
///
/// # Errors
/// The first engine error, naming the volume.
pub async fn remove_volumes(docker: &Docker, names: &[String]) -> Result<(), String> {
    for name in names {
        remove_volume(docker, name)
            .await
            .map_err(|e| format!("remove the cache volume {name}: {e}"))?;
    }
    Ok(())
}

/// Whether the workspace kind's volume is the project's (for tests and tools).
pub fn workspace_volume(project_key: &str) -> String {
    volume_name(&format!("{project_key}-{}", CacheKind::Workspace))
}

/// Adds the cache volumes and environment to a container's body (the request's own variables
/// win; the workspace volume replaces the anonymous workdir volume of a read-only root).
pub(crate) fn apply(
    body: &mut bollard::models::ContainerCreateBody,
    cache: &DockerCache,
    request: &SandboxRequest,
) {
    let mut env: Vec<String> = cache
        .env
        .iter()
        .filter(|(k, _)| !request.env.contains_key(*k))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    env.extend(body.env.take().unwrap_or_default());
    body.env = Some(env);
    if cache.workspace.is_some() {
        body.volumes = None;
    }
    let host = body.host_config.get_or_insert_with(Default::default);
    host.mounts
        .get_or_insert_with(Vec::new)
        .extend(cache.mounts.iter().cloned());
}
