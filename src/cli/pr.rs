//! `nuvira pr-body RUN` and `nuvira pr create`: a run's pull request.
//!
//! `pr-body` prints the Markdown description of a run (goal, what changed per file, tests
//! before and after the edits, verification findings, follow-ups, run id) within GitHub's
//! 65,536-character limit. The run is found as:
//! - `--events FILE` (or `-` for stdin): the JSONL event file `nuvira run --events` wrote;
//! - `RUN` naming a file: a report JSON (`nuvira run --format json`, `--report json=PATH`) or
//!   an event file;
//! - `RUN` naming a run id: `.nuvira/runs/<RUN>/report.json` (or `events.jsonl`) in `--repo`.
//!
//! `pr create` pushes the branch with the user's git credentials (`git push`) and opens the
//! pull request through the GitHub REST API: token from `GITHUB_TOKEN`, repository from
//! `--github-repo`, `GITHUB_REPOSITORY` or the remote's URL, API from `--api-url` /
//! `GITHUB_API_URL` (GitHub Enterprise: `https://HOST/api/v3`).
//!
//! Exit codes: 0 done, 1 GitHub or git refused (the message says why), 2 bad arguments or an
//! unreadable run, 3 no token, no repository or no network.

use crate::cli::{esc, esc_lines, print_stdout};
use crate::exit;
use nuvira_api::ExecutionReport;
use nuvira_git::github::{self, GitHub, NewPullRequest};
use std::io::BufReader;
use std::path::{Path, PathBuf};

/// Arguments of `nuvira pr-body`.
#[derive(Debug, clap::Args)]
#[command(after_help = super::conventions::after_help(&[
    ("the description of a recorded run (`nuvira runs` lists them)", "nuvira pr-body run-1764580000-0a1f > body.md"),
    ("from a stored event file, at most 20000 characters", "nuvira pr-body --events events.jsonl --limit 20000"),
]))]
pub struct BodyArgs {
    #[command(flatten)]
    pub run: RunSource,
    /// At most this many characters (GitHub's limit is 65536).
    #[arg(long, value_name = "N", default_value_t = nuvira_git::PR_BODY_LIMIT)]
    pub limit: usize,
}

/// Where a run's report comes from.
#[derive(Debug, Clone, clap::Args)]
pub struct RunSource {
    /// A run id (read from `.nuvira/runs/<RUN>/` in --repo) or a report JSON / event file.
    #[arg(value_name = "RUN", required_unless_present = "events")]
    pub run: Option<String>,
    /// The run's JSONL event file (`nuvira run --events FILE`); `-` reads stdin.
    #[arg(long, value_name = "FILE", conflicts_with = "run")]
    pub events: Option<PathBuf>,
    /// The repository whose `.nuvira/runs/` holds the run.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub repo: PathBuf,
}

/// Subcommands of `nuvira pr`.
#[derive(Debug, clap::Subcommand)]
pub enum PrCommand {
    /// Push the branch and open a pull request on GitHub for a run.
    Create(CreateArgs),
}

/// Arguments of `nuvira pr`.
#[derive(Debug, clap::Args)]
#[command(after_help = super::conventions::after_help(&[
    ("open a pull request for a run's branch", "nuvira pr create run-1764580000-0a1f --base main"),
    ("what the request would say, without GitHub", "nuvira pr-body run-1764580000-0a1f"),
]))]
pub struct PrArgs {
    #[command(subcommand)]
    pub command: PrCommand,
}

/// Arguments of `nuvira pr create`.
#[derive(Debug, clap::Args)]
#[command(after_help = super::conventions::after_help(&[
    ("push the run's branch and open a pull request (GITHUB_TOKEN)", "nuvira pr create run-1764580000-0a1f --base main"),
    ("a draft with a label, the branch already pushed", "nuvira pr create run-1764580000-0a1f --draft --label nuvira --no-push"),
]))]
pub struct CreateArgs {
    #[command(flatten)]
    pub run: RunSource,
    /// The branch to merge into [default: the remote's default branch, else `main`].
    #[arg(long, value_name = "BRANCH")]
    pub base: Option<String>,
    /// The branch with the changes [default: the current branch].
    #[arg(long, value_name = "BRANCH")]
    pub head: Option<String>,
    /// The title [default: the run's goal, first line].
    #[arg(long, value_name = "TEXT")]
    pub title: Option<String>,
    /// Open it as a draft.
    #[arg(long)]
    pub draft: bool,
    /// A label to add (repeatable).
    #[arg(long = "label", value_name = "NAME")]
    pub labels: Vec<String>,
    /// A reviewer to request: a login, or `org/team` (repeatable).
    #[arg(long = "reviewer", value_name = "LOGIN")]
    pub reviewers: Vec<String>,
    /// The remote to push to and read the repository from.
    #[arg(long, value_name = "NAME", default_value = "origin")]
    pub remote: String,
    /// Do not push; the branch is on GitHub already.
    #[arg(long)]
    pub no_push: bool,
    /// `owner/name` on GitHub [default: GITHUB_REPOSITORY, else the remote's URL].
    #[arg(long, value_name = "OWNER/NAME")]
    pub github_repo: Option<String>,
    /// The REST API's base URL (GitHub Enterprise: https://HOST/api/v3).
    #[arg(long, value_name = "URL", env = "GITHUB_API_URL", default_value = github::DEFAULT_API_URL)]
    pub api_url: String,
}

/// Why the run's report cannot be had.
fn load(src: &RunSource) -> Result<ExecutionReport, String> {
    if let Some(events) = &src.events {
        if events.as_os_str() == "-" {
            let stdin = std::io::stdin();
            return nuvira_report::read_jsonl(BufReader::new(stdin.lock()), Path::new("<stdin>"))
                .map_err(|e| format!("failed to {e}"))
                .and_then(nonempty);
        }
        return nuvira_report::read_jsonl_file(events)
            .map_err(|e| format!("failed to {e}"))
            .and_then(nonempty);
    }
    let Some(run) = &src.run else {
        return Err("give a run id, a report file or --events FILE".into());
    };
    let as_path = PathBuf::from(run);
    if as_path.is_file() {
        return from_file(&as_path);
    }
    let ok_id = !run.is_empty()
        && run
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && run != "."
        && run != "..";
    if ok_id {
        let dir = src.repo.join(".nuvira").join("runs").join(run);
        for name in ["report.json", "events.jsonl"] {
            let p = dir.join(name);
            if p.is_file() {
                return from_file(&p);
            }
        }
    }
    Err(format!(
        "no run `{}`: it is neither a file nor a run in `{}` (.nuvira/runs/<id>/report.json); pass the report JSON (`nuvira run --report json=PATH`) or the event file (--events FILE)",
        esc(run),
        src.repo.display()
    ))
}

fn nonempty(r: ExecutionReport) -> Result<ExecutionReport, String> {
    if r.events == 0 && r.run_id.is_empty() {
        Err("the event file holds no events: pass the file `nuvira run --events FILE` wrote".into())
    } else {
        Ok(r)
    }
}

/// A report JSON, or else an event file.
fn from_file(path: &Path) -> Result<ExecutionReport, String> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        format!(
            "failed to read `{}`: {}",
            path.display(),
            super::io_reason(&e)
        )
    })?;
    if let Ok(report) = serde_json::from_str::<ExecutionReport>(&text) {
        return Ok(report);
    }
    nuvira_report::read_jsonl(BufReader::new(text.as_bytes()), path)
        .map_err(|e| {
            format!(
                "failed to {e} (`{}` is neither a report JSON nor an event file)",
                path.display()
            )
        })
        .and_then(nonempty)
}

/// Runs `nuvira pr-body`.
pub fn execute_body(args: BodyArgs) -> u8 {
    match load(&args.run) {
        Ok(report) => {
            print_stdout(&nuvira_git::pr_body(&report, args.limit));
            exit::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {}", esc_lines(&e));
            exit::INVALID
        }
    }
}

/// Runs `nuvira pr ...`.
pub fn execute(args: PrArgs) -> u8 {
    match args.command {
        PrCommand::Create(a) => create(a),
    }
}

fn create(args: CreateArgs) -> u8 {
    let report = match load(&args.run) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {}", esc_lines(&e));
            return exit::INVALID;
        }
    };
    let token = std::env::var("GITHUB_TOKEN").unwrap_or_default();
    if token.trim().is_empty() {
        eprintln!(
            "error: GITHUB_TOKEN is not set: create a token with `pull-requests: write` on the repository and export it"
        );
        return exit::ENVIRONMENT;
    }
    let repo = match nuvira_git::Repo::open(&args.run.repo) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {}", esc_lines(&e.to_string()));
            return exit::INVALID;
        }
    };
    let remote_url = repo.remote_url(&args.remote);
    let from_env = std::env::var("GITHUB_REPOSITORY").ok();
    let slug = args
        .github_repo
        .as_deref()
        .and_then(github::parse_repository)
        .or_else(|| from_env.as_deref().and_then(github::parse_repository))
        .or_else(|| remote_url.as_deref().and_then(github::parse_remote));
    let Some((owner, name)) = slug else {
        eprintln!(
            "error: cannot tell the GitHub repository: pass --github-repo OWNER/NAME or set GITHUB_REPOSITORY (the remote `{}` is {})",
            esc(&args.remote),
            remote_url
                .as_deref()
                .map_or_else(|| "missing".to_owned(), |u| format!("`{}`", esc(u)))
        );
        return exit::ENVIRONMENT;
    };
    let Some(head) = args.head.clone().or_else(|| repo.current_branch()) else {
        eprintln!(
            "error: HEAD is detached: pass --head BRANCH, or create one with `git switch -c NAME`"
        );
        return exit::INVALID;
    };
    let base = args
        .base
        .clone()
        .or_else(|| repo.remote_head(&args.remote))
        .unwrap_or_else(|| "main".to_owned());
    if !args.no_push {
        eprintln!("pushing `{}` to `{}`", esc(&head), esc(&args.remote));
        let status = std::process::Command::new("git")
            .current_dir(repo.root())
            .args(["push", "--set-upstream", "--", &args.remote])
            .arg(format!("HEAD:refs/heads/{head}"))
            // stdout carries only the pull request's URL.
            .stdout(std::process::Stdio::from(std::io::stderr()))
            .status();
        match status {
            Ok(s) if s.success() => {}
            Ok(s) => {
                eprintln!(
                    "error: `git push {} {}` failed ({s}); nothing was opened on GitHub",
                    esc(&args.remote),
                    esc(&head)
                );
                return exit::FAILED;
            }
            Err(e) => {
                eprintln!("error: failed to run `git push` (is git installed?): {e}");
                return exit::ENVIRONMENT;
            }
        }
    }
    let title = args.title.clone().unwrap_or_else(|| {
        let first = report
            .goal
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .trim();
        if first.is_empty() {
            format!("Nuvira run {}", report.run_id)
        } else {
            first
                .chars()
                .filter(|c| !c.is_control())
                .take(256)
                .collect()
        }
    });
    let pr = NewPullRequest {
        title,
        head: head.clone(),
        base,
        body: nuvira_git::pr_body(&report, nuvira_git::PR_BODY_LIMIT),
        draft: args.draft,
    };
    let client = match GitHub::new(&args.api_url, &token) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {}", esc_lines(&e.to_string()));
            return exit::INVALID;
        }
    };
    let rt = match crate::cli::runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: failed to start the async runtime: {e}");
            return exit::ENVIRONMENT;
        }
    };
    let made = match rt.block_on(client.create_pull(&owner, &name, &pr)) {
        Ok(p) => p,
        Err(e) => return github_failed(&e),
    };
    println!("{}", esc(&made.html_url));
    eprintln!(
        "opened pull request #{} on {}/{}{}",
        made.number,
        esc(&owner),
        esc(&name),
        if args.draft { " (draft)" } else { "" }
    );
    let mut code = exit::SUCCESS;
    if !args.labels.is_empty()
        && let Err(e) = rt.block_on(client.add_labels(&owner, &name, made.number, &args.labels))
    {
        code = code.max(github_failed(&e));
    }
    if !args.reviewers.is_empty()
        && let Err(e) =
            rt.block_on(client.request_reviewers(&owner, &name, made.number, &args.reviewers))
    {
        code = code.max(github_failed(&e));
    }
    code
}

fn github_failed(e: &github::GitHubError) -> u8 {
    eprintln!("error: {}", esc_lines(&e.to_string()));
    match e {
        github::GitHubError::Transport { .. } | github::GitHubError::Unauthorized { .. } => {
            exit::ENVIRONMENT
        }
        _ => exit::FAILED,
    }
}
