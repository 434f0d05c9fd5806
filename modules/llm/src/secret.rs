//! [`ApiKey`]: a key that cannot leak through `Debug`, `Display`, logs or error messages.

use std::fmt;
use std::sync::Arc;

/// A provider API key.
///
/// It has no `Display`, its `Debug` prints `ApiKey(<redacted>)`, and it is only readable inside
/// this crate, where it goes into one request header (marked sensitive). Error messages that
/// quote provider answers pass through [`ApiKey::redact`] so that an echoed key is cut out.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(Arc<str>);

impl ApiKey {
    /// Wraps a key; surrounding whitespace (a trailing newline from a secrets file) is removed.
    /// Returns `None` for an empty key.
    pub fn new(key: impl AsRef<str>) -> Option<Self> {
        let key = key.as_ref().trim();
        if key.is_empty() {
            None
        } else {
            Some(Self(Arc::from(key)))
        }
    }

    /// The key itself, for the request header only.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }

    /// Replaces every occurrence of this key in `text` with `<redacted>`.
    ///
    /// Unlike [`nuvira_secrets::redact`](https://docs.rs/nuvira-secrets), which cuts anything
    /// shaped like a credential, this cuts exactly the configured key, whatever its shape (a
    /// local server's key need not look like a key at all).
    ///
    /// ```
    /// let key = nuvira_llm::ApiKey::new("sk-test-123").unwrap();
    /// assert_eq!(key.redact("bad key sk-test-123"), "bad key <redacted>");
    /// ```
    pub fn redact(&self, text: &str) -> String {
        // Keys shorter than this could match ordinary words; real keys are far longer.
        if self.0.len() < 4 {
            return text.to_owned();
        }
        text.replace(&*self.0, "<redacted>")
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// Redacts an optional key out of a message.
pub(crate) fn redact(key: Option<&ApiKey>, text: &str) -> String {
    match key {
        Some(k) => k.redact(text),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_key() {
        let key = ApiKey::new(" sk-live-abcdef\n").unwrap();
        assert_eq!(format!("{key:?}"), "ApiKey(<redacted>)");
        assert_eq!(key.expose(), "sk-live-abcdef");
        assert!(ApiKey::new("  ").is_none());
    }
}
