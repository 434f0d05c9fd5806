//! Model-written edits: [`ModelEditor`] turns an edit step's `instructions` into entries.

use crate::batch::ask_edit_batch;
use nuvira_api::{
    Artifact, ChatMessage, EditEntry, ErrorCategory, ModuleError, StepContext, StepOutput,
    async_trait,
};
use nuvira_edit::nuvira_workspace::Workspace;
use nuvira_edit::{Editor, Emit, InstructionEditor, rejection_reasons};
use nuvira_llm::{context, guard};

/// The default token budget for repository context in an edit prompt.
pub const DEFAULT_CONTEXT_TOKENS: usize = 6_000;

const EDIT_SYSTEM: &str = "You are a careful software engineer changing a repository. \
Answer only with a JSON object {\"edits\": [...], \"explanation\": \"...\"} following the edit_batch schema. \
Prefer `search-replace` edits: `path` is the workspace-relative file, `search` is text copied exactly \
(whitespace included) from the file as shown, occurring once, and `replace` is the new text. Keep edits \
minimal and keep the code compiling.";

/// Turns instructions into validated edit entries with a model.
///
/// The prompt holds the plan's goal, the instructions, the previous attempt's feedback (e.g.
/// failing test output, [`StepContext::feedback`]) and the upstream inspection's files, packed
/// into a token budget most relevant first with [`nuvira_llm::context::reduce`]; repository
/// text and feedback are wrapped as untrusted data ([`nuvira_llm::guard`]). The answer is an
/// `edit_batch` ([`crate::edit_batch_schema`]); an answer that does not parse is corrected once, and
/// a batch the editor's dry run rejects (no match, syntax error) is sent back once with the
/// reasons. What comes back then goes through the edit module's normal validation and
/// transaction.
#[derive(Debug, Clone)]
pub struct ModelEditor {
    editor: Editor,
    context_tokens: usize,
}

impl ModelEditor {
    /// An instruction editor that checks batches with `editor` (use the edit module's).
    pub fn new(editor: Editor) -> Self {
        Self {
            editor,
            context_tokens: DEFAULT_CONTEXT_TOKENS,
        }
    }

    /// Builder-style: the token budget for repository context.
    #[must_use]
    pub fn context_tokens(mut self, tokens: usize) -> Self {
        self.context_tokens = tokens;
        self
    }

    /// The messages for a request.
    pub fn messages(&self, instructions: &str, ctx: &StepContext) -> Vec<ChatMessage> {
        let artifacts = upstream_artifacts(ctx);
        let packed = context::reduce(&artifacts, self.context_tokens);
        let mut user = format!(
            "Goal of the run: {}\n\nYour task in this step: {instructions}\n",
            ctx.goal()
        );
        if let Some(fb) = &ctx.feedback() {
            user.push_str("\nThe previous attempt of this step failed; its output:\n");
            user.push_str(&guard::untrusted(
                "previous-attempt",
                &nuvira_secrets::redact(fb),
            ));
            user.push('\n');
        }
        if packed.files.is_empty() {
            user.push_str("\nNo repository files were inspected upstream.\n");
        } else {
            user.push_str("\nRepository files, most relevant first:\n");
            user.push_str(&packed.text);
        }
        if !packed.omitted.is_empty() {
            user.push_str(&format!(
                "\nOther relevant files (not shown): {}\n",
                packed.omitted.join(", ")
            ));
        }
        vec![
            ChatMessage::system(guard::with_notice(EDIT_SYSTEM)),
            ChatMessage::user(user),
        ]
    }

    /// Why the editor's dry run rejects these entries (empty when it accepts them).
    async fn rejections(&self, ctx: &StepContext, entries: &[EditEntry]) -> Vec<String> {
        let editor = self.editor.clone();
        let entries = entries.to_vec();
        let root = ctx.workspace_root().clone();
        let work = tokio::task::spawn_blocking(move || {
            let ws = Workspace::open(&*root).map_err(|e| vec![e.to_string()])?;
            let preview = editor.dry_run(&ws, &entries, &Emit::none());
            Ok::<_, Vec<String>>(
                rejection_reasons(&preview)
                    .into_iter()
                    .map(|r| match (r.path.is_empty(), r.line) {
                        (true, _) => r.reason,
                        (false, Some(l)) => format!("{}:{l}: {}", r.path, r.reason),
                        (false, None) => format!("{}: {}", r.path, r.reason),
                    })
                    .collect(),
            )
        });
        match work.await {
            Ok(Ok(v) | Err(v)) => v,
            Err(e) => vec![format!("check the edits: {e}")],
        }
    }
}

/// Every artifact of the upstream inspections, the best-scored copy of each path.
pub fn upstream_artifacts(ctx: &StepContext) -> Vec<Artifact> {
    let mut out: Vec<Artifact> = Vec::new();
    for (_, o) in ctx.upstream() {
        if let StepOutput::Inspection(r) = &*o {
            for a in &r.artifacts {
                match out.iter_mut().find(|x| x.path == a.path) {
                    Some(x)
                        if x.score < a.score || (x.content.is_none() && a.content.is_some()) =>
                    {
                        *x = a.clone();
                    }
                    Some(_) => {}
                    None => out.push(a.clone()),
                }
            }
        }
    }
    out
}

#[async_trait]
impl InstructionEditor for ModelEditor {
    async fn edits_for(
        &self,
        instructions: &str,
        ctx: &StepContext,
    ) -> Result<Vec<EditEntry>, ModuleError> {
        let Some(llm) = ctx.llm() else {
            return Err(ModuleError::fatal(
                ErrorCategory::EnvironmentUnavailable,
                format!(
                    "step `{}`: write edits from instructions: no model is configured",
                    ctx.step_id()
                ),
            ));
        };
        let messages = self.messages(instructions, ctx);
        let (batch, mut messages) =
            ask_edit_batch(llm.as_ref(), messages, None, &self.editor).await?;
        let problems = self.rejections(ctx, &batch.edits).await;
        if problems.is_empty() {
            return Ok(batch.edits);
        }
        messages.push(ChatMessage::user(format!(
            "The editor rejected those edits; nothing was written:\n- {}\nAnswer again with corrected edits (copy `search` text exactly from the files shown).",
            problems.join("\n- ")
        )));
        let (batch, _) = ask_edit_batch(llm.as_ref(), messages, None, &self.editor).await?;
        Ok(batch.edits)
    }
}
