//! Cutting keys and tokens out of error text before it is logged, emitted or sent to a model.
//!
//! `nuvira-llm` removes the configured key from its own messages ([`ApiKey::scrub`] only knows
//! that one key); failures can carry any secret a test printed, so this works on shapes instead:
//! every credential pattern of `nuvira-secrets` (the list the edit module and the security
//! check use), plus looser key and bearer-token shapes and `key = value` assignments whose name
//! says secret.
//!
//! [`ApiKey::scrub`]: https://docs.rs/nuvira-llm

/// What replaces a secret.
pub use nuvira_secrets::REDACTED;

/// `text` with keys, tokens and secret assignments replaced by [`REDACTED`].
///
/// ```
/// let s = nuvira_repair_strategies::scrub("OPENAI_API_KEY=sk-abcdefghijklmnopqrstuvwx failed");
/// assert_eq!(s, "OPENAI_API_KEY=[redacted] failed");
/// ```
pub fn scrub(text: &str) -> String {
    nuvira_secrets::redact(text)
}
