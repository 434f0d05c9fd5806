//! Git around `nuvira run`: before it, the dirty-tree refusal (`--allow-dirty`) and the branch
//! (`--branch NAME [--base REF]`); after a successful run, the commit of exactly the files the
//! run wrote (`--commit [--sign] [--author 'Name <email>']`). The commit is recorded in
//! `.nuvira/git/commits/<run id>`, so `nuvira rollback` can say to `git revert` it instead.

use crate::cli::esc;
use nuvira_api::ExecutionReport;
use nuvira_git::{CommitOptions, Repo};
use std::path::{Path, PathBuf};

/// The git flags of `nuvira run`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct GitArgs {
    /// Start the run even when the repository has uncommitted changes (they are listed).
    /// `.nuvira/` (Nuvira's own state) never counts.
    #[arg(long)]
    pub allow_dirty: bool,
    /// Create this branch from HEAD (or --base) and check it out before the run.
    #[arg(long, value_name = "NAME", conflicts_with = "scratch")]
    pub branch: Option<String>,
    /// The commit, branch or tag the new --branch starts from, and that inspect compares the
    /// branch with to rank its changed files first [default: origin/HEAD, else main/master].
    #[arg(long, value_name = "REF")]
    pub base: Option<String>,
    /// After a successful run, commit exactly the files it wrote (never other changes, even
    /// staged ones), with a message built from the report and a `Nuvira-Run: <id>` trailer.
    #[arg(long, conflicts_with_all = ["dry_run", "scratch"])]
    pub commit: bool,
    /// Sign the commit with your git signing configuration (`git commit-tree -S`).
    #[arg(long, requires = "commit")]
    pub sign: bool,
    /// The commit's author, `Name <email>` [default: git config user.name and user.email].
    #[arg(long, value_name = "NAME <EMAIL>", requires = "commit")]
    pub author: Option<String>,
}

/// The repository a run works in, and where the run's folder is inside it.
pub struct GitRun {
    repo: Repo,
    /// The workspace folder relative to the repository root (`""` at the root), `/`-separated.
    prefix: String,
}

/// Why the run must not start: exit code 2 (a bad flag or branch) or 3 (the tree is dirty, or
/// the repository cannot be read).
pub struct Refusal {
    /// The exit code.
    pub code: u8,
    /// The `--format json` kind.
    pub kind: &'static str,
    /// The message.
    pub message: String,
}

fn refuse(code: u8, kind: &'static str, message: impl Into<String>) -> Refusal {
    Refusal {
        code,
        kind,
        message: message.into(),
    }
}

/// Before a run that may write (not a dry run, not a scratch copy): finds the repository,
/// refuses a dirty working tree without `--allow-dirty` (only changes inside the run's folder
/// count), and creates and checks out `--branch`. `None` outside a git repository, which is
/// fine unless a git flag needs one.
///
/// # Errors
/// A [`Refusal`] naming the dirty files (escaped) or the git problem.
pub fn prepare(args: &GitArgs, workspace: &Path, writes: bool) -> Result<Option<GitRun>, Refusal> {
    let needs_repo = args.branch.is_some() || args.commit;
    let repo = match Repo::discover(workspace) {
        Ok(Some(r)) => r,
        Ok(None) if needs_repo => {
            return Err(refuse(
                crate::exit::INVALID,
                "repository",
                format!(
                    "--branch and --commit need a git repository, and `{}` is in none; run `git init` there first",
                    workspace.display()
                ),
            ));
        }
        Ok(None) => return Ok(None),
        Err(e) => {
            return Err(refuse(
                crate::exit::ENVIRONMENT,
                "repository",
                e.to_string(),
            ));
        }
    };
    let prefix = prefix_of(repo.root(), workspace);
    if writes && !args.allow_dirty {
        let dirty = repo
            .dirty_files()
            .map_err(|e| refuse(crate::exit::ENVIRONMENT, "repository", e.to_string()))?;
        let inside: Vec<_> = dirty
            .iter()
            .filter(|d| prefix.is_empty() || d.path.starts_with(&format!("{prefix}/")))
            .collect();
        if !inside.is_empty() {
            let mut msg = format!(
                "the working tree of `{}` has {} uncommitted change(s), so the run's edits could not be told from yours; commit or stash them, or pass --allow-dirty:",
                workspace.display(),
                inside.len()
            );
            for d in inside.iter().take(50) {
                msg.push_str(&format!("\n  {} ({})", esc(&d.path), d.state));
            }
            if inside.len() > 50 {
                msg.push_str(&format!("\n  … and {} more", inside.len() - 50));
            }
            return Err(refuse(crate::exit::ENVIRONMENT, "repository", msg));
        }
    }
    if let Some(name) = &args.branch {
        repo.create_branch(name, args.base.as_deref())
            .map_err(|e| refuse(crate::exit::INVALID, "repository", e.to_string()))?;
        eprintln!(
            "switched to the new branch `{}`{}",
            esc(name),
            args.base
                .as_deref()
                .map(|b| format!(" (from `{}`)", esc(b)))
                .unwrap_or_default()
        );
    }
    Ok(Some(GitRun { repo, prefix }))
}

/// `workspace` relative to `root`, `/`-separated; `""` when they are the same folder.
fn prefix_of(root: &Path, workspace: &Path) -> String {
    let root = root.canonicalize().unwrap_or_else(|_| root.to_owned());
    let ws = workspace
        .canonicalize()
        .unwrap_or_else(|_| workspace.to_owned());
    ws.strip_prefix(&root)
        .map(|p| {
            p.components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/")
        })
        .unwrap_or_default()
}

/// Where a run's commit is recorded.
pub fn commit_record(state_dir: &Path, run_id: &str) -> PathBuf {
    state_dir.join("git").join("commits").join(run_id)
}

/// After a successful run: commits exactly the files the report says the run wrote. Prints what
/// it did on stderr; returns the exit code to merge (0, or 1 when the commit failed).
pub fn commit(
    git: &GitRun,
    args: &GitArgs,
    report: &ExecutionReport,
    state_dir: Option<&Path>,
) -> u8 {
    let files: Vec<String> = nuvira_git::files_written(report)
        .into_iter()
        .map(|p| {
            if git.prefix.is_empty() {
                p
            } else {
                format!("{}/{p}", git.prefix)
            }
        })
        .collect();
    if files.is_empty() {
        eprintln!("--commit: the run wrote no files, so nothing was committed");
        return crate::exit::SUCCESS;
    }
    let options = CommitOptions {
        author: args.author.clone(),
        sign: args.sign,
    };
    match git
        .repo
        .commit_paths(&files, &nuvira_git::commit_message(report), &options)
    {
        Ok(Some(done)) => {
            let short = &done.sha[..done.sha.len().min(12)];
            eprintln!(
                "committed {} file(s) as {short}{}",
                done.paths.len(),
                done.branch
                    .as_deref()
                    .map(|b| format!(" on `{}`", esc(b)))
                    .unwrap_or_else(|| " (detached HEAD)".into())
            );
            if let Some(dir) = state_dir {
                let path = commit_record(dir, &report.run_id);
                let written = path
                    .parent()
                    .map_or(Ok(()), std::fs::create_dir_all)
                    .and_then(|()| std::fs::write(&path, format!("{}\n", done.sha)));
                if let Err(e) = written {
                    eprintln!(
                        "warning: failed to record the commit in {}: {}",
                        path.display(),
                        crate::cli::io_reason(&e)
                    );
                }
            }
            crate::exit::SUCCESS
        }
        Ok(None) => {
            eprintln!("--commit: the files the run wrote equal HEAD's, so nothing was committed");
            crate::exit::SUCCESS
        }
        Err(e) => {
            eprintln!(
                "error: {}; the run's changes stay in the working tree, uncommitted",
                crate::cli::esc_lines(&e.to_string())
            );
            crate::exit::FAILED
        }
    }
}

/// The commit recorded for `run_id`, if the run committed.
pub fn recorded_commit(state_dir: &Path, run_id: &str) -> Option<String> {
    let text = std::fs::read_to_string(commit_record(state_dir, run_id)).ok()?;
    let sha = text.trim();
    (sha.len() >= 7 && sha.chars().all(|c| c.is_ascii_hexdigit())).then(|| sha.to_owned())
}

/// Fills in every `inspect` step's `prefer` (the files changed on the branch since the merge
/// base with `--base`, else `origin/HEAD`, else `main`/`master`) and `skip` (the files
/// `.gitattributes` marks generated), unless the step sets them itself. Outside a repository,
/// or when git cannot tell, the plan stays as it is.
pub fn hint_inspect(plan: &mut nuvira_api::ExecutionPlan, workspace: &Path, base: Option<&str>) {
    use serde_json::Value;
    if !plan.steps.iter().any(|s| s.module == "inspect") {
        return;
    }
    let Ok(Some(repo)) = Repo::discover(workspace) else {
        return;
    };
    let prefix = prefix_of(repo.root(), workspace);
    let rel = |p: String| -> Option<String> {
        if prefix.is_empty() {
            Some(p)
        } else {
            p.strip_prefix(&format!("{prefix}/")).map(str::to_owned)
        }
    };
    let base = base.map(str::to_owned).or_else(|| repo.default_base());
    let prefer: Vec<String> = base
        .and_then(|b| repo.changed_names(&b).ok())
        .unwrap_or_default()
        .into_iter()
        .filter_map(rel)
        .collect();
    let skip: Vec<String> = if repo.has_attributes() {
        repo.generated(&repo.tracked_files())
            .into_iter()
            .filter_map(rel)
            .collect()
    } else {
        Vec::new()
    };
    if prefer.is_empty() && skip.is_empty() {
        return;
    }
    for step in plan.steps.iter_mut().filter(|s| s.module == "inspect") {
        if step.config.is_null() {
            step.config = Value::Object(serde_json::Map::new());
        }
        if let Some(obj) = step.config.as_object_mut() {
            if !prefer.is_empty() {
                obj.entry("prefer")
                    .or_insert_with(|| Value::from(prefer.clone()));
            }
            if !skip.is_empty() {
                obj.entry("skip")
                    .or_insert_with(|| Value::from(skip.clone()));
            }
        }
    }
}
