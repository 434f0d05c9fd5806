//! `nuvira runs [--repo DIR] [--json]`, `nuvira runs show RUN [--format ...]`,
//! `nuvira runs gc [--keep N] [--keep-days D] [--grace DURATION] [--dry-run]`: the run history
//! in `.nuvira/runs/` (see docs/runs.md).
//!
//! The list shows, newest first: id, status, started (UTC), duration, tokens, cost and goal;
//! then the folders without `run.json` (a run killed before its first write, or one starting),
//! as `incomplete`. `gc` also removes those no process holds once they are idle for the grace
//! period.
//! `show` prints a run's report in any report format. `gc` applies the retention policy (the
//! flags, else `[runs]` of the configuration ([`crate::runs::calls::Config::load`]), else `NUVIRA_RUNS_KEEP[_DAYS]`, else 100
//! runs / 30 days); it only ever removes real run folders inside `.nuvira/runs` and never
//! follows a symlink. Exit codes: 0, 2 bad arguments or unknown run, 3 the history cannot be
//! read or changed.

use crate::runs::{Incomplete, Retention, RunStore, StoredRun};
use nuvira_report::Format;
use std::path::PathBuf;

/// Arguments of `nuvira runs`.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
#[command(after_help = super::conventions::after_help(&[
    ("the runs of this repository, newest first", "nuvira runs"),
    ("a run's report, then keep only the 20 newest runs", "nuvira runs show run-1764580000-0a1f && nuvira runs gc --keep 20"),
]))]
pub struct Args {
    /// The repository.
    #[arg(long, value_name = "DIR", default_value = ".", global = true)]
    pub repo: PathBuf,
    /// The list as JSON (an array of objects).
    #[arg(long)]
    pub json: bool,
    #[command(subcommand)]
    pub command: Option<Sub>,
}

/// `nuvira runs` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Sub {
    /// Print a run's report.
    Show {
        /// The run id.
        run: String,
        /// The format [default: text].
        #[arg(long, value_parser = ["text", "json", "markdown", "github", "sarif", "junit", "html"])]
        format: Option<String>,
    },
    /// Remove the runs the retention policy does not keep.
    Gc {
        /// Keep the newest N runs (0: no limit).
        #[arg(long, value_name = "N")]
        keep: Option<usize>,
        /// Keep runs younger than D days (0: no limit).
        #[arg(long, value_name = "D")]
        keep_days: Option<u64>,
        /// Only say which runs would be removed.
        #[arg(long)]
        dry_run: bool,
        /// A folder without `run.json` that no process holds is removed once nothing in it
        /// changed for this long (e.g. `30s`, `10m`; default 5m).
        #[arg(long, value_name = "DURATION", value_parser = parse_grace)]
        grace: Option<std::time::Duration>,
    },
}

/// Runs the command.
pub fn execute(args: Args) -> u8 {
    if let Err(e) = super::check_repo(&args.repo) {
        eprintln!("error: {e}");
        return crate::exit::INVALID;
    }
    let store = match RunStore::open(&args.repo) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {}", super::esc_lines(&e.to_string()));
            return crate::exit::ENVIRONMENT;
        }
    };
    match args.command {
        None => list(&store, args.json),
        Some(Sub::Show { run, format }) => show(&store, &run, format.as_deref()),
        Some(Sub::Gc {
            keep,
            keep_days,
            dry_run,
            grace,
        }) => gc(
            &store,
            keep,
            keep_days,
            dry_run,
            grace.unwrap_or(crate::runs::DEFAULT_GRACE),
        ),
    }
}

fn parse_grace(s: &str) -> Result<std::time::Duration, nuvira_api::duration::DurationError> {
    nuvira_api::duration::parse(s)
}

/// One row of the list, as `--json` prints it.
pub(crate) fn row(run: &StoredRun) -> serde_json::Value {
    let m = &run.meta;
    serde_json::json!({
        "id": m.id,
        "goal": m.goal,
        "status": run.status(),
        "started_ms": m.started_ms,
        "duration_ms": m.duration_ms,
        "tokens": m.usage.as_ref().map(nuvira_api::ModelUsage::total_tokens),
        "cost_usd": m.usage.as_ref().and_then(|u| u.cost_usd),
        "model_calls": m.usage.as_ref().map(|u| u.calls),
        "steps": m.steps,
        "resumes": m.resumes,
        "replay_of": m.replay_of,
        "exit_code": m.exit_code,
        "dir": run.dir.display().to_string(),
        "incomplete": false,
    })
}

/// The row of a folder without `run.json`: `status` `incomplete`, `incomplete: true`, `live`
/// (a process holds the folder: the run is starting), `reason`, and `started_ms` the folder's
/// last change.
pub(crate) fn incomplete_row(i: &Incomplete, live: bool) -> serde_json::Value {
    serde_json::json!({
        "id": i.id,
        "goal": "",
        "status": "incomplete",
        "started_ms": i.modified_ms,
        "duration_ms": null,
        "tokens": null,
        "cost_usd": null,
        "model_calls": null,
        "steps": 0,
        "resumes": 0,
        "replay_of": null,
        "exit_code": null,
        "dir": i.dir.display().to_string(),
        "incomplete": true,
        "live": live,
        "reason": incomplete_reason(live),
    })
}

fn incomplete_reason(live: bool) -> &'static str {
    if live {
        "no run.json yet: a run is starting"
    } else {
        "no run.json: the run was killed before its first write (`nuvira runs gc` removes it)"
    }
}

fn list(store: &RunStore, json: bool) -> u8 {
    let (runs, incomplete) = match store.list_all() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return crate::exit::ENVIRONMENT;
        }
    };
    // Folders without `run.json`: after the runs (they cannot be shown or resumed).
    let incomplete: Vec<(Incomplete, bool)> = incomplete
        .into_iter()
        .map(|i| {
            let live = i.live();
            (i, live)
        })
        .collect();
    if json {
        let rows: Vec<_> = runs
            .iter()
            .map(row)
            .chain(incomplete.iter().map(|(i, live)| incomplete_row(i, *live)))
            .collect();
        super::print_stdout(&format!("{:#}\n", serde_json::Value::Array(rows)));
        return crate::exit::SUCCESS;
    }
    if runs.is_empty() && incomplete.is_empty() {
        eprintln!(
            "no runs recorded yet in {}",
            store.workspace().root().display()
        );
        return crate::exit::SUCCESS;
    }
    let mut out = format!(
        "{:<24}  {:<15}  {:<19}  {:>8}  {:>8}  {:>9}  goal\n",
        "id", "status", "started (UTC)", "duration", "tokens", "cost"
    );
    for run in &runs {
        let m = &run.meta;
        let duration = m
            .duration_ms
            .map(nuvira_report::human_ms)
            .unwrap_or_else(|| "-".into());
        let tokens = m
            .usage
            .as_ref()
            .map_or_else(|| "-".into(), |u| u.total_tokens().to_string());
        let cost = m
            .usage
            .as_ref()
            .and_then(|u| u.cost_usd)
            .map_or_else(|| "-".into(), |c| format!("${c:.4}"));
        let goal: String = m
            .goal
            .lines()
            .next()
            .unwrap_or_default()
            .chars()
            .take(60)
            .collect();
        out.push_str(&format!(
            "{:<24}  {:<15}  {:<19}  {:>8}  {:>8}  {:>9}  {}\n",
            super::esc(&m.id),
            super::esc(run.status()),
            utc(m.started_ms),
            duration,
            tokens,
            cost,
            super::esc(&goal)
        ));
    }
    for (i, live) in &incomplete {
        out.push_str(&format!(
            "{:<24}  {:<15}  {:<19}  {:>8}  {:>8}  {:>9}  ({})\n",
            super::esc(&i.id),
            "incomplete",
            utc(i.modified_ms),
            "-",
            "-",
            "-",
            incomplete_reason(*live)
        ));
    }
    if !incomplete.is_empty() {
        out.push_str(&format!(
            "{} run(s), {} incomplete\n",
            runs.len(),
            incomplete.len()
        ));
    }
    super::print_stdout(&out);
    crate::exit::SUCCESS
}

fn show(store: &RunStore, id: &str, format: Option<&str>) -> u8 {
    let format = match format.map(str::parse::<Format>) {
        Some(Ok(f)) => f,
        Some(Err(e)) => {
            eprintln!("error: failed to {e}");
            return crate::exit::INVALID;
        }
        None => Format::Text,
    };
    let run = match store.get(id) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {}", super::esc_lines(&e.to_string()));
            return crate::exit::INVALID;
        }
    };
    match run.report() {
        Ok(report) => {
            super::print_stdout(&nuvira_report::render(&report, format));
            crate::exit::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {}", super::esc_lines(&e.to_string()));
            crate::exit::ENVIRONMENT
        }
    }
}

fn gc(
    store: &RunStore,
    keep: Option<usize>,
    keep_days: Option<u64>,
    dry_run: bool,
    grace: std::time::Duration,
) -> u8 {
    let config = crate::runs::calls::Config::load(store.workspace()).unwrap_or_default();
    let mut policy = Retention::from_config(&config);
    if let Some(n) = keep {
        policy.keep_runs = (n > 0).then_some(n);
    }
    if let Some(d) = keep_days {
        policy.keep_days = (d > 0).then_some(d);
    }
    match store.gc_with_grace(policy, &[], dry_run, grace) {
        Ok(out) => {
            let verb = if dry_run { "would remove" } else { "removed" };
            for id in &out.removed {
                eprintln!("{verb} {}", super::esc(id));
            }
            for id in &out.abandoned {
                eprintln!(
                    "{verb} {} (no run.json: killed before its first write)",
                    super::esc(id)
                );
            }
            for (name, why) in &out.ignored {
                eprintln!("left alone: {} ({})", super::esc(name), super::esc(why));
            }
            if !out.abandoned.is_empty() || out.kept_incomplete > 0 {
                eprintln!(
                    "{verb} {} abandoned run folder(s), kept {} incomplete one(s) (a live run holds it, or it changed within {})",
                    out.abandoned.len(),
                    out.kept_incomplete,
                    nuvira_api::duration::format(grace)
                );
            }
            eprintln!("{verb} {} run(s), kept {}", out.removed.len(), out.kept);
            crate::exit::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {}", super::esc_lines(&e.to_string()));
            crate::exit::ENVIRONMENT
        }
    }
}

/// `YYYY-MM-DD HH:MM:SS` (UTC) of a time in ms since the Unix epoch.
fn utc(ms: u64) -> String {
    let secs = ms / 1000;
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    // Howard Hinnant's days-from-civil, inverted.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc_dates() {
        assert_eq!(super::utc(0), "1970-01-01 00:00:00");
        assert_eq!(super::utc(1_764_580_000_000), "2025-12-01 09:06:40");
    }
}
