//! The debugger loop for test steps: failures → the model → edits → the tests again.

use crate::batch::ask_edit_batch;
use crate::model_edit::{DEFAULT_CONTEXT_TOKENS, upstream_artifacts};
use nuvira_api::{
    Artifact, ChatMessage, EditEntry, ErrorCategory, RecoveryDecision, StepContext, StepOutput,
    TestResult, async_trait,
};
use nuvira_edit::nuvira_workspace::Workspace;
use nuvira_edit::{EditFailure, Editor, Emit};
use nuvira_llm::{context, guard};
use nuvira_repair_strategies::{RepairInput, RepairStrategy, evidence_location, preferred_model};
use nuvira_secrets::redact;
use std::time::Duration;

const DEBUG_SYSTEM: &str = "You are debugging a repository whose tests fail. From the failures and the \
files shown, find the cause and fix the code under test (not the tests, unless a test is plainly wrong). \
Answer only with a JSON object {\"edits\": [...], \"explanation\": \"...\"} following the edit_batch schema; \
prefer `search-replace` edits whose `search` text is copied exactly from the file as shown.";

/// How much of the test log's end goes into the prompt.
const LOG_TAIL_BYTES: usize = 4_000;

/// `debug-tests`: when a `test` step fails with a test failure or compile error and a model is
/// configured, asks the model for an edit batch from the failures (test, file, line, message),
/// the log's end and the relevant files (the failures' files, the files upstream steps edited,
/// the inspected files, most relevant first within a token budget), applies it through the
/// editor's validated, journaled transaction, and returns `Retry` so the scheduler reruns the
/// tests. A batch the editor rejects is sent back once with the reasons; if the second is
/// rejected too, the strategy declines (nothing was written).
#[derive(Debug, Clone)]
pub struct DebugTests {
    editor: Editor,
    context_tokens: usize,
}

impl DebugTests {
    /// A debugger that applies batches with `editor` (use the edit module's).
    pub fn new(editor: Editor) -> Self {
        Self {
            editor,
            context_tokens: DEFAULT_CONTEXT_TOKENS,
        }
    }

    /// Builder-style: the token budget for file contents.
    #[must_use]
    pub fn context_tokens(mut self, tokens: usize) -> Self {
        self.context_tokens = tokens;
        self
    }

    fn prompt(&self, input: &RepairInput<'_>) -> String {
        let ctx = input.ctx;
        let test = match input.failure.output.as_deref() {
            Some(StepOutput::Test(t)) => Some(t),
            _ => None,
        };
        let mut failures = String::new();
        for e in &input.classification.evidence {
            failures.push_str("- ");
            failures.push_str(e);
            failures.push('\n');
        }
        if let Some(t) = test {
            for f in t.failures.iter().take(10) {
                if !f.output.is_empty() || f.message.lines().count() > 1 {
                    failures.push_str(&format!(
                        "\n{}:\n{}\n{}\n",
                        f.name,
                        f.message,
                        tail(&f.output, 1_500)
                    ));
                }
            }
        }
        let mut user = format!(
            "Goal of the run: {}\n\nThe test step `{}` failed ({}): {}\n\nFailures:\n{}\n",
            ctx.goal(),
            ctx.step_id(),
            input.classification.category,
            redact(&input.failure.message),
            guard::untrusted("test-failures", &redact(&failures))
        );
        if let Some(t) = test
            && !t.log.is_empty()
        {
            user.push_str("\nEnd of the test log:\n");
            user.push_str(&guard::untrusted(
                "test-log",
                &redact(tail(&t.log, LOG_TAIL_BYTES)),
            ));
            user.push('\n');
        }
        let packed = context::reduce(&self.relevant_files(input, test), self.context_tokens);
        if !packed.files.is_empty() {
            user.push_str("\nRelevant files, most relevant first:\n");
            user.push_str(&packed.text);
        }
        user
    }

    /// The failures' files first, then files upstream steps changed, then inspected files.
    fn relevant_files(&self, input: &RepairInput<'_>, test: Option<&TestResult>) -> Vec<Artifact> {
        let ctx = input.ctx;
        let mut paths: Vec<(String, f64)> = Vec::new();
        let mut add = |p: &str, score: f64| {
            let p = p.trim_start_matches("./").to_owned();
            if !paths.iter().any(|(x, _)| *x == p) {
                paths.push((p, score));
            }
        };
        if let Some(t) = test {
            for f in &t.failures {
                if let Some(file) = &f.file {
                    add(file, 3_000.0);
                }
            }
        }
        for e in &input.classification.evidence {
            if let Some((file, _)) = evidence_location(e) {
                add(&file, 2_500.0);
            }
        }
        for (_, out) in ctx.upstream() {
            if let StepOutput::Edit(r) = &*out {
                for c in &r.preview.changes {
                    add(&c.path, 2_000.0);
                }
            }
        }
        let mut artifacts = Vec::new();
        if let Ok(ws) = Workspace::open(ctx.workspace_root()) {
            for (path, score) in paths {
                if let Ok(Some(text)) = ws.read_text(&path) {
                    let mut a = Artifact::default();
                    a.path = path;
                    a.score = score;
                    a.content = Some(text);
                    artifacts.push(a);
                }
            }
        }
        for a in upstream_artifacts(ctx) {
            if !artifacts.iter().any(|x| x.path == a.path) {
                artifacts.push(a);
            }
        }
        artifacts
    }

    /// Applies entries through the editor's transaction; the rejection reasons when it refuses.
    async fn apply(
        &self,
        ctx: &StepContext,
        entries: Vec<EditEntry>,
    ) -> Result<Vec<String>, Vec<String>> {
        let editor = self.editor.clone();
        let root = ctx.workspace_root().clone();
        let events = ctx.events().clone();
        let step_id = ctx.step_id().clone();
        let run_id = ctx.run_id().clone();
        // The repair changes files under the failing step (a test step, read-only): it waits
        // for the run's records first, as a writing step does, and writes nothing once the run
        // is cancelled meanwhile.
        let may_write = nuvira_edit::before_write_gate(ctx);
        let work = tokio::task::spawn_blocking(move || {
            let ws = Workspace::open(&*root).map_err(|e| vec![e.to_string()])?;
            let emit = Emit::to(events.as_ref(), Some(&step_id));
            match editor.edit_after(&ws, &entries, &run_id, &emit, may_write) {
                Ok(r) => Ok(r.preview.changes.into_iter().map(|c| c.path).collect()),
                Err(EditFailure::Rejected(r)) => Err(r
                    .skipped_changes
                    .into_iter()
                    .map(|s| match (s.path.is_empty(), s.line) {
                        (true, _) => s.reason,
                        (false, Some(l)) => format!("{}:{l}: {}", s.path, s.reason),
                        (false, None) => format!("{}: {}", s.path, s.reason),
                    })
                    .collect()),
                Err(e) => Err(vec![e.to_string()]),
            }
        });
        work.await
            .unwrap_or_else(|e| Err(vec![format!("apply the edits: {e}")]))
    }
}

fn tail(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

#[async_trait]
impl RepairStrategy for DebugTests {
    fn name(&self) -> &str {
        "debug-tests"
    }

    fn applies(&self, input: &RepairInput<'_>) -> bool {
        input.step.module == "test"
            && matches!(
                input.classification.category,
                ErrorCategory::TestFailure | ErrorCategory::CompileError
            )
            && input.ctx.llm().is_some()
            && !input.ctx.dry_run()
    }

    async fn decide(&self, input: &RepairInput<'_>) -> Option<RecoveryDecision> {
        let llm = input.ctx.llm()?;
        let model = preferred_model(input.step);
        let messages = vec![
            ChatMessage::system(guard::with_notice(DEBUG_SYSTEM)),
            ChatMessage::user(self.prompt(input)),
        ];
        let (batch, mut messages) = ask_edit_batch(llm.as_ref(), messages, model, &self.editor)
            .await
            .ok()?;
        let (changed, explanation) = match self.apply(input.ctx, batch.edits).await {
            Ok(changed) => (changed, batch.explanation),
            Err(problems) => {
                messages.push(ChatMessage::user(format!(
                    "The editor rejected those edits; nothing was written:\n- {}\nAnswer again with corrected edits.",
                    problems.join("\n- ")
                )));
                let (batch, _) = ask_edit_batch(llm.as_ref(), messages, model, &self.editor)
                    .await
                    .ok()?;
                (
                    self.apply(input.ctx, batch.edits).await.ok()?,
                    batch.explanation,
                )
            }
        };
        let mut feedback = format!(
            "{}\nThe debugger changed {}",
            nuvira_repair_strategies::feedback_text(input.failure, input.classification),
            changed.join(", ")
        );
        if let Some(x) = explanation {
            feedback.push_str(&format!(": {x}"));
        }
        Some(RecoveryDecision::Retry {
            delay: Duration::ZERO,
            feedback: Some(feedback),
            step: None,
        })
    }
}
