//! The Docker sandbox: one fresh, hardened, labelled container per run, removed in every case.
//!
//! A run creates a container from the image (default [`super::DEFAULT_IMAGE`]) with:
//! memory = memory + swap = the limit, `nano_cpus`, `pids_limit`, `network_mode` (`none` by
//! default), `cap_drop: [ALL]`, `security_opt: [no-new-privileges]`, optionally a read-only root
//! (then the workdir is an anonymous volume and `/tmp` a tmpfs), the request's read-only bind
//! mounts and environment, and the label `nuvira.sandbox=1`. The workspace is uploaded as a tar
//! streamed in chunks into `/workspace` (never bind-mounted, so nothing the tests write reaches
//! the host), output is streamed through an attach, and the container is waited for under the
//! timeout; at the timeout or on cancellation it gets `SIGKILL`. An out-of-memory kill is read from the engine's
//! `State.OOMKilled` and reported together with exit code 137.
//!
//! Clean-up: the container is named before it is created and a `RemovalGuard` is armed with
//! that name, so even a run whose future is dropped in the middle of the create call (the engine
//! cancelling a step, a panic) leaves no container: the guard's `Drop` spawns a forced removal
//! (with its anonymous volumes). [`DockerSandbox::wait_for_cleanup`] waits for such removals.
//! With [`DockerSandbox::with_background_removal`] (what [`crate::select`] gives the commands,
//! after [`crate::remove_containers_in_background`]),
//! a run that ended with a result returns it first and removes its container in a tracked
//! task; the commands wait for those removals ([`wait_for_removals`]) before they exit.
//!
//! With the `nuvira-host` image, the host's toolchain folders are added as read-only mounts (see
//! [`super::host_toolchain`]) unless the request mounts something at the same path.
//!
//! Collected files (the request's reports) come back through the engine's archive download, or,
//! from a kept container on an engine of this machine, read through its PID 1's root
//! (`/proc/PID/root/workspace/...`, checked to be the container's PID 1 through its `/proc`
//! handle; every folder without following a link, the file only once its path-only handle is a
//! regular file under the cap, without waiting on a lease). A path that meets a link on the way
//! is left to the engine, which resolves it inside the container.

use super::{
    CONTAINER_LABEL, CONTAINER_WORKDIR, DEFAULT_IMAGE, DOCKER_HINT, OnCreated, Tail,
    check_collect_path, check_dir, host_toolchain, is_host_image,
};
use bollard::Docker;
use bollard::container::LogOutput;
use bollard::models::{ContainerCreateBody, HostConfig, Mount as DockerMount, MountTypeEnum};
use bollard::query_parameters::{
    AttachContainerOptions, CreateContainerOptions, DownloadFromContainerOptions,
    KillContainerOptions, RemoveContainerOptions, UploadToContainerOptions, WaitContainerOptions,
};
use futures::StreamExt;
use nuvira_api::{
    CancelSignal, NetworkMode, Sandbox, SandboxError, SandboxInfo, SandboxOutcome, SandboxRequest,
    async_trait,
};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio_util::task::TaskTracker;

/// How long connecting to the engine may take before it counts as not answering.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs commands in Docker containers through any engine bollard reaches (`DOCKER_HOST`).
#[derive(Debug, Clone)]
pub struct DockerSandbox {
    docker: Docker,
    cleanup: TaskTracker,
    engine: crate::remote::EngineConfig,
    cache_root: Option<crate::cache::CacheRoot>,
    background_removal: bool,
    reuse: bool,
    reuse_idle: Option<Duration>,
    direct_write: bool,
    direct_read: bool,
    /// The engine's CPU count: a remote engine's `/info` `NCPU`, asked once with the first
    /// run's other requests, else this machine's. A run asks for at most that many (the
    /// engine refuses more; the default, this machine's cores, may be more than a remote
    /// engine has).
    engine_cpus: std::sync::Arc<tokio::sync::OnceCell<Option<f64>>>,
}

impl DockerSandbox {
    /// Connects to the engine (`DOCKER_HOST`, else the local socket) and agrees on an API
    /// version; returns the sandbox and the engine's version.
    ///
    /// # Errors
    /// [`SandboxError::Unavailable`] when no engine answers, with a message saying how to start
    /// one.
    pub async fn connect() -> Result<(Self, String), SandboxError> {
        Self::connect_to(&crate::remote::EngineConfig::from_env()).await
    }

    /// Connects to the engine `engine` names (a local socket, `tcp://` with TLS, `ssh://`; see
    /// [`crate::remote`]) and agrees on an API version; returns the sandbox and the engine's
    /// version.
    ///
    /// # Errors
    /// [`SandboxError::Unavailable`] when no engine answers there, naming the address, and for
    /// TLS `DOCKER_CERT_PATH` and what its files must be.
    pub async fn connect_to(
        engine: &crate::remote::EngineConfig,
    ) -> Result<(Self, String), SandboxError> {
        let where_ = engine.describe();
        let hint = engine.cert_hint();
        let unavailable = |e: String| {
            let e = nuvira_api::text::escape_control(&e).into_owned();
            SandboxError::Unavailable(if hint.is_empty() {
                format!("no Docker engine answers at {where_} ({e}): {DOCKER_HINT}")
            } else {
                format!("no Docker engine answers at {where_} ({e}): {hint}")
            })
        };
        let docker = engine.client()?;
        // The negotiation and the version shown are both the engine's `/version`, which on
        // Docker 20.10 runs `runc --version` and asks containerd (~12 ms here): asked at the
        // same time, except over ssh, where a second request at once is a second ssh
        // connection.
        let negotiated = within_connect_timeout(docker.clone().negotiate_version(), &unavailable);
        let asked = within_connect_timeout(docker.version(), &unavailable);
        let (docker, version) = if engine.host.starts_with("ssh://") {
            let docker = negotiated.await?;
            (docker, asked.await?)
        } else {
            let (docker, version) = tokio::join!(negotiated, asked);
            (docker?, version?)
        };
        Ok((
            Self {
                docker,
                cleanup: TaskTracker::new(),
                engine: engine.clone(),
                cache_root: None,
                background_removal: false,
                reuse: true,
                reuse_idle: None,
                direct_write: true,
                direct_read: true,
                engine_cpus: Default::default(),
            },
            version
                .version
                .unwrap_or_else(|| "(unknown version)".into()),
        ))
    }

    /// [`connect`](Self::connect), then checks that `image` exists on the engine.
    ///
    /// # Errors
    /// [`SandboxError::Unavailable`] when no engine answers or the image is missing.
    pub async fn connect_checked(image: &str) -> Result<(Self, String), SandboxError> {
        let (sandbox, version) = Self::connect().await?;
        sandbox.check_image(image).await?;
        Ok((sandbox, version))
    }

    /// The engine this sandbox talks to.
    pub fn engine(&self) -> &crate::remote::EngineConfig {
        &self.engine
    }

    /// Checks that `image` exists on the engine.
    ///
    /// # Errors
    /// [`SandboxError::Unavailable`] naming the image and how to get it.
    pub async fn check_image(&self, image: &str) -> Result<(), SandboxError> {
        match self.docker.inspect_image(image).await {
            Ok(_) => Ok(()),
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => Err(SandboxError::Unavailable(format!(
                "image {image} is not on the Docker engine: build the local images with `sudo scripts/docker-up.sh` from Nuvira's source tree, pull it with `docker pull {image}`, or pass another with --image"
            ))),
            Err(e) => Err(SandboxError::Unavailable(format!(
                "inspect image {image}: {e}"
            ))),
        }
    }

    /// Keeps the warm caches' host side (locks, metadata, manifests) of requests that ask for
    /// them under `root` instead of
    /// [`CacheRoot::from_env`](crate::cache::CacheRoot::from_env); the volumes are the
    /// engine's.
    pub fn with_cache_root(mut self, root: crate::cache::CacheRoot) -> Self {
        self.cache_root = Some(root);
        self
    }

    /// Removes the container of a run that ended with a result in the background, after the
    /// result is returned, instead of before (a removal is a round trip of 50–150 ms, paid by
    /// every run). The removal is tracked: [`wait_for_cleanup`](Self::wait_for_cleanup) and
    /// [`wait_for_removals`] wait for it, and a process must call one of them before it exits
    /// (or the container is left behind, stopped). A run that fails or is cancelled still
    /// removes its container before it returns.
    pub fn with_background_removal(mut self) -> Self {
        self.background_removal = true;
        self
    }

    /// Whether a warm run may reuse its slot's kept container (default `true`; `false`: every
    /// run gets a fresh container). `NUVIRA_DOCKER_REUSE` set to an on or off word overrides
    /// it; see [`crate::docker_keep`].
    pub fn with_reuse(mut self, reuse: bool) -> Self {
        self.reuse = reuse;
        self
    }

    /// How long a kept container waits for its slot's next run before it exits (default
    /// `NUVIRA_DOCKER_REUSE_IDLE` seconds, else 10 minutes).
    pub fn with_reuse_idle(mut self, idle: Duration) -> Self {
        self.reuse_idle = Some(idle);
        self
    }

    /// Whether the workspace may be written straight into the folder of a workspace volume
    /// the run just made, when the engine is on this machine (default `true`; `false`: always
    /// the engine's archive upload). The files are the same either way.
    pub fn with_direct_write(mut self, direct: bool) -> Self {
        self.direct_write = direct;
        self
    }

    /// Whether a kept container's collected files (reports) and long listings may be read on
    /// this machine through its PID 1's root (default `true`; `false`: always the engine's
    /// archive download). The bytes are the same either way; `sandbox.collected_from` says
    /// which was used.
    pub fn with_direct_read(mut self, direct: bool) -> Self {
        self.direct_read = direct;
        self
    }

    /// The engine client, for callers that need more than runs (tests, tools).
    pub fn client(&self) -> &Docker {
        &self.docker
    }

    /// Waits until every container removal started by a dropped run has finished.
    pub async fn wait_for_cleanup(&self) {
        self.cleanup.close();
        self.cleanup.wait().await;
        self.cleanup.reopen();
    }
}

/// Every removal a dropped run started, of any [`DockerSandbox`] of this process.
static REMOVALS: std::sync::LazyLock<TaskTracker> = std::sync::LazyLock::new(TaskTracker::new);

/// Waits until every container removal that dropped runs of this process started has finished
/// (at most `limit`); `false` when some were still going. A command that cancels steps (Ctrl-C,
/// SIGTERM) calls it before it exits, since a process that exits first leaves the container
/// behind.
pub async fn wait_for_removals(limit: std::time::Duration) -> bool {
    REMOVALS.close();
    let done = tokio::time::timeout(limit, REMOVALS.wait()).await.is_ok();
    REMOVALS.reopen();
    done
}

impl DockerSandbox {
    /// Runs a request, calling `on_created` with the container id once the container exists.
    ///
    /// # Errors
    /// [`SandboxError::Unavailable`] when the engine stops answering or the image is missing,
    /// [`SandboxError::Failed`] when the engine refuses the container (e.g. a mount's host path
    /// is missing), [`SandboxError::Cancelled`] when `cancel` fires (the container is killed and
    /// removed first).
    pub async fn run_observed(
        &self,
        request: &SandboxRequest,
        cancel: &dyn CancelSignal,
        on_created: OnCreated<'_>,
    ) -> Result<SandboxOutcome, SandboxError> {
        let started = Instant::now();
        if request.command.is_empty() {
            return Err(SandboxError::Failed("run an empty command".into()));
        }
        if cancel.is_cancelled() {
            return Err(SandboxError::Cancelled);
        }
        let image = request.image.as_deref().unwrap_or(DEFAULT_IMAGE).to_owned();
        let collect: Vec<_> = request
            .collect
            .iter()
            .map(|p| check_collect_path(p).map(|rel| (p.clone(), rel)))
            .collect::<Result<_, _>>()?;

        // The file list is made up front (a bad workspace fails before any container exists);
        // the tar itself is streamed to the engine during the upload.
        let (workspace, include_ignored) = (request.workspace.clone(), request.include_ignored);
        if request.cache {
            // This process's cleanup of the project's kept containers, if one is still going,
            // ends first: its slot is this run's warm one.
            crate::docker_keep::wait_for_pending(&request.workspace).await;
        }
        // The image's id and user, for a kept container's config (looked up while the cache
        // is prepared, not after it).
        let reuse_wanted = request.cache && crate::docker_keep::reuse_enabled(self.reuse);
        let (cache, mut image_info, engine_cpus) = tokio::join!(
            crate::docker_cache::prepare(&self.docker, request, self.cache_root.as_ref()),
            async {
                if reuse_wanted {
                    Some(self.docker.inspect_image(&image).await)
                } else {
                    None
                }
            },
            self.engine_cpus.get_or_init(|| async {
                // An engine on this machine's socket has this machine's cores: not asked (the
                // `/info` request is ~10 ms on Docker 20.10, more than the rest of this step).
                if self.engine.host.starts_with("unix://") {
                    return std::thread::available_parallelism()
                        .ok()
                        .map(|n| n.get() as f64);
                }
                self.docker
                    .info()
                    .await
                    .ok()
                    .and_then(|i| i.ncpu)
                    .filter(|&n| n > 0)
                    .map(|n| n as f64)
            })
        );
        // No more CPUs than the engine has (CPUs only slow a run; the limits line says what
        // the run got).
        let clamped;
        let request = match *engine_cpus {
            Some(n) if request.limits.cpus > n => {
                let mut r = request.clone();
                r.limits.cpus = n;
                clamped = r;
                &clamped
            }
            _ => request,
        };
        let mut cache = cache?;
        phase(started, "cache prepared");
        let mut newer = None;
        let mut extra = Vec::new();
        if let Some(ws) = cache.as_ref().and_then(|c| c.workspace.as_ref())
            && ws.track
        {
            // What the last run created, deleted by the wrapper before the command. Always
            // uploaded (empty when nothing is to go), before the container starts: the file the
            // wrapper sources is ours, never one a run left in the volume.
            extra.push((
                Path::new(crate::docker_track::STATE_DIR).join("prune"),
                crate::docker_track::prune_script(&ws.prune),
            ));
        }
        let (entries, special) = match cache.as_ref().and_then(|c| c.workspace.as_ref()) {
            // The workspace volume: only what changed is uploaded, each changed file with an
            // mtime past every earlier build's start (see `WorkspaceTar::newer`).
            Some(ws) => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                newer = Some((now + 1, ws.changed.clone()));
                (ws.upload.clone(), ws.special.clone())
            }
            None => tokio::task::spawn_blocking(move || {
                crate::workspace_entries_noting_special(&workspace, include_ignored)
            })
            .await
            .map_err(|e| SandboxError::Failed(format!("list the workspace: {e}")))??,
        };
        let mut tar = WorkspaceTar {
            root: request.workspace.clone(),
            entries,
            newer,
            extra,
        };

        let mut body = self.container_body(request, &image)?;
        let name = container_name();
        // The loader's variables, given to a tracked run's command alone.
        let mut command_env = Vec::new();
        let tracked = cache
            .as_ref()
            .and_then(|c| c.workspace.as_ref())
            .is_some_and(|ws| ws.track);
        if let Some(cache) = &cache {
            crate::docker_cache::apply(&mut body, cache, request);
            if tracked {
                command_env = crate::docker_track::take_command_env(&mut body.env);
                body.cmd = Some(crate::docker_track::wrap(
                    &request.command,
                    crate::walk_options(request.include_ignored).skip_build_dirs,
                    &name,
                    &command_env,
                ));
            }
        }
        // The wrapper's listings, taken off the end of standard error.
        let trailer = std::sync::Mutex::new(None);
        let track_nonce = name.clone();
        let track = tracked.then_some((track_nonce.as_str(), &trailer));
        // A mount in `/tmp` or `/dev/shm`, which a kept container empties between runs: this
        // run's container is not kept (the cleanup would reach into the mount).
        let scratch_mount = crate::docker_keep::mount_in_scratch(
            body.host_config
                .as_ref()
                .and_then(|h| h.mounts.as_ref())
                .into_iter()
                .flatten()
                .filter_map(|m| m.target.as_deref()),
        )
        .map(str::to_owned);
        // A warm slot's kept container (crate::docker_keep): reused when it matches, else
        // created here from this run's config with a keeper as PID 1; the command is an exec.
        let keep = match &cache {
            Some(c)
                if tracked
                    && scratch_mount.is_none()
                    && crate::docker_keep::reuse_enabled(self.reuse) =>
            {
                c.run
                    .workspace()
                    .filter(|_| c.workspace.is_some())
                    .map(|lease| {
                        (
                            lease.entry_dir().to_path_buf(),
                            crate::docker_keep::slot_labels(&c.run, lease.slot()),
                        )
                    })
            }
            _ => None,
        };
        let mut kept: Option<Kept> = None;
        // The wrapper's nonce stays `name`; a new kept container gets a name of its own.
        let nonce = name.clone();
        let mut name = name;
        if let Some((entry_dir, labels)) = keep {
            // The wrapper with the cleanup at its end, and the prune script inline when it can
            // be, not uploaded: with nothing changed, no upload at all (each is a mount of the
            // container by the engine).
            let skip = crate::walk_options(request.include_ignored).skip_build_dirs;
            let mut inline_prune = None;
            if let Some(i) = tar.extra.iter().position(|(p, _)| {
                p.ends_with(Path::new(crate::docker_track::STATE_DIR).join("prune"))
            }) && let Ok(inline) = std::str::from_utf8(&tar.extra[i].1)
                && inline.len() <= crate::docker_track::INLINE_PRUNE_CAP
            {
                inline_prune = Some(inline.to_owned());
                tar.extra.remove(i);
            }
            // A new container's wrapper also reads the baseline state, before the command.
            let wrapper = |baseline: bool| {
                crate::docker_track::wrap_kept(
                    &request.command,
                    skip,
                    &nonce,
                    inline_prune.as_deref(),
                    baseline,
                    &command_env,
                )
            };
            let cmd = wrapper(false);
            let idle = self.reuse_idle.unwrap_or_else(crate::docker_keep::idle);
            let inspected = match image_info.take() {
                Some(info) => info,
                None => self.docker.inspect_image(&image).await,
            }
            .map_err(|e| self.engine_error(&format!("inspect image {image}"), e))?;
            let image_id = inspected.id.unwrap_or_default();
            // The user a fresh container's command runs as (the create body's, else the
            // image's, else root): the execs' user; PID 1 runs as another.
            let run_user = body
                .user
                .clone()
                .filter(|u| !u.is_empty())
                .or_else(|| {
                    inspected
                        .config
                        .and_then(|c| c.user)
                        .filter(|u| !u.is_empty())
                })
                .unwrap_or_else(|| "0:0".to_owned());
            let mut exec = Exec {
                cmd,
                workdir: body.working_dir.clone(),
                report: Default::default(),
                who: crate::docker_keep::Who::new(&run_user),
                baseline: false,
            };
            let hash = crate::docker_keep::config_hash(&body, &image_id, idle);
            let old = crate::docker_keep::take_state(&entry_dir);
            let mut reusable = None;
            if let Some(old) = old {
                let young = crate::docker_keep::now_secs()
                    .saturating_sub(old.used)
                    .saturating_add(crate::docker_keep::IDLE_MARGIN.min(idle / 4).as_secs())
                    < idle.as_secs();
                let running = old.config == hash
                    && young
                    && self
                        .docker
                        .inspect_container(
                            &old.id,
                            None::<bollard::query_parameters::InspectContainerOptions>,
                        )
                        .await
                        .ok()
                        .is_some_and(|c| {
                            c.state.and_then(|s| s.running) == Some(true)
                                && c.config
                                    .and_then(|c| c.labels)
                                    .and_then(|l| {
                                        l.get(crate::docker_keep::KEEP_CONFIG_LABEL).cloned()
                                    })
                                    .as_deref()
                                    == Some(hash.as_str())
                        });
                if running {
                    reusable = Some(old);
                } else {
                    let docker = self.docker.clone();
                    let id = old.id;
                    self.cleanup
                        .spawn(REMOVALS.track_future(async move { remove(&docker, &id).await }));
                }
            }
            match reusable {
                Some(state) => {
                    exec.who.host_pid = state.pid;
                    kept = Some(Kept {
                        state,
                        entry_dir,
                        reused: true,
                        exec,
                    });
                }
                None => {
                    name = keep_name();
                    exec.cmd = wrapper(true);
                    exec.baseline = true;
                    body = crate::docker_keep::kept_body(body, &hash, &labels, idle, &run_user);
                    kept = Some(Kept {
                        state: crate::docker_keep::KeptState {
                            id: String::new(),
                            config: hash,
                            baseline: Vec::new(),
                            oom: 0,
                            pids: 0,
                            state: String::new(),
                            pid: None,
                            upper: None,
                            used: 0,
                        },
                        entry_dir,
                        reused: false,
                        exec,
                    });
                }
            }
        }
        let reused_id = kept
            .as_ref()
            .filter(|k| k.reused)
            .map(|k| k.state.id.clone());
        let mut written_here = false;
        // The create call runs in its own task, so that it completes even when this future is
        // dropped; the guard's removal waits for it (a removal sent while the engine is still
        // creating would find nothing and leave the container behind).
        let (created_tx, created_rx) = tokio::sync::oneshot::channel::<()>();
        let mut guard;
        let id = if let Some(id) = reused_id {
            // A run dropped half-way leaves a container nobody cleaned: its guard removes it.
            drop(created_tx);
            guard = RemovalGuard {
                docker: self.docker.clone(),
                tracker: self.cleanup.clone(),
                name: Some(id.clone()),
                created: None,
            };
            // What changed, written straight into the volume's folder when an earlier run of
            // the slot wrote there (the archive upload into a running container is the
            // engine's mount of its volumes and an unpacking process of its own, ~50 ms): only
            // the run's keeper is in the container now, the slot is this run's, and the last
            // run's listings said the volume holds what was uploaded, so nothing moves while
            // this writes. A link or a file on the way of any entry and the upload does it.
            if self.direct_write
                && !tar.entries.is_empty()
                && tar.extra.is_empty()
                && let Some(old) = cache
                    .as_ref()
                    .and_then(|c| c.workspace.as_ref())
                    .and_then(|ws| ws.old_volume.clone())
            {
                let (back_tar, back_cache, wrote) = self
                    .write_into_volume(VolumeFolder::Old(old), tar, cache.take(), cancel)
                    .await?;
                (tar, cache) = (back_tar, back_cache);
                phase(started, "changes written into the volume");
                written_here = wrote.is_some();
            }
            id
        } else {
            let create = {
                let docker = self.docker.clone();
                let name = name.clone();
                self.cleanup.spawn(async move {
                    let r = docker
                        .create_container(
                            Some(CreateContainerOptions {
                                name: Some(name),
                                ..Default::default()
                            }),
                            body,
                        )
                        .await;
                    let _ = created_tx.send(());
                    r
                })
            };
            guard = RemovalGuard {
                docker: self.docker.clone(),
                tracker: self.cleanup.clone(),
                name: Some(name.clone()),
                created: Some(created_rx),
            };
            let mut create = create;
            let created = tokio::select! {
                r = &mut create => r
                    .map_err(|e| SandboxError::Failed(format!("create a container from {image}: {e}")))?
                    .map_err(|e| self.engine_error(&format!("create a container from {image}"), e))?,
                () = cancel.cancelled() => {
                    if let Ok(Ok(c)) = create.await {
                        remove(&self.docker, &c.id).await;
                    }
                    guard.disarm();
                    return Err(SandboxError::Cancelled);
                }
            };
            phase(started, "container created");
            // A volume this run just made, of an engine on this machine: the workspace is
            // written straight into its folder (the archive upload is a mount of the container
            // by the engine, ~50-90 ms), with the same entries, modes, owners and mtimes. After
            // the create, so that the engine's copy of the image's `/workspace` into an empty
            // volume has happened (the folder is then not empty, and the upload does it).
            // Anything off (another engine, users remapped, not empty) and the upload does it.
            if tracked
                && self.direct_write
                && !(tar.entries.is_empty() && tar.extra.is_empty())
                && let Some(new) = cache
                    .as_ref()
                    .and_then(|c| c.workspace.as_ref())
                    .and_then(|ws| ws.new_volume.clone())
            {
                let within = check_dir(&request.dir)?;
                let (back_tar, back_cache, wrote) = self
                    .write_into_volume(VolumeFolder::New(new, within), tar, cache.take(), cancel)
                    .await?;
                (tar, cache) = (back_tar, back_cache);
                phase(started, "workspace written into the volume");
                if let Some(folder) = wrote {
                    written_here = true;
                    if let Some(ws) = cache.as_ref().and_then(|c| c.workspace.as_ref()) {
                        ws.record_folder(folder);
                    }
                }
            }
            if let Some(k) = kept.as_mut() {
                // The keeper starts now; the changes it has at once are the baseline a clean
                // run must leave.
                self.docker
                    .start_container(
                        &created.id,
                        None::<bollard::query_parameters::StartContainerOptions>,
                    )
                    .await
                    .map_err(|e| self.engine_error("start the container", e))?;
                phase(started, "kept container started");
                k.state.id.clone_from(&created.id);
                // PID 1's pid on this machine (for the host's look at what a run left) and the
                // overlay upper folder (read instead of the engine's changes list when the
                // engine is this machine's), asked at the same time as the changes list.
                let (baseline, inspected) = tokio::join!(
                    crate::docker_keep::changes(&self.docker, &created.id),
                    self.docker.inspect_container(
                        &created.id,
                        None::<bollard::query_parameters::InspectContainerOptions>,
                    )
                );
                k.state.baseline = baseline.ok_or_else(|| {
                    SandboxError::Failed(
                        "list the new container's changes: the engine did not answer".into(),
                    )
                })?;
                let inspected = inspected.ok();
                k.state.pid = inspected
                    .as_ref()
                    .and_then(|c| c.state.as_ref()?.pid)
                    .and_then(|p| u32::try_from(p).ok())
                    .filter(|&p| p > 0);
                k.exec.who.host_pid = k.state.pid;
                // The overlay upper folder's baseline, read here before any exec. (The state
                // outside the file system is read by the first run's wrapper before anything of
                // the run exists, first on its standard error: no exec of its own.)
                if let Some(pid) = k.state.pid
                    && crate::docker_keep::is_local(pid, &created.id)
                    && let Some(upper) = crate::docker_keep::upper_dir(
                        inspected.as_ref().and_then(|c| c.graph_driver.as_ref()),
                    )
                {
                    let (dir, changes) = (upper.clone(), k.state.baseline.clone());
                    k.state.upper = tokio::task::spawn_blocking(move || {
                        crate::docker_keep::upper_matches(&dir, &changes)
                            .then(|| crate::docker_keep::upper_listing(&dir))
                            .flatten()
                    })
                    .await
                    .ok()
                    .flatten()
                    .map(|listing| (upper, listing));
                }
                phase(started, "kept container's baseline read");
            }
            created.id
        };
        let mut info = SandboxInfo::default();
        info.kind = "docker".into();
        info.image = Some(image.clone());
        info.container_id = Some(id.clone());
        info.skipped_special_files = special;
        if let Some(cache) = &cache {
            info.cache_key = Some(cache.run.project_key().to_owned());
            info.workspace_copy = Some(cache.workspace.as_ref().map_or_else(
                || format!("uploaded: all, into the container (the {} workspace volumes are in use by other runs)", crate::cache::WARM_SLOTS),
                |ws| {
                    if written_here {
                        format!("{} (written into the volume's folder on this machine)", ws.note)
                    } else {
                        ws.note.clone()
                    }
                },
            ));
        }
        on_created(&info);

        // Cancellation is honoured in every phase (upload, start, wait, collect).
        let exec = kept.as_ref().map(|k| k.exec.clone());
        let mut result = tokio::select! {
            r = self.drive(&id, request, tar, cancel, &collect, &info, started, track, exec) => r,
            () = cancel.cancelled() => Err(SandboxError::Cancelled),
        };
        if let Some(at) = &scratch_mount
            && tracked
            && crate::docker_keep::reuse_enabled(self.reuse)
            && let Ok(outcome) = result.as_mut()
            && let Some(limits) = outcome.info.limits.as_mut()
        {
            limits.push_str(&format!(
                "; container not kept for the next run: the mount at {} is in /tmp or /dev/shm, which a kept container empties between runs",
                nuvira_api::text::escape_control(at)
            ));
        }
        if matches!(result, Err(SandboxError::Cancelled)) {
            let _ = self
                .docker
                .kill_container(
                    &id,
                    Some(KillContainerOptions {
                        signal: "SIGKILL".into(),
                    }),
                )
                .await;
        }
        // A kept container is cleaned now, and kept only when the cleanup passed and its file
        // system is as it was (see crate::docker_keep); the out-of-memory kill of an exec'd
        // process is read from the cleanup.
        // A command that exited 0 was not killed by a limit (as for a fresh container, no
        // out-of-memory check is due): its container is cleaned after the result is out, while
        // the run still holds its slot, when the process waits for background work.
        let deferred = match (&cache, &kept, &result) {
            (Some(c), Some(_), Ok(o))
                if self.background_removal && o.exit_code == Some(0) && !o.timed_out =>
            {
                crate::docker_keep::pending(c.run.project())
            }
            _ => None,
        };
        let mut keep_it = false;
        if deferred.is_none()
            && let Some(k) = kept.as_mut()
            && let Ok(outcome) = result.as_mut()
        {
            keep_it = self.settle(k, outcome).await;
        }
        if let Some(k) = kept.as_mut().filter(|_| keep_it) {
            k.state.used = crate::docker_keep::now_secs();
            crate::docker_keep::save_state(&k.entry_dir, &k.state);
        }
        if let Some(ws) = cache.as_ref().and_then(|c| c.workspace.as_ref())
            && ws.track
        {
            // What the command changed in the volume, from the stopped container (missing
            // when it was killed at its timeout, or the run failed: the volume is made again).
            let finished = result.as_ref().is_ok_and(|o| !o.timed_out);
            // In a kept container the listings are the run's word too unless the wrapper's
            // report is trusted and says every other process was gone before it listed.
            let finished = finished
                && kept.as_ref().is_none_or(|k| {
                    k.exec
                        .report
                        .lock()
                        .ok()
                        .is_some_and(|r| r.as_ref().is_some_and(|r| r.killed))
                });
            let listed = trailer
                .lock()
                .ok()
                .and_then(|mut t| t.take())
                .filter(|_| finished)
                .and_then(|t| crate::docker_track::parse_trailer(&t, &nonce));
            let (all, newer) = match listed {
                Some((newer, all)) => {
                    use crate::docker_track::Listing;
                    // A list too long for the trailer is read from the stopped container.
                    // A kept container's are read on this machine through its root when
                    // they can be (as its reports, see `outcome`).
                    let pid = kept
                        .as_ref()
                        .and_then(|k| k.exec.who.host_pid)
                        .filter(|_| self.direct_read);
                    let here = match pid {
                        Some(pid) if newer == Listing::File || all == Listing::File => {
                            let dir = Path::new(crate::docker_track::STATE_DIR);
                            let read =
                                read_in_kept(pid, &id, vec![dir.join("newer"), dir.join("all")])
                                    .await;
                            match <[_; 2]>::try_from(read) {
                                Ok([Ok(newer), Ok(all)]) => Some([newer, all]),
                                _ => None,
                            }
                        }
                        _ => None,
                    };
                    let [newer_file, all_file] = if let Some(read) = here {
                        read
                    } else if newer == Listing::File || all == Listing::File {
                        let dir = Path::new(CONTAINER_WORKDIR).join(crate::docker_track::STATE_DIR);
                        self.download_files(
                            &id,
                            &dir.to_string_lossy(),
                            ["newer", "all"],
                            // Each list up to the cap.
                            2 * crate::docker_track::LIST_CAP,
                        )
                        .await
                    } else {
                        [None, None]
                    };
                    let pick = |l: Listing, file: Option<Vec<u8>>| match l {
                        Listing::Inline(bytes) => Some(bytes),
                        Listing::File => file,
                    };
                    (pick(all, all_file), pick(newer, newer_file))
                }
                None => (None, None),
            };
            ws.record_after(all.as_deref(), newer.as_deref());
        }
        if let Some(pending) = deferred
            && let Some(mut k) = kept.take()
            && let Some(cache) = cache.take()
            && let Ok(outcome) = result.as_mut()
        {
            if let Some(ws) = &cache.workspace {
                ws.commit();
            }
            let how = if k.reused {
                "reused from the slot's last run"
            } else {
                "new"
            };
            if let Some(limits) = outcome.info.limits.as_mut() {
                limits.push_str(&format!(
                    "; container {how}, cleaned after this run (NUVIRA_DOCKER_REUSE=0 turns reuse off)"
                ));
            }
            // The cleanup, then the slot released: the container is the background task's.
            guard.disarm();
            let this = self.clone();
            let mut seen = outcome.clone();
            self.cleanup.spawn(REMOVALS.track_future(async move {
                let keep = this.settle(&mut k, &mut seen).await;
                if keep {
                    k.state.used = crate::docker_keep::now_secs();
                    crate::docker_keep::save_state(&k.entry_dir, &k.state);
                } else {
                    remove(&this.docker, &k.state.id).await;
                }
                let (evicted, measure) = crate::docker_cache::finish(cache).await;
                crate::docker_cache::remove_evicted(&this.docker, &evicted).await;
                if let Some(m) = measure {
                    m.run(&this.docker).await;
                }
                drop(pending);
            }));
            phase(
                started,
                "result out (the kept container is cleaned in the background)",
            );
            return result;
        }
        let (evicted, measure) = match cache {
            Some(cache) => {
                if result.is_ok()
                    && let Some(ws) = &cache.workspace
                {
                    ws.commit();
                }
                crate::docker_cache::finish(cache).await
            }
            None => (Vec::new(), None),
        };
        if keep_it {
            // The container stays for the slot's next run.
            guard.disarm();
            let docker = self.docker.clone();
            let tail = async move {
                crate::docker_cache::remove_evicted(&docker, &evicted).await;
                if let Some(m) = measure {
                    m.run(&docker).await;
                }
            };
            if self.background_removal {
                self.cleanup.spawn(REMOVALS.track_future(tail));
            } else {
                tail.await;
            }
            return result;
        }
        if self.background_removal && result.is_ok() {
            // The result is known: the removal (and that of evicted volumes, which the
            // container may still hold) and the volumes' measurement need not delay it.
            let docker = self.docker.clone();
            self.cleanup.spawn(REMOVALS.track_future(async move {
                remove(&docker, &id).await;
                crate::docker_cache::remove_evicted(&docker, &evicted).await;
                if let Some(m) = measure {
                    m.run(&docker).await;
                }
            }));
            guard.disarm();
            phase(
                started,
                "result out (the container is removed in the background)",
            );
            return result;
        }
        // Removal is awaited here on every path the future survives; the guard covers the rest
        // (including this removal being dropped half-way).
        remove(&self.docker, &id).await;
        guard.disarm();
        crate::docker_cache::remove_evicted(&self.docker, &evicted).await;
        if let Some(m) = measure {
            m.run(&self.docker).await;
        }
        result
    }

    /// Writes `tar`'s entries into the workspace volume's folder on this machine, on a blocking
    /// thread that holds `cache` (the slot's lock) until it is done, so that a dropped run
    /// leaves the slot taken until the volume is no longer written. Gives back the tar (its
    /// entries gone when written, else left for the upload) and the cache, and the folder's
    /// identity when written ([`note_direct_write`]).
    async fn write_into_volume(
        &self,
        folder: VolumeFolder,
        tar: WorkspaceTar,
        held: Option<crate::docker_cache::DockerCache>,
        cancel: &dyn CancelSignal,
    ) -> Result<
        (
            WorkspaceTar,
            Option<crate::docker_cache::DockerCache>,
            Option<crate::docker_cache::FolderId>,
        ),
        SandboxError,
    > {
        let engine = self.engine.clone();
        let writer = tokio::task::spawn_blocking(move || {
            let wrote = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let dir = match &folder {
                    VolumeFolder::New(new, within) => local_volume_dir(&engine, new, within),
                    VolumeFolder::Old(old) => local_old_volume_dir(&engine, old),
                }
                .map_err(|why| (Unwritten::Before, why))?;
                if matches!(folder, VolumeFolder::Old(_)) {
                    no_link_on_the_way(&dir, &tar.root, &tar.entries)
                        .map_err(|why| (Unwritten::NotAMirror, why))?;
                }
                let id = folder_id(&dir).map_err(|why| (Unwritten::Before, why))?;
                tar.unpack_into(&dir).map_err(|e| (Unwritten::Partly, e))?;
                Ok(id)
            }))
            .unwrap_or_else(|_| Err((Unwritten::Partly, "the write panicked".into())));
            (tar, held, wrote)
        });
        // Cancelled: the writer keeps the slot until it is done; the guard removes the
        // container.
        let (mut tar, held, wrote) = tokio::select! {
            r = writer => r.map_err(|e| SandboxError::Failed(format!("write the workspace: {e}")))?,
            () = cancel.cancelled() => return Err(SandboxError::Cancelled),
        };
        let folder = note_direct_write(&mut tar, held.as_ref(), wrote)?;
        Ok((tar, held, folder))
    }

    #[allow(
        clippy::too_many_arguments,
        reason = "one private step of run_observed"
    )]
    async fn drive(
        &self,
        id: &str,
        request: &SandboxRequest,
        tar: WorkspaceTar,
        cancel: &dyn CancelSignal,
        collect: &[(String, std::path::PathBuf)],
        info: &SandboxInfo,
        started: Instant,
        track: Track<'_>,
        exec: Option<Exec>,
    ) -> Result<SandboxOutcome, SandboxError> {
        let docker = &self.docker;
        if tar.entries.is_empty() && tar.extra.is_empty() {
            // Nothing changed since the workspace volume's last upload.
            return match exec {
                Some(exec) => {
                    self.run_exec(id, request, cancel, collect, info, started, track, exec)
                        .await
                }
                None => {
                    self.run_uploaded(id, request, cancel, collect, info, started, track)
                        .await
                }
            };
        }
        let (chunks, packer) = tar.stream();
        let body = bollard::body_try_stream(futures::TryStreamExt::map_ok(chunks, Into::into));
        let uploaded = docker
            .upload_to_container(
                id,
                Some(UploadToContainerOptions {
                    path: CONTAINER_WORKDIR.into(),
                    ..Default::default()
                }),
                body,
            )
            .await;
        // A packing error (a file that cannot be read) explains a failed upload best.
        match packer.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(e) => return Err(SandboxError::Failed(format!("pack the workspace: {e}"))),
        }
        uploaded.map_err(|e| self.engine_error("upload the workspace", e))?;
        match exec {
            Some(exec) => {
                self.run_exec(id, request, cancel, collect, info, started, track, exec)
                    .await
            }
            None => {
                self.run_uploaded(id, request, cancel, collect, info, started, track)
                    .await
            }
        }
    }

    /// The rest of [`Self::drive`] once the workspace is in the container.
    #[allow(
        clippy::too_many_arguments,
        reason = "one private step of run_observed"
    )]
    async fn run_uploaded(
        &self,
        id: &str,
        request: &SandboxRequest,
        cancel: &dyn CancelSignal,
        collect: &[(String, std::path::PathBuf)],
        info: &SandboxInfo,
        started: Instant,
        track: Track<'_>,
    ) -> Result<SandboxOutcome, SandboxError> {
        let docker = &self.docker;
        let attached = docker
            .attach_container(
                id,
                Some(AttachContainerOptions {
                    stream: true,
                    stdout: true,
                    stderr: true,
                    ..Default::default()
                }),
            )
            .await
            .map_err(|e| self.engine_error("attach to the container", e))?;
        let output = attached.output;
        let reader = tokio::spawn(read_output(output, 0));
        let reader_abort = reader.abort_handle();
        let _abort_reader = AbortOnDrop(reader_abort.clone());

        docker
            .start_container(id, None::<bollard::query_parameters::StartContainerOptions>)
            .await
            .map_err(|e| self.engine_error("start the container", e))?;

        let wait = || async {
            let mut stream = docker.wait_container(id, None::<WaitContainerOptions>);
            match stream.next().await {
                Some(Ok(r)) => Ok(r.status_code),
                Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => {
                    Ok(code)
                }
                Some(Err(e)) => Err(self.engine_error("wait for the container", e)),
                None => Err(SandboxError::Failed(
                    "wait for the container: the engine closed the stream".into(),
                )),
            }
        };
        let kill = || async {
            let _ = docker
                .kill_container(
                    id,
                    Some(KillContainerOptions {
                        signal: "SIGKILL".into(),
                    }),
                )
                .await;
        };

        let mut timed_out = false;
        let mut status = None;
        tokio::select! {
            r = wait() => { status = Some(r?); }
            () = tokio::time::sleep(request.limits.timeout) => {
                timed_out = true;
                kill().await;
                wait().await?;
            }
            () = cancel.cancelled() => {
                kill().await;
                return Err(SandboxError::Cancelled);
            }
        }

        // A command that exited 0 was not killed by a limit: its status is the wait's, and the
        // inspection (a round trip) is needed only to tell an out-of-memory kill otherwise.
        let (exit_code, oom_killed) = if status == Some(0) {
            (Some(0), false)
        } else {
            let state = docker
                .inspect_container(
                    id,
                    None::<bollard::query_parameters::InspectContainerOptions>,
                )
                .await
                .map_err(|e| self.engine_error("inspect the container", e))?
                .state
                .unwrap_or_default();
            let exit_code = if timed_out { None } else { state.exit_code };
            (exit_code, state.oom_killed.unwrap_or(false))
        };

        let (stdout, stderr) = match tokio::time::timeout(Duration::from_secs(5), reader).await {
            Ok(Ok(pair)) => pair,
            _ => {
                reader_abort.abort();
                (Tail::default(), Tail::default())
            }
        };
        self.outcome(
            id,
            request,
            collect,
            info,
            started,
            track,
            Ended {
                stdout,
                stderr,
                exit_code,
                timed_out,
                oom_killed,
                host_pid: None,
            },
        )
        .await
    }

    /// The outcome of a run whose command has ended: the trailer taken off standard error,
    /// the files collected, what the result says.
    #[allow(
        clippy::too_many_arguments,
        reason = "one private step of run_observed"
    )]
    async fn outcome(
        &self,
        id: &str,
        request: &SandboxRequest,
        collect: &[(String, std::path::PathBuf)],
        info: &SandboxInfo,
        started: Instant,
        track: Track<'_>,
        ended: Ended,
    ) -> Result<SandboxOutcome, SandboxError> {
        let Ended {
            stdout,
            mut stderr,
            exit_code,
            timed_out,
            oom_killed,
            host_pid,
        } = ended;
        if let Some((nonce, trailer)) = track
            && let Ok(mut slot) = trailer.lock()
        {
            *slot = stderr.take_trailer(&crate::docker_track::marker(nonce, "newer"), |t| {
                crate::docker_track::parse_trailer(t, nonce).is_some()
            });
        }
        let stderr = stderr.into_text();
        let pids_limited = mentions_fork_failure(&stderr);

        // A kept container's files are read on this machine through its PID 1's root (what
        // the engine's archive would give, without its mount of the container: ~100 ms on a
        // loaded machine); anything that cannot be read so is asked of the engine.
        let mut direct = Vec::new();
        if let Some(pid) = host_pid
            && self.direct_read
            && !collect.is_empty()
        {
            let rels = collect.iter().map(|(_, rel)| rel.clone()).collect();
            direct = read_in_kept(pid, id, rels).await;
        }
        let mut direct = direct.into_iter();
        let mut collected = BTreeMap::new();
        let (mut here, mut downloaded) = (0usize, 0usize);
        for (key, rel) in collect {
            let bytes = match direct.next() {
                Some(Ok(read)) => {
                    here += 1;
                    read
                }
                _ => {
                    downloaded += 1;
                    let path = Path::new(CONTAINER_WORKDIR).join(rel);
                    self.download_file(id, &path.to_string_lossy()).await
                }
            };
            if let Some(bytes) = bytes {
                collected.insert(key.clone(), bytes);
            }
        }

        let mut info = info.clone();
        info.collected_from = match (here, downloaded) {
            (0, 0) => None,
            (_, 0) => Some(format!("{HERE} (the kept container's /proc/PID/root)")),
            (0, _) => Some(DOWNLOADED.to_owned()),
            (h, d) => Some(format!("{h} {HERE}, {d} {DOWNLOADED}")),
        };
        info.timed_out = timed_out;
        info.oom_killed = oom_killed;
        info.exit_code = exit_code;
        info.pids_limited = pids_limited;
        info.limits = Some(format!(
            "memory {}, {} CPUs and {} processes/threads enforced by the Docker engine at {}",
            crate::limits::format_size(request.limits.memory_bytes),
            request.limits.cpus,
            request.limits.pids,
            self.engine.host
        ));
        let mut outcome = SandboxOutcome::default();
        outcome.exit_code = exit_code;
        outcome.stdout = stdout.into_text();
        outcome.stderr = stderr;
        outcome.timed_out = timed_out;
        outcome.oom_killed = oom_killed;
        outcome.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        phase(started, "output and reports collected");
        outcome.info = info;
        outcome.collected = collected;
        outcome.workdir = Some(container_workdir(&request.dir));
        Ok(outcome)
    }

    /// Runs the command as an exec in the kept container `id`, under the timeout: at the
    /// timeout every process but PID 1 is killed by a second exec (the engine cannot kill an
    /// exec), or the container when that exec cannot start.
    #[allow(
        clippy::too_many_arguments,
        reason = "one private step of run_observed"
    )]
    async fn run_exec(
        &self,
        id: &str,
        request: &SandboxRequest,
        cancel: &dyn CancelSignal,
        collect: &[(String, std::path::PathBuf)],
        info: &SandboxInfo,
        started: Instant,
        track: Track<'_>,
        Exec {
            cmd,
            workdir,
            report,
            who,
            baseline,
        }: Exec,
    ) -> Result<SandboxOutcome, SandboxError> {
        use bollard::exec::{CreateExecOptions, StartExecResults};
        let docker = &self.docker;
        let exec = docker
            .create_exec(
                id,
                CreateExecOptions {
                    cmd: Some(cmd),
                    attach_stdout: Some(true),
                    attach_stderr: Some(true),
                    working_dir: workdir,
                    user: Some(who.user.clone()),
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| self.engine_error("run the command in the kept container", e))?;
        phase(started, "exec created");
        let StartExecResults::Attached { output, .. } = docker
            .start_exec(&exec.id, None)
            .await
            .map_err(|e| self.engine_error("start the command in the kept container", e))?
        else {
            return Err(SandboxError::Failed(
                "start the command in the kept container: the engine did not attach".into(),
            ));
        };
        // A new container's baseline state is the first thing on standard error, sent before
        // the command starts (so no process of the run can have written it).
        let head = if baseline { BASE_HEAD_CAP } else { 0 };
        let reader = tokio::spawn(read_output(output, head));
        let reader_abort = reader.abort_handle();
        let _abort_reader = AbortOnDrop(reader_abort.clone());
        let mut reader = reader;
        let kill_all = || async {
            let killed = crate::docker_keep::exec_small(
                docker,
                id,
                &who.user,
                crate::docker_keep::kill_script(),
                Duration::from_secs(10),
            )
            .await
            .is_some_and(|e| e.exit_code == Some(0));
            if !killed {
                let _ = docker
                    .kill_container(
                        id,
                        Some(KillContainerOptions {
                            signal: "SIGKILL".into(),
                        }),
                    )
                    .await;
            }
        };
        let mut timed_out = false;
        let pair = tokio::select! {
            r = &mut reader => r.ok(),
            () = tokio::time::sleep(request.limits.timeout) => {
                timed_out = true;
                kill_all().await;
                // The engine closes the output within 2 s of the exec's end.
                match tokio::time::timeout(Duration::from_secs(10), &mut reader).await {
                    Ok(r) => r.ok(),
                    Err(_) => {
                        reader_abort.abort();
                        None
                    }
                }
            }
            () = cancel.cancelled() => {
                let _ = docker
                    .kill_container(id, Some(KillContainerOptions { signal: "SIGKILL".into() }))
                    .await;
                return Err(SandboxError::Cancelled);
            }
        };
        let (stdout, mut stderr) = pair.unwrap_or_default();
        phase(started, "command's output ended");
        let mut exit_code = if timed_out {
            None
        } else {
            docker
                .inspect_exec(&exec.id)
                .await
                .map_err(|e| self.engine_error("inspect the command's exec", e))?
                .exit_code
        };
        // The wrapper's report, last on standard error: trusted only when the wrapper exited 0
        // by itself (after its `kill -9 -1`, nothing of the run is left to write).
        if let Some((nonce, _)) = track {
            let kept = stderr
                .take_trailer(&crate::docker_track::marker(nonce, "kept"), |t| {
                    crate::docker_track::parse_kept(t).is_some()
                })
                .and_then(|t| crate::docker_track::parse_kept(&t));
            let base = baseline
                .then(|| stderr.take_head(&crate::docker_track::marker(nonce, "base")))
                .flatten()
                .map(|t| String::from_utf8_lossy(&t).into_owned());
            let (code, trusted) = trust_report(exit_code, timed_out, kept.as_ref())?;
            exit_code = code;
            if let Some(mut kept) = kept {
                kept.clean &= trusted;
                kept.killed &= trusted;
                kept.base = base.filter(|_| trusted);
                // The wrapper says every process is gone; the host checks (a run can trace the
                // wrapper and fake that), before the listings are trusted.
                if kept.killed
                    && crate::docker_keep::only_keeper_left(docker, id, &who).await != Some(true)
                {
                    kept.clean = false;
                    kept.killed = false;
                    kept.survivors = true;
                }
                if let Ok(mut slot) = report.lock() {
                    *slot = Some(kept);
                }
            }
        }
        self.outcome(
            id,
            request,
            collect,
            info,
            started,
            track,
            Ended {
                stdout,
                stderr,
                exit_code,
                timed_out,
                oom_killed: false,
                host_pid: who.host_pid,
            },
        )
        .await
    }

    /// Cleans the kept container after a run and says whether it may be kept; marks the
    /// outcome out-of-memory when the cgroup's `oom_kill` count rose (or PID 1 was killed so).
    async fn settle(&self, kept: &mut Kept, outcome: &mut SandboxOutcome) -> bool {
        let id = kept.state.id.clone();
        // The wrapper's own cleanup when it reported one (no second exec), else the cleanup's.
        let report = kept.exec.report.lock().ok().and_then(|r| r.clone());
        // A new container's baseline state came first on its standard error; without it the
        // container goes.
        let mut no_base = false;
        if !kept.reused {
            match report.as_ref().and_then(|r| r.base.clone()) {
                Some(base) => kept.state.state = base,
                None => no_base = true,
            }
        }
        let survivors = report.as_ref().is_some_and(|r| r.survivors);
        let cleaned = match report {
            _ if survivors => Err("the host saw processes of the run after its end".to_owned()),
            Some(r) if r.clean => Ok(crate::docker_keep::Cleaned {
                oom: r.oom,
                pids: r.pids,
                state: r.state,
            }),
            _ => match crate::docker_keep::clean(&self.docker, &id, &kept.exec.who.user).await {
                // The cleanup is the run's user's too: the host checks what it left.
                Ok(_)
                    if crate::docker_keep::only_keeper_left(&self.docker, &id, &kept.exec.who)
                        .await
                        != Some(true) =>
                {
                    Err("the host saw processes of the run after the cleanup".to_owned())
                }
                other => other,
            },
        };
        // Why the container goes, when it does (said in the result's limits).
        let mut gone: Option<&str> = outcome.timed_out.then_some("the run timed out");
        if no_base {
            gone = gone.or(Some("its baseline state was not read"));
        }
        match cleaned {
            Ok(found) => {
                match found.oom {
                    Some(oom) => {
                        if oom > kept.state.oom {
                            outcome.oom_killed = true;
                            outcome.info.oom_killed = true;
                        }
                        kept.state.oom = oom;
                    }
                    // No count to tell an out-of-memory kill by: not kept after a kill.
                    None if outcome.exit_code != Some(0) => {
                        gone = gone.or(Some(
                            "the command failed and no out-of-memory count is readable",
                        ));
                    }
                    None => {}
                }
                // A fork or thread the pids limit refused during the run (its count rose):
                // said even when the run's output does not say so.
                if let Some(pids) = found.pids {
                    if pids > kept.state.pids {
                        outcome.info.pids_limited = true;
                    }
                    kept.state.pids = pids;
                }
                // Docker's /etc files, /dev, message queues, System V IPC: as they were when
                // the container started, or it goes.
                if found.state != kept.state.state {
                    tracing::debug!(
                        "kept container {id} discarded: its state outside the file system changed: {:?}",
                        found.state
                    );
                    gone = gone.or(Some(
                        "the run left state outside the file system (/dev, the modes of /tmp or /dev/shm, /etc/hosts, message queues or IPC)",
                    ));
                }
            }
            Err(why) => {
                tracing::debug!("kept container {id} discarded: {why:?}");
                gone = gone.or(Some(if survivors {
                    "processes of the run were still running after it"
                } else {
                    "its cleanup failed or left processes"
                }));
                // PID 1 itself may have been killed for memory.
                if let Ok(c) = self
                    .docker
                    .inspect_container(
                        &id,
                        None::<bollard::query_parameters::InspectContainerOptions>,
                    )
                    .await
                    && c.state.and_then(|s| s.oom_killed) == Some(true)
                {
                    outcome.oom_killed = true;
                    outcome.info.oom_killed = true;
                }
            }
        }
        if gone.is_none() {
            // The overlay upper folder read on this machine when it could be at the start
            // (PID 1 still this container's: the engine is this machine's), else the engine's
            // changes list.
            // A container whose upper folder was read at the start is compared that way
            // only: a folder that cannot be read now (or PID 1 no longer this container's)
            // counts as changed, never as a reason for the weaker list.
            let same = match kept.state.upper.clone() {
                Some((dir, baseline)) => {
                    let local = kept
                        .state
                        .pid
                        .is_some_and(|pid| crate::docker_keep::is_local(pid, &id));
                    let now = if local {
                        tokio::task::spawn_blocking(move || crate::docker_keep::upper_listing(&dir))
                            .await
                            .ok()
                            .flatten()
                    } else {
                        None
                    };
                    let same = now.as_ref() == Some(&baseline);
                    if !same {
                        tracing::debug!(
                            "kept container {id} discarded: its upper folder changed or could not be read: {now:?}"
                        );
                    }
                    same
                }
                None => {
                    let now = crate::docker_keep::changes(&self.docker, &id).await;
                    let same = now.as_ref() == Some(&kept.state.baseline);
                    if !same {
                        tracing::debug!(
                            "kept container {id} discarded: its file system changed: {now:?}"
                        );
                    }
                    same
                }
            };
            if !same {
                gone = Some("the run wrote the container's own file system");
            }
        }
        let how = if kept.reused {
            "reused from the slot's last run"
        } else {
            "new"
        };
        let fate = match gone {
            None => "kept for the next run".to_owned(),
            Some(why) => format!("removed after this run ({why})"),
        };
        if let Some(limits) = outcome.info.limits.as_mut() {
            limits.push_str(&format!(
                "; container {how}, {fate} (NUVIRA_DOCKER_REUSE=0 turns reuse off)"
            ));
        }
        gone.is_none()
    }

    fn container_body(
        &self,
        request: &SandboxRequest,
        image: &str,
    ) -> Result<ContainerCreateBody, SandboxError> {
        let mut mounts = request.mounts.clone();
        let mut env: BTreeMap<String, String> = BTreeMap::new();
        if is_host_image(image) {
            let (host_mounts, host_env) = host_toolchain();
            for m in host_mounts {
                // `/usr/` and `/usr` are one mount point to the engine.
                let at = crate::docker_keep::container_path(&m.container);
                if !mounts
                    .iter()
                    .any(|u| crate::docker_keep::container_path(&u.container) == at)
                {
                    mounts.push(m);
                }
            }
            env.extend(host_env);
            if request.network == NetworkMode::None {
                // Without a network, cargo must use the (read-only) registry cache as it is.
                env.insert("CARGO_NET_OFFLINE".into(), "true".into());
            }
        }
        // pnpm's recorded store, so that pnpm keeps the uploaded node_modules (crate::pnpm):
        // pointed at, and bound read-only at its path where it exists on this machine.
        if let Some(store) =
            crate::pnpm::recorded_store(&request.workspace, &check_dir(&request.dir)?)
        {
            env.extend(store.env());
            let at = store.store_dir.to_string_lossy().into_owned();
            if let Some(host) = store.host
                && !mounts.iter().any(|m| {
                    crate::docker_keep::container_path(&m.container)
                        == crate::docker_keep::container_path(&at)
                })
            {
                mounts.push(nuvira_api::test::Mount {
                    host,
                    container: at,
                    read_only: true,
                });
            }
        }
        env.extend(request.env.clone());

        let mut docker_mounts = Vec::with_capacity(mounts.len());
        for m in &mounts {
            if !m.host.exists() {
                return Err(SandboxError::Failed(format!(
                    "mount {} at {}: the host path does not exist",
                    m.host.display(),
                    m.container
                )));
            }
            let host = std::fs::canonicalize(&m.host).unwrap_or_else(|_| m.host.clone());
            docker_mounts.push(DockerMount {
                target: Some(m.container.clone()),
                source: Some(host.to_string_lossy().into_owned()),
                typ: Some(MountTypeEnum::BIND),
                read_only: Some(m.read_only),
                ..Default::default()
            });
        }

        let limits = &request.limits;
        let memory = i64::try_from(limits.memory_bytes).unwrap_or(i64::MAX);
        let nano_cpus = (limits.cpus * 1e9).round() as i64;
        let network = match request.network {
            NetworkMode::None => "none",
            NetworkMode::Host => "host",
            NetworkMode::Bridge => "bridge",
        };
        let mut tmpfs = HashMap::new();
        let mut volumes = None;
        if request.read_only_root {
            tmpfs.insert(
                "/tmp".to_owned(),
                "rw,exec,nosuid,nodev,mode=1777".to_owned(),
            );
            // An anonymous volume (removed with the container) keeps the workdir writable and
            // lets the workspace be uploaded into a read-only container.
            volumes = Some(HashMap::from([(
                CONTAINER_WORKDIR.to_owned(),
                HashMap::new(),
            )]));
        }
        let host_config = HostConfig {
            memory: Some(memory),
            memory_swap: Some(memory),
            nano_cpus: (nano_cpus > 0).then_some(nano_cpus),
            pids_limit: Some(i64::from(limits.pids)),
            network_mode: Some(network.into()),
            cap_drop: Some(vec!["ALL".into()]),
            security_opt: Some(vec!["no-new-privileges".into()]),
            readonly_rootfs: Some(request.read_only_root),
            tmpfs: (!tmpfs.is_empty()).then_some(tmpfs),
            mounts: (!docker_mounts.is_empty()).then_some(docker_mounts),
            ..Default::default()
        };
        Ok(ContainerCreateBody {
            image: Some(image.to_owned()),
            cmd: Some(request.command.clone()),
            env: Some(env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
            working_dir: Some(
                container_workdir(&check_dir(&request.dir)?)
                    .to_string_lossy()
                    .into_owned(),
            ),
            labels: Some(HashMap::from([(
                CONTAINER_LABEL.to_owned(),
                "1".to_owned(),
            )])),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            network_disabled: Some(request.network == NetworkMode::None),
            volumes,
            host_config: Some(host_config),
            ..Default::default()
        })
    }

    /// Maps an engine error: connection trouble is "unavailable", a missing image too, anything
    /// else "failed".
    fn engine_error(&self, what: &str, e: bollard::errors::Error) -> SandboxError {
        use bollard::errors::Error as E;
        match e {
            E::DockerResponseServerError {
                status_code: 404,
                message,
            } if message.contains("image") => SandboxError::Unavailable(format!(
                "{what}: {message}: build the local images with `sudo scripts/docker-up.sh` from Nuvira's source tree, or pass another with --image"
            )),
            // The create body is the request's: a 400 there is a setting the engine does not
            // take (a memory limit under its minimum, more CPUs than it has).
            E::DockerResponseServerError {
                status_code: 400,
                message,
            } if what.starts_with("create a container") => {
                let lower = message.to_ascii_lowercase();
                let change = if lower.contains("mount") {
                    "change --mount (`mounts` in the step's config): each container path once, none at /workspace or where the toolchain is mounted"
                } else if ["memory", "cpu", "pids"].iter().any(|w| lower.contains(w)) {
                    "change --memory, --cpus or --pids (`memory`, `cpus`, `pids` in the step's config)"
                } else {
                    "change the run's settings (--image, --mount, --memory, --cpus, --pids, --network)"
                };
                SandboxError::Rejected(format!(
                    "{what}: the engine refused the run's settings: {}; {change}",
                    nuvira_api::text::escape_control(&message)
                ))
            }
            E::DockerResponseServerError { message, .. } => {
                SandboxError::Failed(format!("{what}: {message}"))
            }
            E::HyperResponseError { .. } | E::IOError { .. } | E::RequestTimeoutError => {
                SandboxError::Unavailable(format!("{what}: {e}: {DOCKER_HINT}"))
            }
            other => SandboxError::Failed(format!("{what}: {other}")),
        }
    }

    /// The regular files `names` directly in the folder `dir` of the stopped container, in one
    /// archive (each download is a mount of the container's file system by the engine); `None`
    /// for a file that is missing, not a regular file, or when the archive is over `cap` bytes
    /// (it was written by the run: it is not trusted).
    async fn download_files<const N: usize>(
        &self,
        id: &str,
        dir: &str,
        names: [&str; N],
        cap: usize,
    ) -> [Option<Vec<u8>>; N] {
        let mut out: [Option<Vec<u8>>; N] = std::array::from_fn(|_| None);
        let mut stream = self
            .docker
            .download_from_container(id, Some(DownloadFromContainerOptions { path: dir.into() }));
        let mut tar = Vec::new();
        while let Some(chunk) = stream.next().await {
            let Ok(chunk) = chunk else { return out };
            tar.extend_from_slice(&chunk);
            if tar.len() > cap.saturating_add(64 * 1024) {
                return out;
            }
        }
        let mut archive = tar::Archive::new(tar.as_slice());
        let Ok(entries) = archive.entries() else {
            return out;
        };
        for entry in entries {
            let Ok(mut entry) = entry else { break };
            if !entry.header().entry_type().is_file() {
                continue;
            }
            let Ok(path) = entry.path().map(|p| p.into_owned()) else {
                continue;
            };
            // `<dir's name>/<name>`: nothing deeper counts.
            let mut parts = path.components().skip(1);
            let (Some(std::path::Component::Normal(name)), None) = (parts.next(), parts.next())
            else {
                continue;
            };
            if let Some(i) = names.iter().position(|n| std::ffi::OsStr::new(n) == name) {
                let mut bytes = Vec::new();
                if std::io::Read::read_to_end(&mut entry, &mut bytes).is_ok() {
                    out[i] = Some(bytes);
                }
            }
        }
        out
    }

    /// One file of the stopped container, or `None` when it is missing, not a regular file, or
    /// over [`crate::COLLECT_CAP`] (it was written by the run: it is not trusted).
    async fn download_file(&self, id: &str, path: &str) -> Option<Vec<u8>> {
        let mut stream = self
            .docker
            .download_from_container(id, Some(DownloadFromContainerOptions { path: path.into() }));
        let mut tar = Vec::new();
        let cap = usize::try_from(crate::COLLECT_CAP).unwrap_or(usize::MAX);
        while let Some(chunk) = stream.next().await {
            tar.extend_from_slice(&chunk.ok()?);
            if tar.len() > cap.saturating_add(64 * 1024) {
                return None;
            }
        }
        // The archive of a file holds that file first; of a folder, the folder first.
        let mut archive = tar::Archive::new(tar.as_slice());
        let mut entry = archive.entries().ok()?.next()?.ok()?;
        if !entry.header().entry_type().is_file() || entry.size() > crate::COLLECT_CAP {
            return None;
        }
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut entry, &mut bytes).ok()?;
        Some(bytes)
    }
}

#[async_trait]
impl Sandbox for DockerSandbox {
    fn kind(&self) -> &str {
        "docker"
    }

    async fn run(
        &self,
        request: &SandboxRequest,
        cancel: &dyn CancelSignal,
    ) -> Result<SandboxOutcome, SandboxError> {
        self.run_observed(request, cancel, &|_| {}).await
    }
}

/// The command of a run in a kept container and what goes with it.
#[derive(Clone)]
struct Exec {
    /// The wrapped command.
    cmd: Vec<String>,
    /// Its working folder.
    workdir: Option<String>,
    /// The wrapper's report, once read.
    report: std::sync::Arc<std::sync::Mutex<Option<crate::docker_track::KeptReport>>>,
    /// Who the command runs as, and PID 1's user and pid.
    who: crate::docker_keep::Who,
    /// The wrapper sends the new container's baseline state first on standard error.
    baseline: bool,
}

/// The command's exit status in a kept container, and whether the wrapper's report is
/// trusted: only when the engine says the wrapper itself exited 0 (it then exits after its
/// report, which is its last word). A wrapper that did not (the run killed it, or it timed
/// out) keeps the engine's code, and its report (a run can forge one) is not trusted. A
/// wrapper that exited 0 without a report is an error: the command's status is unknown, and
/// a run must not pass by losing it.
fn trust_report(
    exit_code: Option<i64>,
    timed_out: bool,
    report: Option<&crate::docker_track::KeptReport>,
) -> Result<(Option<i64>, bool), SandboxError> {
    match (exit_code, report) {
        _ if timed_out => Ok((exit_code, false)),
        (Some(0), Some(r)) => Ok((Some(r.status), true)),
        (Some(0), None) => Err(SandboxError::Failed(
            "the command's wrapper in the kept container exited without its report, so the \
             command's exit status is unknown (the run may have tampered with the wrapper); the \
             container is removed: run again, or set NUVIRA_DOCKER_REUSE=0 to give every run a \
             fresh container"
                .into(),
        )),
        _ => Ok((exit_code, false)),
    }
}

/// A run's use of its slot's kept container ([`crate::docker_keep`]).
struct Kept {
    state: crate::docker_keep::KeptState,
    entry_dir: std::path::PathBuf,
    /// Used by an earlier run (else created by this one).
    reused: bool,
    exec: Exec,
}

/// The workspace files `rels` of the kept container `id` (PID 1 `pid` on this machine), read
/// through its root on a blocking thread ([`crate::read_collected_at`] each, in order); empty
/// when the root cannot be opened here.
async fn read_in_kept(
    pid: u32,
    id: &str,
    rels: Vec<std::path::PathBuf>,
) -> Vec<std::io::Result<Option<Vec<u8>>>> {
    let id = id.to_owned();
    tokio::task::spawn_blocking(move || {
        let Some(root) = crate::docker_keep::open_root(pid, &id) else {
            return Vec::new();
        };
        let workdir = Path::new(CONTAINER_WORKDIR.trim_start_matches('/'));
        rels.iter()
            .map(|rel| crate::read_collected_at(&root, &workdir.join(rel)))
            .collect()
    })
    .await
    .unwrap_or_default()
}

// A listing read through a kept container's root is capped as a collected file is.
const _: () = assert!(crate::docker_track::LIST_CAP as u64 == crate::COLLECT_CAP);

/// [`SandboxInfo::collected_from`]'s words.
const HERE: &str = "read on this machine through the container's root";
const DOWNLOADED: &str = "downloaded from the engine";

/// How a run's command ended, before the outcome is made.
struct Ended {
    stdout: Tail,
    stderr: Tail,
    exit_code: Option<i64>,
    timed_out: bool,
    oom_killed: bool,
    /// The kept container's PID 1 on this machine: collected files are read through its root.
    host_pid: Option<u32>,
}

/// Reads an attached container's or exec's output stream to its end, keeping the tail of
/// standard output and of standard error.
async fn read_output<S>(mut output: S, stderr_head: usize) -> (Tail, Tail)
where
    S: futures::Stream<Item = Result<LogOutput, bollard::errors::Error>> + Unpin,
{
    let (mut out, mut err) = (Tail::default(), Tail::with_head(stderr_head));
    while let Some(Ok(chunk)) = output.next().await {
        match chunk {
            LogOutput::StdErr { message } => err.push(&message),
            LogOutput::StdOut { message } | LogOutput::Console { message } => {
                out.push(&message);
            }
            LogOutput::StdIn { .. } => {}
        }
    }
    (out, err)
}

/// The most of a new kept container's standard error read for its baseline state (a few KiB).
const BASE_HEAD_CAP: usize = 1 << 20;

/// A kept container's name: `nuvira-keep-<pid>-<n>-<nanos>`.
fn keep_name() -> String {
    container_name().replacen("nuvira-sandbox-", "nuvira-keep-", 1)
}

/// A tracked run's nonce (the container's name, in the wrapper's markers) and where its
/// trailer goes ([`crate::docker_track`]).
type Track<'a> = Option<(&'a str, &'a std::sync::Mutex<Option<Vec<u8>>>)>;

/// Removes a container (forced, with its anonymous volumes); a missing one is fine.
async fn remove(docker: &Docker, name: &str) {
    let options = RemoveContainerOptions {
        force: true,
        v: true,
        ..Default::default()
    };
    if let Err(e) = docker.remove_container(name, Some(options)).await {
        let missing = matches!(
            e,
            bollard::errors::Error::DockerResponseServerError {
                status_code: 404,
                ..
            }
        );
        if !missing {
            tracing::warn!("failed to remove sandbox container {name}: {e}");
        }
    }
}

/// Removes the container when a run is abandoned (future dropped, panic) before it removed it.
struct RemovalGuard {
    docker: Docker,
    tracker: TaskTracker,
    name: Option<String>,
    /// Resolves (or closes) once the create call has finished.
    created: Option<tokio::sync::oneshot::Receiver<()>>,
}

impl RemovalGuard {
    fn disarm(&mut self) {
        self.name = None;
    }
}

impl Drop for RemovalGuard {
    fn drop(&mut self) {
        let Some(name) = self.name.take() else {
            return;
        };
        let docker = self.docker.clone();
        let created = self.created.take();
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                self.tracker.spawn_on(
                    REMOVALS.track_future(async move {
                        if let Some(created) = created {
                            let _ = created.await;
                        }
                        remove(&docker, &name).await;
                    }),
                    &handle,
                );
            }
            Err(_) => tracing::warn!(
                "sandbox container {name} may be left behind (no runtime to remove it): remove it with `docker rm -f {name}`"
            ),
        }
    }
}

struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Whether the output says that starting a process or thread failed for want of resources,
/// as it does when the container's process limit refuses a `fork`/`clone` (the engine does not
/// report it, and the container's cgroup is gone once it stops).
fn mentions_fork_failure(stderr: &str) -> bool {
    const SIGNS: &[&str] = &[
        "can't fork",
        "cannot fork",
        "fork: resource temporarily unavailable",
        "fork failed: resource temporarily unavailable",
        "can't start new thread",
        "failed to spawn thread",
        "pthread_create failed",
        "unable to create native thread",
    ];
    let lower = stderr.to_ascii_lowercase();
    SIGNS.iter().any(|s| lower.contains(s))
}

fn container_workdir(dir: &Path) -> std::path::PathBuf {
    if dir.as_os_str().is_empty() {
        CONTAINER_WORKDIR.into()
    } else {
        Path::new(CONTAINER_WORKDIR).join(dir)
    }
}

/// The engine's answer to `ask` within [`CONNECT_TIMEOUT`], else `unavailable`'s error.
async fn within_connect_timeout<T>(
    ask: impl std::future::Future<Output = Result<T, bollard::errors::Error>>,
    unavailable: &impl Fn(String) -> SandboxError,
) -> Result<T, SandboxError> {
    match tokio::time::timeout(CONNECT_TIMEOUT, ask).await {
        Ok(answer) => answer.map_err(|e| unavailable(e.to_string())),
        Err(_) => Err(unavailable("timed out".into())),
    }
}

/// Where a run is, for `RUST_LOG=nuvira_sandbox=debug` (`-vv`): each phase with the time since
/// the run began, to see where a run's fixed cost goes.
fn phase(started: Instant, what: &str) {
    tracing::debug!(
        "docker run: {what} at {:.1} ms",
        started.elapsed().as_secs_f64() * 1000.0
    );
}

fn container_name() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "nuvira-sandbox-{}-{}-{nanos:08x}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// The workspace's files, to be streamed as an uncompressed tar (paths relative to the
/// workspace, links kept as links) in chunks, so that memory stays bounded whatever its size.
struct WorkspaceTar {
    root: std::path::PathBuf,
    entries: Vec<std::path::PathBuf>,
    /// `(t, files)`: each of `files` (the changed ones) is packed with an mtime of at least `t`
    /// seconds. A tar's mtimes are whole seconds, so a file edited in the second a build in
    /// the volume started would otherwise look older than that build, and cargo would keep
    /// it (see [`crate::sync`]'s *Build tools that trust mtimes*).
    newer: Option<(u64, std::collections::BTreeSet<std::path::PathBuf>)>,
    /// Files made here (path, content), packed after the entries, with their folder.
    extra: Vec<(std::path::PathBuf, Vec<u8>)>,
}

/// Bytes handed to the engine per chunk.
const TAR_CHUNK: usize = 256 * 1024;

impl WorkspaceTar {
    /// The tar's chunks, and the task that packs the tar into them (its result says whether
    /// packing succeeded).
    fn stream(
        self,
    ) -> (
        impl futures::Stream<Item = std::io::Result<Vec<u8>>> + Send + 'static,
        tokio::task::JoinHandle<Result<(), SandboxError>>,
    ) {
        let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Vec<u8>>>(4);
        let packer = tokio::task::spawn_blocking(move || {
            let mut writer = ChunkWriter {
                tx: tx.clone(),
                buf: Vec::with_capacity(TAR_CHUNK),
            };
            let result = self.pack(&mut writer);
            if let Err(e) = &result {
                // Make the upload fail rather than send a truncated archive.
                let _ = tx.blocking_send(Err(std::io::Error::other(e.to_string())));
            }
            result
        });
        let chunks = futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|chunk| (chunk, rx))
        });
        (chunks, packer)
    }

    /// Unpacks the tar into the folder `dir` as the engine's upload does (owners, modes and
    /// mtimes as packed, no extended attributes), packing and unpacking
    /// at once through a pipe. On an error the folder may hold part of the tar; the upload of
    /// the whole tar over it replaces every entry of it.
    fn unpack_into(&self, dir: &Path) -> Result<(), String> {
        let (reader, writer) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map(|(r, w)| (std::fs::File::from(r), std::fs::File::from(w)))
            .map_err(|e| format!("a pipe: {e}"))?;
        std::thread::scope(|scope| {
            let packer = scope.spawn(move || self.pack(writer));
            let mut archive = tar::Archive::new(reader);
            archive.set_preserve_permissions(true);
            archive.set_preserve_mtime(true);
            // The engine's upload gives each entry the owner its header names (users are not
            // remapped here: see `local_volume_dir`).
            archive.set_preserve_ownerships(true);
            archive.set_unpack_xattrs(false);
            archive.set_overwrite(true);
            let unpacked = unpack_dirs_last(&mut archive, dir)
                .map_err(|e| format!("unpack into {}: {e}", dir.display()));
            // The packer sees a closed pipe if the unpacking stopped early.
            drop(archive);
            let packed = packer
                .join()
                .map_err(|_| "the packer panicked".to_owned())?
                .map_err(|e| e.to_string());
            packed.and(unpacked)
        })
    }

    /// Writes the tar of the entries into `writer` (the upload's chunks, or a buffer in tests).
    fn pack<W: std::io::Write>(&self, writer: W) -> Result<(), SandboxError> {
        let fail = |p: &Path, e: std::io::Error| {
            SandboxError::Failed(format!("pack the workspace: {}: {e}", p.display()))
        };
        let mut builder = tar::Builder::new(writer);
        builder.follow_symlinks(false);
        for rel in &self.entries {
            let full = self.root.join(rel);
            if let Some((floor, files)) = &self.newer
                && files.contains(rel)
            {
                let meta = std::fs::symlink_metadata(&full).map_err(|e| fail(&full, e))?;
                if meta.is_file() {
                    let file = std::fs::File::open(&full).map_err(|e| fail(&full, e))?;
                    let mut header = tar::Header::new_gnu();
                    header.set_metadata_in_mode(&meta, tar::HeaderMode::Complete);
                    header.set_mtime(header.mtime().unwrap_or(0).max(*floor));
                    builder
                        .append_data(&mut header, rel, file)
                        .map_err(|e| fail(&full, e))?;
                    continue;
                }
            }
            builder
                .append_path_with_name(&full, rel)
                .map_err(|e| fail(&full, e))?;
        }
        // Nuvira's own files get the time they are packed (an mtime of 0 is 1 once the `tar`
        // crate unpacks it, but stays 0 through the engine's upload).
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_secs());
        let mut dirs = std::collections::BTreeSet::new();
        for (rel, bytes) in &self.extra {
            if let Some(parent) = rel.parent().filter(|p| !p.as_os_str().is_empty())
                && dirs.insert(parent.to_path_buf())
            {
                let mut header = tar::Header::new_gnu();
                header.set_entry_type(tar::EntryType::Directory);
                header.set_mode(0o755);
                header.set_mtime(now);
                header.set_size(0);
                builder
                    .append_data(&mut header, parent, std::io::empty())
                    .map_err(|e| fail(parent, e))?;
            }
            let mut header = tar::Header::new_gnu();
            header.set_mode(0o644);
            header.set_mtime(now);
            header.set_size(bytes.len() as u64);
            builder
                .append_data(&mut header, rel, bytes.as_slice())
                .map_err(|e| fail(rel, e))?;
        }
        let mut writer = builder.into_inner().map_err(|e| fail(&self.root, e))?;
        std::io::Write::flush(&mut writer).map_err(|e| fail(&self.root, e))
    }
}

/// Unpacks `archive` into `dst` as `tar::Archive::unpack` does (folders last, so that a
/// read-only one is made so after its files), and also gives each folder its mtime from the
/// archive, as the engine's upload does (the `tar` crate leaves a folder's mtime as unpacking
/// its files made it).
fn unpack_dirs_last<R: std::io::Read>(
    archive: &mut tar::Archive<R>,
    dst: &Path,
) -> std::io::Result<()> {
    let mut dirs = Vec::new();
    for entry in archive.entries()? {
        let mut entry = entry?;
        if entry.header().entry_type() == tar::EntryType::Directory {
            dirs.push(entry);
        } else {
            let zero = entry.header().mtime()? == 0;
            let path = entry.path()?.into_owned();
            if entry.unpack_in(dst)? && zero {
                // The `tar` crate makes an mtime of 0 a 1; the engine keeps it.
                set_mtime(&inside(dst, &path)?, 0)?;
            }
        }
    }
    // Deepest first, as `tar::Archive::unpack` (a folder made after its parent's mtime is set
    // would change it).
    dirs.sort_by(|a, b| b.path_bytes().cmp(&a.path_bytes()));
    for mut dir in dirs {
        let path = dir.path()?.into_owned();
        let mtime = dir.header().mtime()?;
        if dir.unpack_in(dst)? {
            set_mtime(&inside(dst, &path)?, mtime)?;
        }
    }
    Ok(())
}

/// The entry `path` as `unpack_in` made it: its normal components under `dst`.
fn inside(dst: &Path, path: &Path) -> std::io::Result<std::path::PathBuf> {
    let mut target = dst.to_path_buf();
    for c in path.components() {
        match c {
            std::path::Component::Normal(n) => target.push(n),
            std::path::Component::CurDir => {}
            _ => return Err(std::io::Error::other("an entry outside the volume")),
        }
    }
    Ok(target)
}

/// Sets the mtime (and atime) of `path`, not following a link.
fn set_mtime(path: &Path, secs: u64) -> std::io::Result<()> {
    let at = nix::sys::time::TimeSpec::new(i64::try_from(secs).unwrap_or(i64::MAX), 0);
    nix::sys::stat::utimensat(
        nix::fcntl::AT_FDCWD,
        path,
        &at,
        &at,
        nix::sys::stat::UtimensatFlags::NoFollowSymlink,
    )
    .map_err(std::io::Error::from)
}

/// Which workspace volume folder a run writes into on this machine.
enum VolumeFolder {
    /// The one this run just made, and the run's working folder (inside it).
    New(crate::docker_cache::NewVolume, std::path::PathBuf),
    /// One an earlier run of the slot made and wrote into.
    Old(crate::docker_cache::OldVolume),
}

/// Why a direct write into a volume's folder did not write everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unwritten {
    /// Nothing was written (not a local engine, not the folder recorded, ...): the upload does it.
    Before,
    /// Part was written: the upload does it all again.
    Partly,
    /// The folder is not the mirror the last run's listings described (a link or a file on the
    /// way of an entry): nothing was written, and nothing may be, the upload neither (inside
    /// the container it would follow the link).
    NotAMirror,
}

/// What a direct write did to the entries left for the upload: all gone when it wrote them
/// (the folder's identity returned), else kept (and the reason logged). A folder that is not a
/// mirror is an error: the volume is made again by the next run.
fn note_direct_write(
    tar: &mut WorkspaceTar,
    cache: Option<&crate::docker_cache::DockerCache>,
    wrote: Result<crate::docker_cache::FolderId, (Unwritten, String)>,
) -> Result<Option<crate::docker_cache::FolderId>, SandboxError> {
    match wrote {
        Ok(folder) => {
            tar.entries.clear();
            tar.extra.clear();
            Ok(Some(folder))
        }
        Err((Unwritten::Before, why)) => {
            tracing::debug!("the workspace goes up as an archive: {why}");
            Ok(None)
        }
        Err((Unwritten::Partly, why)) => {
            tracing::warn!(
                "the workspace goes up as an archive after writing part of it into the volume's folder: {why}"
            );
            Ok(None)
        }
        Err((Unwritten::NotAMirror, why)) => {
            if let Some(ws) = cache.and_then(|c| c.workspace.as_ref()) {
                ws.mark_dirty();
            }
            Err(SandboxError::Failed(format!(
                "the workspace volume is not what the last run left ({}): nothing was uploaded, and the next run makes the volume again; run again",
                nuvira_api::text::escape_control(&why)
            )))
        }
    }
}

/// The identity of the folder `dir` (not through a link): device, inode, birth time.
fn folder_id(dir: &Path) -> Result<crate::docker_cache::FolderId, String> {
    std::fs::symlink_metadata(dir)
        .map(|m| crate::docker_cache::FolderId::of(&m))
        .map_err(|e| format!("{}: {e}", dir.display()))
}

/// Checks that the engine is a local one whose files this process can write as the engine's
/// upload would: it (the peer of its unix socket, or the socket's listener under socket
/// activation) runs as root in this process's mount namespace with users not remapped, and
/// this process is root.
fn local_engine(engine: &crate::remote::EngineConfig) -> Result<(), String> {
    let socket = engine
        .host
        .strip_prefix("unix://")
        .ok_or("the engine is not on this machine")?;
    if !nix::unistd::geteuid().is_root() {
        return Err("this process is not root".into());
    }
    let stream = std::os::unix::net::UnixStream::connect(socket)
        .map_err(|e| format!("connect to {socket}: {e}"))?;
    let peer = nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials)
        .map_err(|e| format!("the engine's process: {e}"))?;
    drop(stream);
    if peer.pid() <= 0 || peer.uid() != 0 {
        return Err(format!(
            "the engine's process (pid {}, uid {}) is not a root process of this machine",
            peer.pid(),
            peer.uid()
        ));
    }
    let proc_ = Path::new("/proc").join(peer.pid().to_string());
    let ino = |p: &Path| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(p).map(|m| (m.dev(), m.ino())).ok()
    };
    let engine_ns = ino(&proc_.join("ns/mnt"));
    if engine_ns.is_none() || engine_ns != ino(Path::new("/proc/self/ns/mnt")) {
        return Err("the engine is in another mount namespace".into());
    }
    for map in ["uid_map", "gid_map"] {
        let text = std::fs::read_to_string(proc_.join(map)).unwrap_or_default();
        if text.split_whitespace().collect::<Vec<_>>() != ["0", "0", "4294967295"] {
            return Err(format!("the engine's {map} is not the identity"));
        }
    }
    Ok(())
}

/// The folder `mountpoint` of the volume `name` when it is named after it and a folder of
/// root's (not a link).
fn volume_folder(mountpoint: &Path, name: &str) -> Result<std::fs::Metadata, String> {
    use std::os::unix::fs::MetadataExt;
    if !mountpoint.is_absolute()
        || mountpoint.parent().and_then(Path::file_name) != Some(std::ffi::OsStr::new(name))
    {
        return Err(format!(
            "mount point {} is not named after the volume",
            mountpoint.display()
        ));
    }
    let meta = std::fs::symlink_metadata(mountpoint)
        .map_err(|e| format!("{}: {e}", mountpoint.display()))?;
    if !meta.is_dir() || meta.uid() != 0 {
        return Err(format!(
            "{} is not a folder of root's",
            mountpoint.display()
        ));
    }
    Ok(meta)
}

/// The folder on this machine of the volume `old`, which an earlier run of the slot made and
/// wrote into: the engine is a local one ([`local_engine`]) and the folder it names now is the
/// one that run wrote into (same device, inode and birth time).
fn local_old_volume_dir(
    engine: &crate::remote::EngineConfig,
    old: &crate::docker_cache::OldVolume,
) -> Result<std::path::PathBuf, String> {
    local_engine(engine)?;
    let meta = volume_folder(&old.mountpoint, &old.name)?;
    if crate::docker_cache::FolderId::of(&meta) != old.folder {
        return Err(format!(
            "{} is not the folder an earlier run wrote into",
            old.mountpoint.display()
        ));
    }
    Ok(old.mountpoint.clone())
}

/// Checks that no entry of `entries` (workspace-relative) has a link or anything but a folder
/// on its way below `dir`, and that none that is a folder in the workspace (`root`) is anything
/// but a folder (or missing) below `dir`: the folder holds what earlier runs left, and a write
/// must never leave it (the `tar` crate makes the folders on an entry's way before it checks
/// where they lead, and sets a folder entry's mode through a link). A file or link of the
/// workspace may replace anything but a folder: the `tar` crate removes what is there (a link
/// itself, not what it points to) and makes the entry anew, setting its mode and owner through
/// the new file.
fn no_link_on_the_way(
    dir: &Path,
    root: &Path,
    entries: &[std::path::PathBuf],
) -> Result<(), String> {
    let mut seen = std::collections::BTreeSet::new();
    for entry in entries {
        // (One gone from the workspace since it was listed is not written: its packing fails.)
        let folder_entry = std::fs::symlink_metadata(root.join(entry)).is_ok_and(|m| m.is_dir());
        let mut at = dir.to_path_buf();
        let mut parts = entry.components().peekable();
        while let Some(part) = parts.next() {
            let std::path::Component::Normal(name) = part else {
                return Err(format!("{}: not a plain relative path", entry.display()));
            };
            at.push(name);
            // Folders (and what is not there) are checked once; anything else every time, so
            // that a file checked as an entry is still refused on the way of a later one.
            if seen.contains(&at) {
                continue;
            }
            let last = parts.peek().is_none();
            match std::fs::symlink_metadata(&at) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    seen.insert(at.clone());
                }
                Err(e) => return Err(format!("{}: {e}", at.display())),
                Ok(m) if m.is_dir() && last && !folder_entry => {
                    return Err(format!(
                        "{} is a folder where the workspace has a file",
                        at.display()
                    ));
                }
                Ok(m) if m.is_dir() => {
                    seen.insert(at.clone());
                }
                Ok(_) if last && !folder_entry => {}
                Ok(m) if m.file_type().is_symlink() => {
                    return Err(format!("{} is a link", at.display()));
                }
                Ok(_) => {
                    return Err(format!("{} is not a folder", at.display()));
                }
            }
        }
    }
    Ok(())
}

/// The folder on this machine of the volume `new`, which this run just made, when the engine
/// is a local one whose files this process can write as the engine's upload would
/// ([`local_engine`]), and the folder the engine named is named after the volume, empty,
/// root's, and no older than the request that made the volume (so not a folder of the same
/// name of another engine, should the socket lead elsewhere through a forwarder).
fn local_volume_dir(
    engine: &crate::remote::EngineConfig,
    new: &crate::docker_cache::NewVolume,
    within: &Path,
) -> Result<std::path::PathBuf, String> {
    use std::os::unix::fs::MetadataExt;
    local_engine(engine)?;
    let dir = new.mountpoint.clone();
    let meta = volume_folder(&dir, &new.name)?;
    // Birth times are kept to the kernel's clock tick: a second of slack.
    let asked = new
        .asked
        .checked_sub(Duration::from_secs(1))
        .unwrap_or(std::time::UNIX_EPOCH);
    if meta.created().map_or(true, |born| born < asked) {
        return Err(format!(
            "{} is older than the volume this run made",
            dir.display()
        ));
    }
    // Empty but for the run's working folder (`within`), which the engine made in the
    // container and copied into the new volume: each folder on the way holds only the next.
    let mut at = dir.clone();
    let mut next = within.components().filter_map(|c| match c {
        std::path::Component::Normal(n) => Some(n.to_owned()),
        _ => None,
    });
    loop {
        let want = next.next();
        let mut found = std::fs::read_dir(&at).map_err(|e| format!("{}: {e}", at.display()))?;
        match (found.next(), want) {
            (None, _) => break,
            (Some(Ok(entry)), Some(name)) if entry.file_name() == name => {
                if found.next().is_some() {
                    return Err(format!("{} is not empty", at.display()));
                }
                let inner = entry.path();
                let m = std::fs::symlink_metadata(&inner)
                    .map_err(|e| format!("{}: {e}", inner.display()))?;
                if !m.is_dir() || m.uid() != 0 {
                    return Err(format!("{} is not a folder of root's", inner.display()));
                }
                at = inner;
            }
            _ => return Err(format!("{} is not empty", at.display())),
        }
    }
    Ok(dir)
}

/// Collects written bytes into chunks and sends them to the upload.
struct ChunkWriter {
    tx: tokio::sync::mpsc::Sender<std::io::Result<Vec<u8>>>,
    buf: Vec<u8>,
}

impl ChunkWriter {
    fn send(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(TAR_CHUNK));
        self.tx.blocking_send(Ok(chunk)).map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "the engine stopped reading the upload",
            )
        })
    }
}

impl std::io::Write for ChunkWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= TAR_CHUNK {
            self.send()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    // A volume's folder holds what earlier runs left: a write into it stops at a link or a
    // file on any entry's way, and at a folder entry that is a link, before anything is made
    // (through a link to a folder outside, even the folders on the way would be made there).
    // A file or link of the workspace may replace a link or a file: the write replaces it.
    #[test]
    fn a_write_into_a_volumes_folder_stops_at_a_link_or_a_file_on_the_way() {
        let vol = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let d = vol.path();
        std::fs::create_dir_all(d.join("src/deep")).unwrap();
        std::fs::write(d.join("src/lib.rs"), "x").unwrap();
        std::os::unix::fs::symlink(outside.path(), d.join("out")).unwrap();
        std::os::unix::fs::symlink("src", d.join("alias")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("f"), d.join("src/final.rs")).unwrap();
        // The workspace: `out` a folder, `src/final.rs` a file, `src/deep` a file.
        let w = ws.path();
        std::fs::create_dir_all(w.join("src/new")).unwrap();
        std::fs::create_dir_all(w.join("out/x")).unwrap();
        for f in [
            "src/lib.rs",
            "src/new/a.rs",
            "top.rs",
            "src/final.rs",
            "src/deep",
        ] {
            std::fs::write(w.join(f), "y").unwrap();
        }
        let p = |s: &str| std::path::PathBuf::from(s);
        // Folders and files as they should be, entries not there yet, and a file of the
        // workspace where the volume has a link (the write replaces the link).
        no_link_on_the_way(
            d,
            w,
            &[
                p("src"),
                p("src/lib.rs"),
                p("src/new/a.rs"),
                p("top.rs"),
                p("src/final.rs"),
            ],
        )
        .unwrap();
        for (entries, why) in [
            (vec![p("out/x/y.rs")], "is a link"),
            (vec![p("src"), p("alias/lib.rs")], "is a link"),
            (vec![p("out")], "is a link"),
            (vec![p("src/final.rs"), p("src/final.rs/in")], "is a link"),
            (vec![p("src/lib.rs/inner.rs")], "is not a folder"),
            // A file checked as an entry is still refused on the way of the next one.
            (
                vec![p("src/lib.rs"), p("src/lib.rs/inner.rs")],
                "is not a folder",
            ),
            (
                vec![p("src/deep")],
                "is a folder where the workspace has a file",
            ),
            (vec![p("../escape.rs")], "not a plain relative path"),
            (vec![p("/etc/passwd")], "not a plain relative path"),
        ] {
            let err = no_link_on_the_way(d, w, &entries).unwrap_err();
            assert!(err.contains(why), "{entries:?}: {err}");
        }
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_kept_containers_report_is_trusted_only_from_a_wrapper_that_exited_0_and_never_missing() {
        let report = |status| crate::docker_track::KeptReport {
            clean: true,
            killed: true,
            survivors: false,
            status,
            oom: Some(0),
            pids: Some(0),
            state: String::new(),
            base: None,
        };
        // The wrapper ran to its end: the command's status is the report's.
        assert_eq!(
            trust_report(Some(0), false, Some(&report(3))).unwrap(),
            (Some(3), true)
        );
        // Killed (the run killed its wrapper and may have forged the report): the engine's
        // code, the report not trusted.
        assert_eq!(
            trust_report(Some(137), false, Some(&report(0))).unwrap(),
            (Some(137), false)
        );
        assert_eq!(
            trust_report(Some(137), false, None).unwrap(),
            (Some(137), false)
        );
        assert_eq!(
            trust_report(None, true, Some(&report(0))).unwrap(),
            (None, false)
        );
        // Exit 0 and no report: unknown, never a pass.
        let err = trust_report(Some(0), false, None).unwrap_err().to_string();
        assert!(
            err.contains("without its report") && err.contains("NUVIRA_DOCKER_REUSE=0"),
            "{err}"
        );
    }

    /// A workspace with Nuvira's journal (originals of edited files) at the root and nested,
    /// the root's `.git`, a nested repository's `.git` folder and a submodule's `.git` file.
    fn workspace_with_state() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (file, text) in [
            ("src/a.rs", "fn a() {}"),
            (".nuvira/journal/0001/files/src/a.rs", "the original"),
            ("sub/.nuvira/last-run.json", "{}"),
            (".git/HEAD", "ref: refs/heads/main"),
            ("vendor/lib/.git/HEAD", "ref: refs/heads/main"),
            ("vendor/lib/lib.rs", "pub fn lib() {}"),
            ("module/.git", "gitdir: ../.git/modules/module"),
            ("module/m.rs", "fn m() {}"),
        ] {
            let p = dir.path().join(file);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        dir
    }

    fn tar_names(root: &Path, include_ignored: bool) -> Vec<String> {
        let tar = WorkspaceTar {
            root: root.to_path_buf(),
            entries: crate::workspace_entries(root, include_ignored).unwrap(),
            newer: None,
            extra: Vec::new(),
        };
        let mut buf = Vec::new();
        tar.pack(&mut buf).unwrap();
        let mut archive = tar::Archive::new(buf.as_slice());
        archive
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let path = e.path().unwrap();
                path.to_string_lossy().trim_end_matches('/').to_owned()
            })
            .collect()
    }

    #[test]
    fn fork_failures_are_recognised_in_the_output() {
        assert!(mentions_fork_failure(
            "sh: can't fork: Resource temporarily unavailable"
        ));
        assert!(mentions_fork_failure(
            "RuntimeError: can't start new thread"
        ));
        assert!(mentions_fork_failure(
            "thread 'main' panicked: failed to spawn thread: Os { code: 11 }"
        ));
        assert!(!mentions_fork_failure(
            "test result: FAILED. 1 passed; 1 failed"
        ));
    }

    #[test]
    fn the_docker_tar_never_carries_nuvira_state_or_git_at_any_depth() {
        let ws = workspace_with_state();
        for include_ignored in [false, true] {
            let names = tar_names(ws.path(), include_ignored);
            for kept in ["src/a.rs", "vendor/lib/lib.rs", "module/m.rs"] {
                assert!(names.iter().any(|n| n == kept), "{kept} missing: {names:?}");
            }
            let leaked: Vec<_> = names
                .iter()
                .filter(|n| n.split('/').any(|c| c == ".nuvira" || c == ".git"))
                .collect();
            assert!(leaked.is_empty(), "in the tar: {leaked:?}");
        }
    }
}
