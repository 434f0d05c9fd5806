//! `nuvira replay RUN [--repo DIR] [--continue-on-divergence] [--format ...]`: re-executes a
//! recorded run with its recorded model answers and no network. Each model request is compared
//! by hash with the recorded one; a mismatch is a divergence, reported with the step, the
//! attempt and what differed (prompt, schema, context file), and the replay stops there (with
//! `--continue-on-divergence` it is recorded and the recorded answer used). At the end the
//! report is compared with the recorded one, ids and times aside.
//!
//! RUN is a run id of `--repo`'s history, or the path of a run folder (to replay into a fresh
//! copy of the repository). Exit codes: 0 reproduced, 1 diverged or a different report, 2 bad
//! arguments, 3 the environment.

use crate::runs::StoredRun;
use crate::runs::calls::CallLog;
use nuvira_api::{ExecutionReport, LlmClient, LlmError, LlmRequest, LlmResponse, async_trait};
use std::path::PathBuf;
use std::sync::Arc;

/// Arguments of `nuvira replay`.
#[derive(Debug, clap::Args)]
#[command(after_help = super::conventions::after_help(&[
    ("re-execute a run offline with its recorded model answers", "nuvira replay run-1764580000-0a1f"),
    ("list every divergence instead of stopping at the first, as JSON", "nuvira replay run-1764580000-0a1f --continue-on-divergence --format json"),
]))]
pub struct Args {
    /// The run: an id of the repository's history, or the path of a run folder.
    #[arg(value_name = "RUN")]
    pub run: String,
    /// The repository to replay in.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub repo: PathBuf,
    /// Record a divergence and go on with the recorded answer, instead of stopping.
    #[arg(long)]
    pub continue_on_divergence: bool,
    /// The report printed on stdout.
    #[arg(long, value_enum)]
    pub format: Option<super::run::FormatArg>,
    /// No progress lines on stderr.
    #[arg(long, short)]
    pub quiet: bool,
    /// When another nuvira process is changing the repository, wait for it.
    #[arg(long)]
    pub wait: bool,
}

/// Runs the command.
pub fn execute(args: Args) -> u8 {
    let path = PathBuf::from(&args.run);
    let from = if crate::runs::is_run_id(&args.run) && !path.is_dir() {
        crate::runs::RunStore::open(&args.repo).and_then(|s| s.get(&args.run))
    } else {
        StoredRun::open_dir(&path)
    };
    let from = match from {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: cannot replay: {}", super::esc_lines(&e.to_string()));
            return crate::exit::INVALID;
        }
    };
    let mut run = super::run::Args::defaults(args.repo.clone());
    run.format = args.format;
    run.quiet = args.quiet;
    run.wait = args.wait;
    run.replay = Some(super::run::Replay {
        from,
        continue_on_divergence: args.continue_on_divergence,
    });
    super::run::execute(run)
}

/// The model of a replay: it never answers, so any request the recorded run did not make
/// fails (the call log answers the others from the record).
pub(crate) fn offline_model(from: &StoredRun) -> Arc<dyn LlmClient> {
    let model = from
        .calls()
        .ok()
        .and_then(|c| c.first().map(|c| c.provider_model.clone()))
        .unwrap_or_else(|| "replay:offline".into());
    Arc::new(Offline(model))
}

struct Offline(String);

#[async_trait]
impl LlmClient for Offline {
    fn model(&self) -> &str {
        &self.0
    }
    async fn complete(&self, _request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        Err(LlmError::Config(
            "a replay makes no model calls: this request is not in the record".into(),
        ))
    }
}

/// The report without what differs between two executions of the same run: ids, times,
/// durations, and how the sandbox got there (its container, cache key and workspace copy).
pub fn normalized(report: &ExecutionReport) -> serde_json::Value {
    let mut v = serde_json::to_value(report).unwrap_or_default();
    strip(&mut v);
    v
}

fn strip(v: &mut serde_json::Value) {
    const VOLATILE: &[&str] = &[
        "run_id",
        "report_id",
        "started_at_ms",
        "started_ms",
        "duration_ms",
        "latency_ms",
        "ts",
        "summary",
        "container_id",
        "cache_key",
        "workspace_copy",
        "collected_from",
    ];
    match v {
        serde_json::Value::Object(map) => {
            for k in VOLATILE {
                map.remove(*k);
            }
            for (_, x) in map.iter_mut() {
                strip(x);
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(strip),
        _ => {}
    }
}

/// Says how the replay went; 1 when it diverged or its report differs from the recorded one.
pub(crate) fn conclude(
    replay: &super::run::Replay,
    report: &ExecutionReport,
    calls: Option<&CallLog>,
) -> u8 {
    let divergences = calls.map(CallLog::divergences).unwrap_or_default();
    for d in &divergences {
        eprintln!("replay: divergence at {}", super::esc_lines(&d.to_string()));
    }
    let recorded = match replay.from.report() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("replay: cannot compare with the recorded report: {e}");
            return crate::exit::FAILED;
        }
    };
    let same = normalized(&recorded) == normalized(report);
    if same && divergences.is_empty() {
        eprintln!(
            "replay: reproduced run {} exactly (ids and times aside)",
            replay.from.meta.id
        );
        crate::exit::SUCCESS
    } else {
        if !same {
            eprintln!(
                "replay: the report differs from the recorded report of run {}",
                replay.from.meta.id
            );
        }
        crate::exit::FAILED
    }
}
