//! "Run in progress" markers: `nuvira run` records `.nuvira/running/<run id>` (holding its
//! pid) before any step runs and removes it when the run ends, whatever the outcome. A marker
//! left behind means the process died without finishing (SIGKILL, a crash, a power cut). When
//! the dead run's edits are still in place (it is the journal's last run, not rolled back), the
//! next `nuvira run` or `nuvira apply` says so on stderr, naming the run and the command that
//! undoes it; otherwise the marker is dropped.
//!
//! The folder may have come with a checkout, so a marker is data: a name that is not a plain run
//! id, or anything but a file, is ignored, and only the marker's file name is ever printed.

use nuvira_edit::nuvira_workspace::{Workspace, atomic_write, remove_durably};
use std::path::{Path, PathBuf};

/// The marker folder under `.nuvira/`.
const DIR: &str = "running";

/// The marker of a run that is going on; removed on drop (every way a run can end but a crash).
pub(crate) struct Marker(Option<PathBuf>);

impl Marker {
    /// Records that `run_id` is in progress in `ws`. A marker that cannot be written is a
    /// warning: the run goes on, and only the report after a crash is lost.
    pub(crate) fn record(ws: &Workspace, run_id: &str) -> Self {
        let dir = ws.state_dir().join(DIR);
        let path = dir.join(run_id);
        let written = make_dir(&ws.state_dir())
            .and_then(|()| make_dir(&dir))
            .and_then(|()| {
                atomic_write(
                    &path,
                    std::process::id().to_string().as_bytes(),
                    Some(0o600),
                )
            });
        match written {
            Ok(()) => Self(Some(path)),
            Err(e) => {
                eprintln!(
                    "warning: failed to record the run in {}: {e}; if this process is killed, the next start cannot tell",
                    dir.display()
                );
                Self(None)
            }
        }
    }
}

impl Drop for Marker {
    fn drop(&mut self) {
        if let Some(path) = self.0.take() {
            let _ = remove_durably(&path);
        }
    }
}

/// Reports the runs that were killed after their edits (once each, on stderr), and removes the
/// markers of dead runs that left nothing to undo. `last_run` is the journal's last run (from
/// the command's one read of the journal, [`JournalSnapshot::last_run`]).
///
/// [`JournalSnapshot::last_run`]: nuvira_edit::nuvira_workspace::JournalSnapshot::last_run
pub(crate) fn report_interrupted(ws: &Workspace, repo: &Path, last_run: Option<&str>) {
    let dir = ws.state_dir().join(DIR);
    // A planted symlink (at `.nuvira` or at the folder) is never followed out of the repository.
    if !is_real_dir(&ws.state_dir()) || !is_real_dir(&dir) {
        return;
    }
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    for entry in entries.flatten() {
        let Some(run_id) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if !crate::runs::is_run_id(&run_id) || !entry.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        let pid = std::fs::read_to_string(entry.path())
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok());
        if pid.is_some_and(is_other_live_process) {
            continue; // another run is going on
        }
        if last_run == Some(run_id.as_str()) {
            eprintln!(
                "warning: run {run_id} was interrupted after its edits: `{}` to undo",
                super::apply::rollback_command(repo)
            );
        } else {
            let _ = remove_durably(&entry.path());
        }
    }
}

/// Whether `path` is a folder itself, not a symlink to one.
fn is_real_dir(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir())
}

/// Creates the folder `path` unless it is there; a symlink (or a file) in its place is an error,
/// so nothing is written through it.
fn make_dir(path: &Path) -> std::io::Result<()> {
    match std::fs::create_dir(path) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && !is_real_dir(path) => {
            Err(std::io::Error::other(format!(
                "`{}` is not a folder (a symlink or a file); remove it",
                path.display()
            )))
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        other => other,
    }
}

fn is_other_live_process(pid: u32) -> bool {
    pid != 0
        && pid != std::process::id()
        && cfg!(target_os = "linux")
        && Path::new(&format!("/proc/{pid}")).exists()
}

#[cfg(test)]
mod tests {
    use crate::runs::is_run_id;

    #[test]
    fn only_plain_run_ids_are_markers() {
        assert!(is_run_id("run-1764580000-0a1f"));
        assert!(!is_run_id("run-../../etc"));
        assert!(!is_run_id("apply-1"));
        assert!(!is_run_id("run-\u{1b}[31m"));
    }
}
