//! Keeping the Docker workspace volume a mirror of the workspace: what a run's command wrote in
//! `/workspace` does not reach the next run.
//!
//! The engine's archive upload can add and overwrite, not delete, and it cannot list a volume
//! without sending all its contents. So, with the `nuvira-host` image (whose `/bin/sh` and
//! `find` are this machine's), the command runs under a small `/bin/sh` wrapper
//! ([`wrap`]) that:
//!
//! 1. before the command, deletes what the last run created (a list of `rm -rf` lines the host
//!    uploaded at `/workspace/.nuvira/prune` with the delta, on every tracked run, empty when
//!    nothing is to go, so what is sourced is never a file a run left; `.nuvira` is never part
//!    of the workspace upload), then removes `/workspace/.nuvira`, so the command never sees it;
//! 2. marks the time (a file in `/dev/shm`, then waits for the file system's clock to tick, so
//!    that every change the command makes is strictly newer than the mark: a file touched until
//!    the shell's own `[ -nt ]` sees it newer, with no process started, which compares
//!    nanoseconds in dash since 0.5.11; where it compares seconds, `find -newer` after 2,000
//!    touches);
//! 3. runs the command as a child (in a subshell, with the request's `PATH`: the wrapper's own
//!    tools are looked up on the image's system folders only, [`crate::docker_keep::TOOLS_PATH`])
//!    and keeps its exit status;
//! 4. kills every other process of the run's user and waits for them (nothing of the run writes
//!    in `/workspace` after the listing; a process still there after 1,000 checks and nothing is
//!    listed), removes whatever the command left at `/workspace/.nuvira` and makes it anew, then lists
//!    every entry of `/workspace` (`all`) and those changed since the mark (`newer`;
//!    ctime where `find -cnewer` exists, else mtime; an entry that is not a folder twice, so
//!    that a tracked folder that became a file or link is seen, and a folder followed by its
//!    mode, so that a `chmod` of an uploaded folder is seen), leaving out the build folders the walk
//!    leaves out (`target/`, `node_modules/`: warm caches) and `.nuvira`, into
//!    `/workspace/.nuvira/`, writes them at the end of standard error between markers named
//!    after the container (each list only up to [`INLINE_CAP`], else a marker saying it is in
//!    its file), then exits with the command's status.
//!
//! In a kept container ([`crate::docker_keep`]) the kill spares PID 1 (the keeper, another
//! user's), and the wrapper also empties `/tmp` and `/dev/shm`
//! after it, and writes a report (clean or not, the command's status, the memory cgroup's
//! `oom_kill` count) last on standard error, then exits 0; the prune list is given inline
//! instead of uploaded.
//!
//! After the run the host takes the lists off the end of standard error (the user sees
//! standard error without them; standard error is left whole when they do not parse),
//! downloading a list from the stopped container when it was too long (capped at
//! [`LIST_CAP`]), and compares them with the manifest of what it uploaded ([`reconcile`]):
//! entries the command **created** go into the next run's prune list; a tracked file or link
//! the command **deleted or changed** (still not a folder) gets a record in the manifest that
//! matches nothing, so the next run uploads it again, replacing what is there (or, when the
//! workspace lost it meanwhile, makes the volume again); a tracked folder the command
//! deleted, made another type or whose mode it changed, a tracked file it made a folder, or a
//! list that is missing
//! (the command was killed at its timeout, the wrapper could not finish, a process of the run
//! outlived the kill) marks the volume **dirty**, and the next run makes
//! it again and uploads everything. Without the wrapper (another image, a mount inside
//! `/workspace`) nothing is tracked, and a volume a tracked run used is made again.

use crate::sync::Manifest;
use std::collections::BTreeSet;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};

/// The folder of the wrapper's files inside the workspace volume.
pub(crate) const STATE_DIR: &str = ".nuvira";
/// The file of the next run's prune list in the entry folder (NUL-separated paths); its
/// presence also says that the volume is tracked.
pub(crate) const PRUNE_FILE: &str = "prune";
/// The file that says the volume must be made again.
pub(crate) const DIRTY_FILE: &str = "dirty";
/// The file with the number of uploaded entries the last run changed or deleted, which the
/// next run uploads again (for its note).
pub(crate) const REPAIR_FILE: &str = "repaired";
/// A listing longer than this is not read (the volume is then made again).
pub(crate) const LIST_CAP: usize = 64 << 20;

/// Listings up to this size are sent back at the end of standard error instead of through a
/// download (each download makes the engine mount the container's file system: 60–120 ms).
pub(crate) const INLINE_CAP: usize = 1 << 20;

/// The markers of a run's trailer on standard error: `\0nuvira-<nonce>-<what>\0`.
pub(crate) fn marker(nonce: &str, what: &str) -> Vec<u8> {
    format!("\0nuvira-{nonce}-{what}\0").into_bytes()
}

/// The wrapper's script (`$@` is the command); `build_dirs`: the folder names left out of the
/// listings (empty when the upload includes them); `nonce`: the markers' (`[a-z0-9-]`).
#[cfg(test)]
fn script(build_dirs: &[&str], nonce: &str) -> String {
    script_with(build_dirs, nonce, None, false, false, &[])
}

/// [`script`], with the prune script given inline (`Some`) instead of sourced from the
/// uploaded `$P/prune` (a run in a kept container: no upload at all when nothing changed), and
/// for a run in a kept container (`kept`) the kill right after the command and the cleanup and
/// report at the end (`KILL_ALL`, `SCRATCH`, `OOM`, `STATE` of `docker_keep`); `baseline`: a
/// new kept container's first run, whose wrapper first sends the state (see [`wrap_kept`]);
/// `command_env`: the request's [`COMMAND_ONLY_ENV`] variables (`NAME=value`), exported for
/// the command only.
fn script_with(
    build_dirs: &[&str],
    nonce: &str,
    prune: Option<&str>,
    kept: bool,
    baseline: bool,
    command_env: &[String],
) -> String {
    let exports: String = command_env
        .iter()
        .filter_map(|kv| kv.split_once('='))
        .filter(|(k, _)| is_command_only(k) && is_name(k))
        .map(|(k, v)| {
            format!(
                "export {k}={}; ",
                String::from_utf8_lossy(&quote(v.as_bytes()))
            )
        })
        .collect();
    let skip: String = build_dirs
        .iter()
        .map(|d| format!(" -o \\( -type d -name {d} \\)"))
        .collect();
    let walk = format!("find /workspace -xdev \\( -path \"$P\"{skip} \\) -prune -o");
    let m = |what: &str| format!("printf '\\000nuvira-{nonce}-{what}\\000' >&2");
    let (begin, all, all_file, end) = (m("newer"), m("all"), m("all-file"), m("end"));
    // No listing (the mark gone, the walk failed): said, so that a listing the command
    // printed itself is never the last thing before the report.
    let unlisted = m("unlisted");
    // The `all` marker into a file, so that one `cat` sends `newer`, it and `all`.
    let all_to_m = format!("printf '\\000nuvira-{nonce}-all\\000' > \"$P/m\"");
    let newer_file = m("newer-file");
    // In `newer`, an entry that is not a folder is listed twice (its type, in any `find`).
    // One walk writes both listings (GNU `find` opens a file named by several `-fprint0`s
    // once): each `find` is a fork and a walk of the volume.
    // A folder is followed by its mode (`m` and octal digits: never a path, which starts with
    // `/workspace/`), so that a run's `chmod` of an uploaded folder is seen on any engine.
    let typed = "\\( -type d -fprintf \"$P/newer\" '%p\\0m%m\\0' -o -fprint0 \"$P/newer\" -fprint0 \"$P/newer\" \\)";
    // Every process of the run is killed before the listing (nothing of it writes in
    // `/workspace` after it); in a fresh container the wrapper is PID 1 itself.
    let kill = if kept { KILL_ALL } else { KILL_RUN };
    // In a kept container the `find` of `/workspace` runs in the background while the state
    // outside the file system is read (`STATE`: two processes at once on two cores).
    let newer_c = format!("{walk} -fprint0 \"$P/all\" -cnewer \"$M\" {typed} 2>/dev/null");
    let (walk_start, walk_done, state) = if kept {
        (
            format!("{newer_c} &\n  L=$!"),
            "wait \"$L\"".to_owned(),
            STATE,
        )
    } else {
        ("L=1".to_owned(), newer_c, "")
    };
    // In a kept container the scratch cleanup at the end removes the tick and the mark in
    // `/dev/shm`, and `$P` once its listings were sent whole (`R`): no `rm` of their own.
    // The command sees the tick and the mark in either (no `rm` between them and it).
    let (rm_mark, sent) = if kept {
        ("", " R=\"$P\"")
    } else {
        ("rm -f \"$M\" \"$T\"\n", "")
    };
    // A new container's baseline state, read before the command (in a subshell: the command's
    // arguments stay), sent before the report.
    // A new container's baseline state, read and sent first of all (before the prune and the
    // command: nothing of the run can have written it, nor anything before it on standard
    // error), in a subshell (the command's arguments stay).
    let read_base = if kept && baseline {
        format!(
            "B=$(\n{STATE}printf '%s' \"$S\"\n)\nprintf '\\000nuvira-{nonce}-base\\000%s\\000' \"$B\" >&2\n"
        )
    } else {
        String::new()
    };
    let end_kept = if kept {
        format!(
            "{SCRATCH}{OOM}printf '\\000nuvira-{nonce}-kept\\000%s %s %s %s\\n%s\\000' \"$K\" \"$s\" \"${{o:-?}}\" \"${{q:-?}}\" \"$S\" >&2\ns=0\n"
        )
    } else {
        String::new()
    };
    let prune = match prune {
        // Never a file in the volume: what a run left there is not ours to run.
        Some(inline) => inline.to_owned(),
        None => "[ -f \"$P/prune\" ] && . \"$P/prune\"\n".to_owned(),
    };
    format!(
        r#"W=${{PATH-}}; w=${{PATH+1}}
{TOOLS_PATH}{read_base}P=/workspace/{STATE_DIR}; M=/dev/shm/.nuvira-mark; T=/dev/shm/.nuvira-tick
R=
{prune}if [ -e "$P" ] || [ -L "$P" ]; then rm -rf "$P"; fi
: > "$M"; : > "$T"; i=0
while [ $i -lt 2000 ] && ! [ "$T" -nt "$M" ]; do echo >> "$T"; i=$((i+1)); done
i=0
while [ $i -lt 5000 ] && ! [ "$T" -nt "$M" ] && [ -z "$(find "$T" -newer "$M" 2>/dev/null)" ]; do echo >> "$T"; i=$((i+1)); done
( if [ -n "$w" ]; then PATH=$W; else unset PATH; fi; {exports}"$@" )
s=$?
{kill}if [ -e "$P" ] || [ -L "$P" ]; then rm -rf "$P" 2>/dev/null; fi
L=
if [ "$K" != left ] && [ -f "$M" ] && mkdir "$P" 2>/dev/null; then
  {walk_start}
fi
{state}if [ -n "$L" ]; then
  if {walk_done} || {{ rm -f "$P/all" "$P/newer"; {walk} -fprint0 "$P/all" -newer "$M" {typed} 2>/dev/null; }}; then
    set -- $(stat -c %s "$P/newer" "$P/all" 2>/dev/null)
    if [ "${{1:-x}}" -le {INLINE_CAP} ] 2>/dev/null && [ "${{2:-x}}" -le {INLINE_CAP} ] 2>/dev/null; then
      {all_to_m}; {begin}; cat "$P/newer" "$P/m" "$P/all" >&2;{sent}
    else
      {begin}; if [ "${{1:-x}}" -le {INLINE_CAP} ] 2>/dev/null; then cat "$P/newer" >&2; else {newer_file}; fi
      if [ "${{2:-x}}" -le {INLINE_CAP} ] 2>/dev/null; then {all}; cat "$P/all" >&2; else {all_file}; fi
    fi
    {end}
  else
    {unlisted}
  fi
else
  {unlisted}
fi
{rm_mark}{end_kept}exit $s
"#
    )
}

// In a kept container the wrapper kills every process of the run right after the command
// (`KILL_ALL`: before the listing, so nothing of the run changes the workspace after it or
// writes anywhere after the cleanup), reads the state outside the file system (`STATE`) while
// the listing's `find` runs in the background, then empties the scratch folders (`SCRATCH`),
// reads the `oom_kill` count (`OOM`), then writes the report `\0nuvira-<nonce>-kept\0K STATUS OOM PIDS\nSTATE\0` last on
// standard error and exits 0 (the engine's exit code of the exec says the wrapper ran to its
// end: a run that kills it gets another; the command's status is in the report). A new
// container's first wrapper also writes `\0nuvira-<nonce>-base\0STATE\0` first of all.
use crate::docker_keep::{KILL_ALL, KILL_RUN, OOM, SCRATCH, STATE, TOOLS_PATH};

/// What the wrapper of a run in a kept container reported at its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeptReport {
    /// Every other process was gone and the scratch folders empty.
    pub(crate) clean: bool,
    /// Every other process was gone before the listing (the listings may be trusted).
    pub(crate) killed: bool,
    /// The host saw processes of the run left after the wrapper ended (whatever it reported).
    pub(crate) survivors: bool,
    /// The command's exit status.
    pub(crate) status: i64,
    /// The memory cgroup's `oom_kill` count (`None`: unknown).
    pub(crate) oom: Option<u64>,
    /// The pids cgroup's count of refused forks (`None`: unknown).
    pub(crate) pids: Option<u64>,
    /// The container's state outside its file system (`docker_keep::STATE`).
    pub(crate) state: String,
    /// A new container's state before the command (the start of standard error), when asked
    /// for.
    pub(crate) base: Option<String>,
}

/// Parses the report (what followed the `kept` marker: `K STATUS OOM PIDS\nSTATE\0`; the state
/// names files the run made, so it is compared as it is, not parsed).
pub(crate) fn parse_kept(trailer: &[u8]) -> Option<KeptReport> {
    let body = trailer.strip_suffix(b"\0")?;
    let nl = body.iter().position(|&b| b == b'\n')?;
    let text = std::str::from_utf8(&body[..nl]).ok()?;
    let state = String::from_utf8_lossy(&body[nl + 1..]).into_owned();
    let mut parts = text.split(' ');
    let (k, status, oom, pids) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    Some(KeptReport {
        clean: k == "ok",
        killed: k != "left",
        survivors: false,
        status: status.parse().ok()?,
        oom: oom.parse().ok(),
        pids: pids.parse().ok(),
        state,
        base: None,
    })
}

/// Where one of the run's listings is.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Listing {
    /// In the trailer.
    Inline(Vec<u8>),
    /// Too long for it: in `/workspace/.nuvira/` (`newer`, `all`).
    File,
}

/// The listings of a run's trailer (what followed the `newer` marker on standard error): `newer`
/// and `all`, or `None` when it is not whole.
pub(crate) fn parse_trailer(trailer: &[u8], nonce: &str) -> Option<(Listing, Listing)> {
    let end = marker(nonce, "end");
    let body = trailer.strip_suffix(end.as_slice())?;
    let find = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).position(|w| w == needle);
    let newer_file = marker(nonce, "newer-file");
    let (newer_is_file, body) = match body.strip_prefix(newer_file.as_slice()) {
        Some(rest) => (true, rest),
        None => (false, body),
    };
    let newer = |inline: &[u8]| {
        if newer_is_file {
            inline.is_empty().then_some(Listing::File)
        } else {
            Some(Listing::Inline(inline.to_vec()))
        }
    };
    let all_file = marker(nonce, "all-file");
    if let Some(i) = find(body, &all_file)
        && i + all_file.len() == body.len()
    {
        return Some((newer(&body[..i])?, Listing::File));
    }
    let all = marker(nonce, "all");
    let i = find(body, &all)?;
    Some((
        newer(&body[..i])?,
        Listing::Inline(body[i + all.len()..].to_vec()),
    ))
}

/// Variables that make the dynamic loader, the C library or a shell load or read files they
/// name or run code: every `LD_*` and `LC_*`, the rest of glibc's list of those it ignores for
/// set-user-id programs, `GLIBC_TUNABLES`, `LANG`, `LANGUAGE`, `TZ`, the shells' start-up files
/// and bash's `PS4` (run at every command under `xtrace`). A tracked run's container never has them
/// (a run could point them at a file it writes, e.g. `LD_PRELOAD=/workspace/x.so`, and have its
/// code run in the wrapper's tools after the kill, or in a kept container's PID 1): they are
/// taken out of the container's environment ([`take_command_env`]) and exported by the wrapper
/// for the command alone.
pub(crate) const COMMAND_ONLY_ENV: &[&str] = &[
    "GCONV_PATH",
    "GETCONF_DIR",
    "HOSTALIASES",
    "LOCALDOMAIN",
    "LOCPATH",
    "MALLOC_TRACE",
    "NIS_PATH",
    "NLSPATH",
    "RESOLV_HOST_CONF",
    "RES_OPTIONS",
    "TZDIR",
    "TMPDIR",
    "GLIBC_TUNABLES",
    "LANG",
    "LANGUAGE",
    "TZ",
    "ENV",
    "BASH_ENV",
    "PS4",
];

/// Variables a `/bin/sh` that is bash reads from its environment to change how it runs
/// (functions it defines, options such as `xtrace`): never in a tracked run's container, nor
/// given to its command (bash cannot export them back: `SHELLOPTS` is read-only, and the
/// functions' names are not shell names).
pub(crate) const DROPPED_ENV: &[&str] = &["SHELLOPTS", "BASHOPTS"];

fn is_command_only(name: &str) -> bool {
    name.starts_with("LD_") || name.starts_with("LC_") || COMMAND_ONLY_ENV.contains(&name)
}

fn is_dropped(name: &str) -> bool {
    name.starts_with("BASH_FUNC_") || DROPPED_ENV.contains(&name)
}

/// A shell variable name (anything else cannot be exported by the wrapper).
fn is_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

/// Takes the [`COMMAND_ONLY_ENV`] variables out of a container's environment (`NAME=value`
/// entries) and returns them, for [`wrap`] and [`wrap_kept`] to give to the command; drops the
/// [`DROPPED_ENV`] ones and bash's exported functions (`BASH_FUNC_*`). One whose name the shell
/// cannot export is dropped too.
pub(crate) fn take_command_env(env: &mut Option<Vec<String>>) -> Vec<String> {
    let Some(env) = env.as_mut() else {
        return Vec::new();
    };
    let name = |kv: &str| kv.split_once('=').map_or(kv, |(k, _)| k).to_owned();
    env.retain(|kv| !is_dropped(&name(kv)));
    let (taken, kept): (Vec<String>, Vec<String>) = std::mem::take(env)
        .into_iter()
        .partition(|kv| is_command_only(&name(kv)));
    *env = kept;
    taken
}

/// The command wrapped ([module docs](self)), with `command_env` ([`take_command_env`])
/// exported for it alone.
pub(crate) fn wrap(
    command: &[String],
    skip_build_dirs: bool,
    nonce: &str,
    command_env: &[String],
) -> Vec<String> {
    let dirs: &[&str] = if skip_build_dirs {
        nuvira_workspace::walk::BUILD_DIRS
    } else {
        &[]
    };
    let mut out = vec![
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        script_with(dirs, nonce, None, false, false, command_env),
        "nuvira-sandbox".to_owned(),
    ];
    out.extend(command.iter().cloned());
    out
}

/// The largest prune script given inline ([`wrap_kept`]); a longer one is uploaded.
pub(crate) const INLINE_PRUNE_CAP: usize = 64 * 1024;

/// [`wrap`], for a command run as an exec in a kept container (the kill and cleanup at its end,
/// see [`script_with`]), with the prune script inline (`Some`: UTF-8, at most [`INLINE_PRUNE_CAP`]): the
/// last run's created entries go without an upload.
///
/// `baseline`: the container is new, and the wrapper first of all reads its state outside the
/// file system and sends it at the very start of standard error (`\0nuvira-<nonce>-base\0`, the
/// text, `\0`): the baseline the report's state is compared with, read before any process of
/// the run exists, without an exec of its own.
pub(crate) fn wrap_kept(
    command: &[String],
    skip_build_dirs: bool,
    nonce: &str,
    prune: Option<&str>,
    baseline: bool,
    command_env: &[String],
) -> Vec<String> {
    let dirs: &[&str] = if skip_build_dirs {
        nuvira_workspace::walk::BUILD_DIRS
    } else {
        &[]
    };
    let mut out = vec![
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        script_with(dirs, nonce, prune, true, baseline, command_env),
        "nuvira-sandbox".to_owned(),
    ];
    out.extend(command.iter().cloned());
    out
}

/// The prune script for `paths` (workspace-relative): one `rm -rf` per path, each quoted for
/// `sh` whatever bytes it holds, and run only when the path's parent resolves to itself (no
/// symbolic link on the way: a run may have swapped a folder of a listed path for a link into a
/// cache volume, and `rm` would delete through it).
pub(crate) fn prune_script(paths: &[PathBuf]) -> Vec<u8> {
    prune_script_in(b"/workspace", paths)
}

/// [`prune_script`] for the folder `root` (absolute, without links).
fn prune_script_in(root: &[u8], paths: &[PathBuf]) -> Vec<u8> {
    if paths.is_empty() {
        return Vec::new();
    }
    // `$(...)` drops trailing newlines: `pwd -P` is followed by a line of its own, so a folder
    // whose name ends in a newline is compared whole.
    let mut out = b"N='\n'\n".to_vec();
    for p in paths {
        let mut full = root.to_vec();
        full.push(b'/');
        full.extend_from_slice(p.as_os_str().as_bytes());
        let mut parent = root.to_vec();
        if let Some(up) = p.parent().filter(|up| !up.as_os_str().is_empty()) {
            parent.push(b'/');
            parent.extend_from_slice(up.as_os_str().as_bytes());
        }
        out.extend_from_slice(b"d=");
        out.extend(quote(&parent));
        out.extend_from_slice(
            b"; [ \"$(cd -P -- \"$d\" 2>/dev/null && pwd -P && echo x)\" = \"$d${N}x\" ] && rm -rf -- ",
        );
        out.extend(quote(&full));
        out.push(b'\n');
    }
    out
}

/// `bytes` quoted for `sh`, whatever they hold.
fn quote(bytes: &[u8]) -> Vec<u8> {
    let mut out = vec![b'\''];
    for &b in bytes {
        if b == b'\'' {
            out.extend_from_slice(b"'\\''");
        } else {
            out.push(b);
        }
    }
    out.push(b'\'');
    out
}

/// The workspace-relative paths of a NUL-separated listing of `/workspace/...` paths; entries
/// that are not below `/workspace` or not plain relative paths are left out (the listing was
/// written by the run, so it is not trusted).
fn parse_list(bytes: &[u8]) -> BTreeSet<PathBuf> {
    bytes
        .split(|&b| b == 0)
        .filter_map(|p| p.strip_prefix(b"/workspace/"))
        .map(|p| PathBuf::from(std::ffi::OsString::from_vec(p.to_vec())))
        .filter(|p| {
            !p.as_os_str().is_empty() && p.components().all(|c| matches!(c, Component::Normal(_)))
        })
        .collect()
}

/// What the run left, against what was uploaded.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct After {
    /// The volume no longer mirrors the upload in a way a prune or a new upload can undo: make
    /// it again.
    pub(crate) dirty: bool,
    /// The topmost entries the run created, to delete before the next run's command.
    pub(crate) prune: Vec<PathBuf>,
    /// Uploaded files and links the run changed (or made another file type, not a folder) or
    /// deleted, in folders it left folders: uploaded again by the next run (their records match
    /// nothing), which replaces what is there.
    pub(crate) repair: Vec<PathBuf>,
}

/// A `newer` listing, read in one pass: the entries that are not folders (listed twice in a
/// row), and the folders with their modes (each is followed by `m` and its mode in octal; a
/// folder without a readable mode gets `None`).
fn parse_newer(bytes: &[u8]) -> (BTreeSet<PathBuf>, Vec<(PathBuf, Option<u32>)>) {
    let (mut not_dirs, mut folders) = (BTreeSet::new(), Vec::new());
    let mut records = bytes.split(|&b| b == 0).peekable();
    while let Some(r) = records.next() {
        if records.peek() == Some(&r) {
            records.next();
            not_dirs.extend(parse_list(r));
            continue;
        }
        let mode = match records.peek() {
            Some(next) if next.first() == Some(&b'm') => {
                let digits = &next[1..];
                records.next();
                std::str::from_utf8(digits)
                    .ok()
                    .filter(|d| !d.is_empty() && d.len() <= 5)
                    .and_then(|d| u32::from_str_radix(d, 8).ok())
            }
            _ => None,
        };
        if let Some(path) = parse_list(r).pop_first() {
            folders.push((path, mode));
        }
    }
    (not_dirs, folders)
}

/// Compares the run's listings (`None`: missing) with the manifest of the upload.
pub(crate) fn reconcile(manifest: &Manifest, all: Option<&[u8]>, newer: Option<&[u8]>) -> After {
    let (Some(all), Some(newer)) = (all, newer) else {
        return After {
            dirty: true,
            ..After::default()
        };
    };
    let (not_dirs, folders) = parse_newer(newer);
    let all = parse_list(all);
    // Tracked files and links gone or changed (still not folders) are uploaded again.
    let mut repair: BTreeSet<PathBuf> = manifest
        .paths()
        .filter(|&(p, k)| k != b'd' && !all.contains(p))
        .map(|(p, _)| p.to_path_buf())
        .collect();
    repair.extend(
        not_dirs
            .iter()
            .filter(|p| manifest.kind_of(p).is_some_and(|k| k != b'd'))
            .cloned(),
    );
    // A tracked folder gone, or that is no longer one, or whose mode is no longer the uploaded
    // one (or unknown), or a tracked file or link that became a folder: not undone by a prune
    // or an upload.
    let dirty = manifest.paths().any(|(p, k)| k == b'd' && !all.contains(p))
        || not_dirs.iter().any(|p| manifest.kind_of(p) == Some(b'd'))
        || folders.iter().any(|(p, mode)| match manifest.kind_of(p) {
            Some(b'd') => mode.is_none() || *mode != manifest.mode_of(p),
            Some(_) => !not_dirs.contains(p),
            None => false,
        });
    let mut prune: Vec<PathBuf> = Vec::new();
    for p in &all {
        if manifest.kind_of(p).is_some() {
            continue;
        }
        // Sorted: a created folder comes before what is in it, which goes with it.
        if prune.last().is_some_and(|top| p.starts_with(top)) {
            continue;
        }
        prune.push(p.clone());
    }
    After {
        dirty,
        prune,
        repair: repair.into_iter().collect(),
    }
}

/// Reads the prune list an earlier run left in the entry folder (`None`: none, the volume was
/// not tracked).
pub(crate) fn load_prune(entry: &Path) -> Option<Vec<PathBuf>> {
    let bytes = std::fs::read(entry.join(PRUNE_FILE)).ok()?;
    Some(parse_rel(&bytes))
}

fn parse_rel(bytes: &[u8]) -> Vec<PathBuf> {
    bytes
        .split(|&b| b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| PathBuf::from(std::ffi::OsString::from_vec(p.to_vec())))
        .filter(|p| p.components().all(|c| matches!(c, Component::Normal(_))))
        .collect()
}

/// Records what the next run must do with the volume (in the entry folder).
pub(crate) fn save(entry: &Path, after: &After) {
    let _ = std::fs::remove_file(entry.join(REPAIR_FILE));
    if !after.dirty && !after.repair.is_empty() {
        let _ = std::fs::write(entry.join(REPAIR_FILE), after.repair.len().to_string());
    }
    let result = if after.dirty {
        let _ = std::fs::remove_file(entry.join(PRUNE_FILE));
        std::fs::write(entry.join(DIRTY_FILE), b"")
    } else {
        let mut bytes = Vec::new();
        for p in &after.prune {
            bytes.extend_from_slice(p.as_os_str().as_bytes());
            bytes.push(0);
        }
        std::fs::write(entry.join(PRUNE_FILE), bytes)
    };
    if let Err(e) = result {
        // Without the record the next run cannot trust the volume: the manifest goes too.
        tracing::warn!("the next run will make the workspace volume again: {e}");
        let _ = std::fs::remove_file(entry.join(crate::docker_cache::VOLUME_MANIFEST));
        let _ = std::fs::write(entry.join(DIRTY_FILE), b"");
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn manifest_of(root: &Path) -> Manifest {
        crate::sync::plan_delta(root, crate::walk_options(false), &Manifest::default())
            .unwrap()
            .manifest
    }

    fn list(paths: &[&str]) -> Vec<u8> {
        let mut out = Vec::new();
        for p in paths {
            out.extend_from_slice(format!("/workspace/{p}").as_bytes());
            out.push(0);
        }
        out
    }

    /// A `newer` listing as the wrapper writes it: a folder (`Some(mode)`) followed by its
    /// mode, anything else twice.
    fn newer(entries: &[(&str, Option<u32>)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (p, mode) in entries {
            let path = format!("/workspace/{p}\0");
            out.extend_from_slice(path.as_bytes());
            match mode {
                Some(mode) => out.extend_from_slice(format!("m{mode:o}\0").as_bytes()),
                None => out.extend_from_slice(path.as_bytes()),
            }
        }
        out
    }

    #[test]
    fn created_entries_are_pruned_topmost_and_changed_tracked_ones_make_it_dirty() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("src")).unwrap();
        std::fs::write(dir.path().join("src/a.rs"), "a").unwrap();
        let m = manifest_of(dir.path());
        let all = list(&["src", "src/a.rs", "out", "out/x", "out/y/z", "src/new.txt"]);
        let src = m.mode_of(Path::new("src")).unwrap();
        // `src` changed (an entry was created in it), its mode the uploaded one: a folder, so
        // not dirty.
        let touched = newer(&[
            ("src", Some(src)),
            ("out", Some(0o700)),
            ("src/new.txt", None),
        ]);
        let after = reconcile(&m, Some(&all), Some(&touched));
        assert_eq!(
            after,
            After {
                dirty: false,
                prune: vec![PathBuf::from("out"), PathBuf::from("src/new.txt")],
                repair: Vec::new(),
            }
        );
        // Before: a run's `chmod` of an uploaded folder was not seen (on a remote engine).
        let chmodded = newer(&[("src", Some(src ^ 0o077))]);
        assert!(reconcile(&m, Some(&all), Some(&chmodded)).dirty);
        // An uploaded folder listed without its mode (a listing not the wrapper's): dirty.
        assert!(reconcile(&m, Some(&all), Some(&list(&["src"]))).dirty);
        let bad = b"/workspace/src\0m9z\0".to_vec();
        assert!(reconcile(&m, Some(&all), Some(&bad)).dirty);
        // Before: a tracked file changed or deleted made the volume again. Now it is uploaded
        // again (a file or link of the run's in its place is replaced by the upload).
        let put_back = |a: After| (a.dirty, a.repair);
        let a_rs = vec![PathBuf::from("src/a.rs")];
        let changed = newer(&[("src", Some(src)), ("src/a.rs", None)]);
        assert_eq!(
            put_back(reconcile(&m, Some(&all), Some(&changed))),
            (false, a_rs.clone())
        );
        assert_eq!(
            put_back(reconcile(&m, Some(&list(&["src"])), Some(&[]))),
            (false, a_rs.clone())
        );
        // A tracked file that became a folder, a tracked folder gone, or no listing: dirty.
        let foldered = newer(&[("src/a.rs", Some(0o755))]);
        assert!(reconcile(&m, Some(&all), Some(&foldered)).dirty);
        assert!(reconcile(&m, Some(&list(&["src/a.rs"])), Some(&[])).dirty);
        assert!(reconcile(&m, None, Some(&[])).dirty);
        // Before: a tracked (empty) folder that became a file or link was not seen.
        std::fs::create_dir_all(dir.path().join("empty")).unwrap();
        let m = manifest_of(dir.path());
        let all = list(&["src", "src/a.rs", "empty"]);
        let empty = m.mode_of(Path::new("empty")).unwrap();
        assert!(!reconcile(&m, Some(&all), Some(&newer(&[("empty", Some(empty))]))).dirty);
        assert!(reconcile(&m, Some(&all), Some(&newer(&[("empty", None)]))).dirty);
        // Paths outside the workspace in a hostile listing are ignored.
        let hostile = list(&["src", "src/a.rs", "../etc"]);
        let mut bytes = hostile.clone();
        bytes.extend_from_slice(b"/etc/passwd\0");
        assert!(reconcile(&m, Some(&bytes), Some(&[])).prune.is_empty());
    }

    #[test]
    fn loader_variables_leave_the_container_and_are_exported_for_the_command_alone() {
        let mut env = Some(vec![
            "PATH=/usr/bin".to_owned(),
            "LD_PRELOAD=/workspace/x.so".to_owned(),
            "LD_LIBRARY_PATH=:/opt/it's".to_owned(),
            "BASH_ENV=/workspace/rc".to_owned(),
            "PYTHONPATH=/workspace/src".to_owned(),
            "LD_BAD-NAME=1".to_owned(),
            "BASH_FUNC_find%%=() { :; }".to_owned(),
            "SHELLOPTS=xtrace".to_owned(),
            "LC_ALL=/workspace/locale".to_owned(),
        ]);
        let taken = take_command_env(&mut env);
        assert_eq!(
            env.unwrap(),
            ["PATH=/usr/bin", "PYTHONPATH=/workspace/src"],
            "what stays in the container's environment"
        );
        assert_eq!(taken.len(), 5, "{taken:?}");
        assert!(
            !taken
                .iter()
                .any(|kv| kv.starts_with("BASH_FUNC") || kv.starts_with("SHELLOPTS")),
            "{taken:?}"
        );
        let s = script_with(&[], "n", None, true, false, &taken);
        // Inside the command's subshell, quoted; a name the shell cannot export is dropped.
        assert!(
            s.contains("fi; export LD_PRELOAD='/workspace/x.so'; export LD_LIBRARY_PATH=':/opt/it'\\''s'; export BASH_ENV='/workspace/rc'; export LC_ALL='/workspace/locale'; \"$@\" )"),
            "{s}"
        );
        assert!(!s.contains("LD_BAD"), "{s}");
    }

    #[test]
    fn a_trailer_is_parsed_only_when_whole() {
        let n = "nuvira-sandbox-1-2-ab";
        let mut t = b"a\0b\0".to_vec();
        t.extend(marker(n, "all"));
        t.extend(b"a\0b\0c\0");
        t.extend(marker(n, "end"));
        assert_eq!(
            parse_trailer(&t, n),
            Some((
                Listing::Inline(b"a\0b\0".to_vec()),
                Listing::Inline(b"a\0b\0c\0".to_vec())
            ))
        );
        assert_eq!(parse_trailer(&t[..t.len() - 1], n), None);
        let mut f = b"x\0".to_vec();
        f.extend(marker(n, "all-file"));
        f.extend(marker(n, "end"));
        assert_eq!(
            parse_trailer(&f, n),
            Some((Listing::Inline(b"x\0".to_vec()), Listing::File))
        );
        // Before: `newer` had no cap (a long one pushed the markers out of the tail kept).
        let mut both = marker(n, "newer-file");
        both.extend(marker(n, "all-file"));
        both.extend(marker(n, "end"));
        assert_eq!(
            parse_trailer(&both, n),
            Some((Listing::File, Listing::File))
        );
        let mut bad = marker(n, "newer-file");
        bad.extend(b"x\0");
        bad.extend(marker(n, "all-file"));
        bad.extend(marker(n, "end"));
        assert_eq!(parse_trailer(&bad, n), None);
        // Another run's markers do not count.
        assert_eq!(parse_trailer(&t, "nuvira-sandbox-1-3-ab"), None);
    }

    #[test]
    fn a_long_newer_listing_goes_through_its_file() {
        // The wrapper caps `newer` as it caps `all`.
        let s = script(&[], "n");
        assert!(s.contains(
            "-le 1048576 ] 2>/dev/null; then cat \"$P/newer\" >&2; else printf '\\000nuvira-n-newer-file\\000' >&2; fi"
        ), "{s}");
        // Both short: one `cat` of `newer`, the `all` marker and `all`, after one walk.
        assert!(
            s.contains("cat \"$P/newer\" \"$P/m\" \"$P/all\" >&2"),
            "{s}"
        );
        assert_eq!(s.matches("-fprint0 \"$P/all\" -cnewer").count(), 1, "{s}");
    }

    #[test]
    fn an_inline_prune_is_run_and_no_file_of_the_volume_is_sourced() {
        let inline = script_with(
            &[],
            "n",
            Some("rm -rf -- '/workspace/x'\n"),
            true,
            false,
            &[],
        );
        assert!(
            inline.contains("rm -rf -- '/workspace/x'\nif [ -e \"$P\" ] || [ -L \"$P\" ]; then rm -rf \"$P\"; fi"),
            "{inline}"
        );
        assert!(!inline.contains(". \"$P/prune\""), "{inline}");
        let empty = script_with(&[], "n", Some(""), true, false, &[]);
        assert!(
            empty.contains("kill -9 -1") && empty.contains("nuvira-n-kept"),
            "{empty}"
        );
        // A fresh container's wrapper (PID 1 itself) kills the run's processes too, before the
        // listing, without the look at PID 1's owner.
        let fresh = script(&[], "n");
        let killed = fresh.find("kill -9 -1").unwrap();
        assert!(killed < fresh.find("find /workspace").unwrap(), "{fresh}");
        assert!(!fresh.contains("[ -O /proc/1 ]"), "{fresh}");
        // A new container's wrapper sends its baseline state first of all, before the prune.
        let first = script_with(
            &[],
            "n",
            Some("rm -rf -- '/workspace/x'\n"),
            true,
            true,
            &[],
        );
        let sent = first
            .find("printf '\\000nuvira-n-base\\000%s\\000' \"$B\" >&2")
            .unwrap();
        assert!(
            first.starts_with(&format!("W=${{PATH-}}; w=${{PATH+1}}\n{TOOLS_PATH}B=$(\n")),
            "{first}"
        );
        assert!(
            sent < first.find("rm -rf -- '/workspace/x'").unwrap(),
            "{first}"
        );
        assert!(!empty.contains("nuvira-n-base"), "{empty}");
        assert_eq!(
            parse_kept(b"ok 3 2 5\n/etc/hosts 81a4 0 0 174 1\nipc shm 1\0"),
            Some(KeptReport {
                clean: true,
                killed: true,
                survivors: false,
                status: 3,
                oom: Some(2),
                pids: Some(5),
                state: "/etc/hosts 81a4 0 0 174 1\nipc shm 1".into(),
                base: None,
            })
        );
        assert_eq!(
            parse_kept(b"left 0 ? ?\n\0").map(|r| (r.clean, r.killed, r.oom, r.pids)),
            Some((false, false, None, None))
        );
        // Scratch not emptied: not clean, but the processes were gone before the listing.
        assert_eq!(
            parse_kept(b"scratch 0 1 0\n\0").map(|r| (r.clean, r.killed)),
            Some((false, true))
        );
        // A file name that is not UTF-8 is kept (lossily) in the state, not a lost report.
        assert!(parse_kept(b"ok 0 1 0\n/dev/\xff 81a4\0").is_some());
        assert_eq!(parse_kept(b"ok 0 1 0\n"), None);
        assert_eq!(parse_kept(b"ok 0 1 0\0"), None, "no state line");
        assert_eq!(parse_kept(b"ok x 1 0\n\0"), None);
        assert_eq!(parse_kept(b"ok 0 1\n\0"), None, "no pids count");
        assert!(!empty.contains("$P/prune"), "{empty}");
        assert!(
            script(&[], "n").contains("[ -f \"$P/prune\" ] && . \"$P/prune\"\nif [ -e \"$P\" ]")
        );
    }

    #[test]
    fn the_prune_script_quotes_every_name() {
        assert_eq!(quote(b"it's $(x) `y`\nz"), b"'it'\\''s $(x) `y`\nz'");
        let s = prune_script(&[PathBuf::from("it's $(x) `y`\nz")]);
        assert_eq!(
            String::from_utf8(s).unwrap(),
            "N='\n'\nd='/workspace'; [ \"$(cd -P -- \"$d\" 2>/dev/null && pwd -P && echo x)\" \
             = \"$d${N}x\" ] && rm -rf -- '/workspace/it'\\''s $(x) `y`\nz'\n"
        );
        assert!(prune_script(&[]).is_empty());
    }

    // Before: `rm -rf -- '/workspace/a/b'` deleted `b` in whatever folder the link `a` led to.
    #[test]
    fn the_prune_script_deletes_nothing_through_a_symbolic_link() {
        use std::os::unix::fs::symlink;
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let (ws, outside) = (base.join("ws"), base.join("outside"));
        std::fs::create_dir_all(outside.join("deep")).unwrap();
        std::fs::write(outside.join("b"), "keep").unwrap();
        std::fs::write(outside.join("deep/b"), "keep").unwrap();
        std::fs::create_dir_all(ws.join("real/sub")).unwrap();
        std::fs::create_dir_all(ws.join("m\n")).unwrap();
        std::fs::write(ws.join("real/sub/c"), "c").unwrap();
        std::fs::write(ws.join("m\n/f"), "f").unwrap();
        std::fs::write(ws.join("it's $(x)\nz"), "q").unwrap();
        symlink(&outside, ws.join("a")).unwrap();
        symlink(&outside, ws.join("n\n")).unwrap();
        symlink(&outside, ws.join("real/l")).unwrap();
        let paths: Vec<PathBuf> = [
            "a/b",
            "a/deep",
            "n\n/b",
            "real/l/b",
            "real/sub/c",
            "m\n/f",
            "it's $(x)\nz",
            "lnk-itself",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        symlink(&outside, ws.join("lnk-itself")).unwrap();
        let script = prune_script_in(ws.as_os_str().as_bytes(), &paths);
        let status = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(std::ffi::OsStr::from_bytes(&script))
            .status()
            .unwrap();
        assert!(status.success() || status.code().is_some());
        // Nothing behind a link went; what was listed in real folders did (a link itself too).
        assert!(outside.join("b").exists() && outside.join("deep/b").exists());
        assert!(!ws.join("real/sub/c").exists());
        assert!(!ws.join("m\n/f").exists());
        assert!(!ws.join("it's $(x)\nz").exists());
        assert!(std::fs::symlink_metadata(ws.join("lnk-itself")).is_err());
        assert!(ws.join("a").exists() && ws.join("real/sub").exists());
    }
}
