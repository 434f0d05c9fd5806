//! Configuration: which model, where, with which key, and the transport's limits.
//!
//! Settings come from three layers, each overriding the one before: the environment
//! ([`LlmSettings::from_env`]), a config file (an `[llm]` table deserialized into
//! [`LlmSettings`]) and CLI flags; [`LlmSettings::overridden_by`] merges them and
//! [`LlmSettings::resolve`] turns the result into one [`LlmConfig`] per model. Settings never
//! hold a key, only the name of the environment variable to read it from, so a config file
//! can be committed.

use crate::breaker::BreakerPolicy;
use crate::retry::RetryPolicy;
use crate::secret::ApiKey;
use nuvira_api::LlmError;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The wire protocol a model speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    /// The OpenAI Chat Completions API, also spoken by vLLM, llama.cpp's server and Ollama's `/v1`.
    OpenAi,
    /// Anthropic's Messages API.
    Anthropic,
}

impl Provider {
    /// `openai` or `anthropic`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OpenAi => "openai",
            Self::Anthropic => "anthropic",
        }
    }

    /// The public endpoint: `https://api.openai.com/v1` or `https://api.anthropic.com`
    /// (the same convention as the providers' SDKs: OpenAI's base includes `/v1`).
    pub fn default_base_url(self) -> &'static str {
        match self {
            Self::OpenAi => "https://api.openai.com/v1",
            Self::Anthropic => "https://api.anthropic.com",
        }
    }

    /// `OPENAI_API_KEY` or `ANTHROPIC_API_KEY`.
    pub fn default_key_env(self) -> &'static str {
        match self {
            Self::OpenAi => "OPENAI_API_KEY",
            Self::Anthropic => "ANTHROPIC_API_KEY",
        }
    }

    fn parse(name: &str) -> Option<Self> {
        match name.trim().to_ascii_lowercase().as_str() {
            "openai" => Some(Self::OpenAi),
            "anthropic" => Some(Self::Anthropic),
            _ => None,
        }
    }
}

/// Splits `provider:model` (`openai:gpt-4.1`, `anthropic:claude-sonnet-4-5`).
///
/// # Errors
/// [`LlmError::Config`] naming the text when the provider is missing or unknown or the model
/// name is empty.
///
/// ```
/// use nuvira_llm::{parse_model, Provider};
/// assert_eq!(parse_model("openai:qwen2.5-coder:7b").unwrap(), (Provider::OpenAi, "qwen2.5-coder:7b".to_string()));
/// assert!(parse_model("gpt-4.1").is_err());
/// ```
pub fn parse_model(spec: &str) -> Result<(Provider, String), LlmError> {
    let spec = spec.trim();
    let Some((provider, model)) = spec.split_once(':') else {
        return Err(LlmError::Config(format!(
            "model `{spec}` has no provider: write `provider:model`, e.g. `openai:gpt-4.1` or `anthropic:claude-sonnet-4-5`"
        )));
    };
    let Some(p) = Provider::parse(provider) else {
        return Err(LlmError::Config(format!(
            "unknown provider `{provider}` in model `{spec}`: use `openai` (also for vLLM, llama.cpp, Ollama) or `anthropic`"
        )));
    };
    if model.trim().is_empty() {
        return Err(LlmError::Config(format!(
            "model `{spec}` has no model name after `{provider}:`"
        )));
    }
    Ok((p, model.trim().to_owned()))
}

/// Everything a transport needs for one model. `Debug` is safe to print: the key is redacted.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LlmConfig {
    /// The wire protocol.
    pub provider: Provider,
    /// The model name as the provider knows it (`gpt-4.1`).
    pub model: String,
    /// The endpoint (`https://api.openai.com/v1`, `http://127.0.0.1:11434/v1`).
    pub base_url: String,
    /// The key; local servers need none.
    pub api_key: Option<ApiKey>,
    /// Where the key came from (an environment variable name), for error messages.
    pub api_key_source: Option<String>,
    /// Time for one attempt, from sending the request to the last byte of the answer.
    pub timeout: Duration,
    /// Time to open a connection.
    pub connect_timeout: Duration,
    /// Retries on 429, 5xx and broken connections.
    pub retry: RetryPolicy,
    /// The model's circuit breaker.
    pub breaker: BreakerPolicy,
    /// Requests whose serialized body is larger than this fail with [`LlmError::TooLarge`]
    /// before anything is sent.
    pub max_request_bytes: usize,
    /// The answer cap sent when a request sets none (Anthropic requires one).
    pub default_max_tokens: u32,
    /// The `anthropic-version` header.
    pub anthropic_version: String,
}

/// Default per-attempt timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
/// Default request size cap: 4 MiB (about a million tokens, beyond any context window).
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;

impl LlmConfig {
    /// A configuration for `provider:model` at the provider's public endpoint, without a key.
    ///
    /// # Errors
    /// [`LlmError::Config`] when the model text is not `provider:model`.
    pub fn new(model_spec: &str) -> Result<Self, LlmError> {
        let (provider, model) = parse_model(model_spec)?;
        Ok(Self {
            provider,
            model,
            base_url: provider.default_base_url().to_owned(),
            api_key: None,
            api_key_source: None,
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: Duration::from_secs(10),
            retry: RetryPolicy::default(),
            breaker: BreakerPolicy::default(),
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            default_max_tokens: 8192,
            anthropic_version: "2023-06-01".to_owned(),
        })
    }

    /// `provider:model`.
    pub fn model_id(&self) -> String {
        format!("{}:{}", self.provider.as_str(), self.model)
    }

    /// Whether the base URL is the provider's public endpoint.
    pub fn is_public_endpoint(&self) -> bool {
        self.base_url.trim_end_matches('/') == self.provider.default_base_url()
    }

    /// Builder-style: the endpoint.
    #[must_use]
    pub fn with_base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = url.into();
        self
    }

    /// Builder-style: the key.
    #[must_use]
    pub fn with_api_key(mut self, key: Option<ApiKey>) -> Self {
        self.api_key = key;
        self
    }

    /// Builder-style: the per-attempt timeout.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Builder-style: the retry policy.
    #[must_use]
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Builder-style: the circuit breaker policy.
    #[must_use]
    pub fn with_breaker(mut self, breaker: BreakerPolicy) -> Self {
        self.breaker = breaker;
        self
    }

    /// Builder-style: the request size cap in bytes.
    #[must_use]
    pub fn with_max_request_bytes(mut self, bytes: usize) -> Self {
        self.max_request_bytes = bytes;
        self
    }

    /// Builder-style: the answer cap used when a request sets none.
    #[must_use]
    pub fn with_default_max_tokens(mut self, tokens: u32) -> Self {
        self.default_max_tokens = tokens;
        self
    }
}

/// Model settings as a user writes them, every field optional. Deserialize it from the
/// `[llm]` table of a config file; durations are text like `"90s"` or a number of seconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct LlmSettings {
    /// `provider:model`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The endpoint of `model` (and of fallback models of the same provider).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// The environment variable holding the key, instead of `OPENAI_API_KEY` /
    /// `ANTHROPIC_API_KEY`. `NUVIRA_LLM_API_KEY` still wins when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// Per-attempt timeout.
    #[serde(
        default,
        with = "nuvira_api::duration::serde_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub timeout: Option<Duration>,
    /// Attempts in all, the first one included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// Backoff before the first retry (doubled each retry, full jitter).
    #[serde(
        default,
        with = "nuvira_api::duration::serde_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub retry_base_delay: Option<Duration>,
    /// The longest wait between attempts, `Retry-After` included.
    #[serde(
        default,
        with = "nuvira_api::duration::serde_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub retry_max_delay: Option<Duration>,
    /// Consecutive failures that open a model's circuit breaker (0 = never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breaker_threshold: Option<u32>,
    /// How long an open breaker waits before a trial request.
    #[serde(
        default,
        with = "nuvira_api::duration::serde_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub breaker_cool_down: Option<Duration>,
    /// Request size cap in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_request_bytes: Option<usize>,
    /// Answer cap when a request sets none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Models to try, in order, when `model` is unavailable (`provider:model` each).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback_models: Option<Vec<String>>,
}

/// The environment variables [`LlmSettings::from_env`] reads.
pub mod env {
    /// `provider:model`.
    pub const MODEL: &str = "NUVIRA_MODEL";
    /// The endpoint.
    pub const BASE_URL: &str = "NUVIRA_LLM_BASE_URL";
    /// The key, for any provider.
    pub const API_KEY: &str = "NUVIRA_LLM_API_KEY";
    /// Per-attempt timeout (`"90s"`).
    pub const TIMEOUT: &str = "NUVIRA_LLM_TIMEOUT";
    /// Attempts in all.
    pub const MAX_ATTEMPTS: &str = "NUVIRA_LLM_MAX_ATTEMPTS";
    /// Comma-separated fallback models.
    pub const FALLBACK_MODELS: &str = "NUVIRA_LLM_FALLBACK_MODELS";
}

fn non_empty(v: Option<String>) -> Option<String> {
    v.map(|s| s.trim().to_owned()).filter(|s| !s.is_empty())
}

impl LlmSettings {
    /// Reads `NUVIRA_MODEL`, `NUVIRA_LLM_BASE_URL`, `NUVIRA_LLM_TIMEOUT`,
    /// `NUVIRA_LLM_MAX_ATTEMPTS` and `NUVIRA_LLM_FALLBACK_MODELS` from the process environment.
    ///
    /// # Errors
    /// [`LlmError::Config`] naming the variable when a value does not parse.
    pub fn from_env() -> Result<Self, LlmError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Like [`from_env`](Self::from_env), reading variables through `lookup`.
    ///
    /// # Errors
    /// [`LlmError::Config`] naming the variable when a value does not parse.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, LlmError> {
        let timeout = match non_empty(lookup(env::TIMEOUT)) {
            Some(t) => Some(nuvira_api::duration::parse(&t).map_err(|e| {
                LlmError::Config(format!("{} is not a duration: {e}", env::TIMEOUT))
            })?),
            None => None,
        };
        let max_attempts = match non_empty(lookup(env::MAX_ATTEMPTS)) {
            Some(n) => Some(n.parse::<u32>().map_err(|_| {
                LlmError::Config(format!(
                    "{} must be a whole number of attempts, got `{n}`",
                    env::MAX_ATTEMPTS
                ))
            })?),
            None => None,
        };
        let fallback_models = non_empty(lookup(env::FALLBACK_MODELS)).map(|list| {
            list.split(',')
                .map(|m| m.trim().to_owned())
                .filter(|m| !m.is_empty())
                .collect()
        });
        Ok(Self {
            model: non_empty(lookup(env::MODEL)),
            base_url: non_empty(lookup(env::BASE_URL)),
            timeout,
            max_attempts,
            fallback_models,
            ..Self::default()
        })
    }

    /// Every field set in `over` replaces the one here (env ← config file ← CLI flags).
    #[must_use]
    pub fn overridden_by(self, over: LlmSettings) -> Self {
        Self {
            model: over.model.or(self.model),
            base_url: over.base_url.or(self.base_url),
            api_key_env: over.api_key_env.or(self.api_key_env),
            timeout: over.timeout.or(self.timeout),
            max_attempts: over.max_attempts.or(self.max_attempts),
            retry_base_delay: over.retry_base_delay.or(self.retry_base_delay),
            retry_max_delay: over.retry_max_delay.or(self.retry_max_delay),
            breaker_threshold: over.breaker_threshold.or(self.breaker_threshold),
            breaker_cool_down: over.breaker_cool_down.or(self.breaker_cool_down),
            max_request_bytes: over.max_request_bytes.or(self.max_request_bytes),
            max_tokens: over.max_tokens.or(self.max_tokens),
            fallback_models: over.fallback_models.or(self.fallback_models),
        }
    }

    /// Resolves the settings into one configuration per model, `model` first, then the
    /// fallback models, reading keys from the process environment.
    ///
    /// # Errors
    /// See [`resolve_with`](Self::resolve_with).
    pub fn resolve(&self) -> Result<Vec<LlmConfig>, LlmError> {
        self.resolve_with(|name| std::env::var(name).ok())
    }

    /// Like [`resolve`](Self::resolve), reading key variables through `lookup`.
    ///
    /// Keys: `NUVIRA_LLM_API_KEY`, else the variable named by `api_key_env`, else the
    /// provider's own (`OPENAI_API_KEY`, `ANTHROPIC_API_KEY`). `base_url`,
    /// `NUVIRA_LLM_API_KEY` and `api_key_env` belong to the primary model's provider; a
    /// fallback model of another provider uses that provider's public endpoint and key variable.
    ///
    /// # Errors
    /// [`LlmError::Config`] when no model is set, a model is not `provider:model`, or a model
    /// at a public endpoint has no key (a local server, any other base URL, may have none).
    pub fn resolve_with(
        &self,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Vec<LlmConfig>, LlmError> {
        let Some(primary) = self.model.as_deref() else {
            return Err(LlmError::Config(format!(
                "no model is set: set {} (e.g. `openai:gpt-4.1`) or `model` in the [llm] config",
                env::MODEL
            )));
        };
        let (primary_provider, _) = parse_model(primary)?;
        let mut specs = vec![primary.to_owned()];
        specs.extend(self.fallback_models.iter().flatten().cloned());
        let mut out = Vec::with_capacity(specs.len());
        for spec in specs {
            let mut cfg = LlmConfig::new(&spec)?;
            let same = cfg.provider == primary_provider;
            if same && let Some(url) = &self.base_url {
                cfg.base_url = url.clone();
            }
            let key_vars: Vec<&str> = if same {
                vec![
                    env::API_KEY,
                    self.api_key_env
                        .as_deref()
                        .unwrap_or(cfg.provider.default_key_env()),
                ]
            } else {
                vec![cfg.provider.default_key_env()]
            };
            for var in &key_vars {
                if let Some(key) = lookup(var).and_then(ApiKey::new) {
                    cfg.api_key = Some(key);
                    cfg.api_key_source = Some((*var).to_owned());
                    break;
                }
            }
            if cfg.api_key.is_none() && cfg.is_public_endpoint() {
                return Err(LlmError::Config(format!(
                    "no api key for {}: set {}",
                    cfg.model_id(),
                    key_vars.join(" or ")
                )));
            }
            if let Some(t) = self.timeout {
                cfg.timeout = t;
            }
            if let Some(n) = self.max_attempts {
                cfg.retry = cfg.retry.with_max_attempts(n);
            }
            if let Some(d) = self.retry_base_delay {
                cfg.retry.base_delay = d;
            }
            if let Some(d) = self.retry_max_delay {
                cfg.retry.max_delay = d;
            }
            if let Some(n) = self.breaker_threshold {
                cfg.breaker.failure_threshold = n;
            }
            if let Some(d) = self.breaker_cool_down {
                cfg.breaker.cool_down = d;
            }
            if let Some(n) = self.max_request_bytes {
                cfg.max_request_bytes = n;
            }
            if let Some(n) = self.max_tokens {
                cfg.default_max_tokens = n;
            }
            out.push(cfg);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn lookup(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn env_then_file_then_flags() {
        let env = LlmSettings::from_lookup(lookup(&[
            ("NUVIRA_MODEL", "openai:gpt-4.1"),
            ("NUVIRA_LLM_TIMEOUT", "90s"),
            (
                "NUVIRA_LLM_FALLBACK_MODELS",
                "anthropic:claude-sonnet-4-5, openai:gpt-4.1-mini",
            ),
        ]))
        .unwrap();
        let file: LlmSettings = toml_like(
            r#"{"base_url": "http://127.0.0.1:11434/v1", "max_attempts": 2, "timeout": "30s"}"#,
        );
        let flags = LlmSettings {
            model: Some("openai:qwen2.5-coder".into()),
            ..LlmSettings::default()
        };
        let s = env.overridden_by(file).overridden_by(flags);
        let cfgs = s
            .resolve_with(lookup(&[("ANTHROPIC_API_KEY", "sk-ant-xyz")]))
            .unwrap();
        assert_eq!(cfgs.len(), 3);
        assert_eq!(cfgs[0].model_id(), "openai:qwen2.5-coder");
        assert_eq!(cfgs[0].base_url, "http://127.0.0.1:11434/v1");
        assert_eq!(cfgs[0].timeout, Duration::from_secs(30));
        assert_eq!(cfgs[0].retry.max_attempts, 2);
        assert!(cfgs[0].api_key.is_none(), "a local server needs no key");
        assert_eq!(cfgs[1].base_url, "https://api.anthropic.com");
        assert_eq!(cfgs[1].api_key_source.as_deref(), Some("ANTHROPIC_API_KEY"));
        // openai fallback on the same (local) base URL: fine without a key.
        assert_eq!(cfgs[2].base_url, "http://127.0.0.1:11434/v1");
    }

    fn toml_like(json: &str) -> LlmSettings {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn the_config_file_table_reads_durations_and_rejects_unknown_keys() {
        let file: LlmSettings = toml::from_str(
            r#"
model = "anthropic:claude-sonnet-4-5"
api_key_env = "WORK_ANTHROPIC_KEY"
timeout = "90s"
retry_max_delay = 20
breaker_cool_down = "1m"
fallback_models = ["openai:gpt-4.1"]
"#,
        )
        .unwrap();
        assert_eq!(file.timeout, Some(Duration::from_secs(90)));
        assert_eq!(file.retry_max_delay, Some(Duration::from_secs(20)));
        assert_eq!(file.breaker_cool_down, Some(Duration::from_secs(60)));
        let e = toml::from_str::<LlmSettings>("modle = \"x\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `modle`"), "{e}");
    }

    #[test]
    fn key_order_and_missing_key_message() {
        let s = LlmSettings {
            model: Some("openai:gpt-4.1".into()),
            api_key_env: Some("MY_KEY".into()),
            ..LlmSettings::default()
        };
        let c = s
            .resolve_with(lookup(&[("MY_KEY", "a-key"), ("OPENAI_API_KEY", "other")]))
            .unwrap();
        assert_eq!(c[0].api_key_source.as_deref(), Some("MY_KEY"));
        let c = s
            .resolve_with(lookup(&[
                ("MY_KEY", "a-key"),
                ("NUVIRA_LLM_API_KEY", "first"),
            ]))
            .unwrap();
        assert_eq!(c[0].api_key, ApiKey::new("first"));
        let err = s.resolve_with(lookup(&[])).unwrap_err().to_string();
        assert_eq!(
            err,
            "model not configured: no api key for openai:gpt-4.1: set NUVIRA_LLM_API_KEY or MY_KEY"
        );
    }

    #[test]
    fn bad_values_name_the_variable() {
        let e = LlmSettings::from_lookup(lookup(&[("NUVIRA_LLM_MAX_ATTEMPTS", "lots")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("NUVIRA_LLM_MAX_ATTEMPTS"), "{e}");
        let e = LlmSettings::default()
            .resolve_with(lookup(&[]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("NUVIRA_MODEL"), "{e}");
        let e = parse_model("gemini:pro").unwrap_err().to_string();
        assert!(e.contains("unknown provider `gemini`"), "{e}");
    }
}
