//! [`HttpLlm`]: the real transport, one model over HTTP.

use crate::breaker::CircuitBreaker;
use crate::config::{LlmConfig, Provider};
use crate::secret::redact;
use crate::wire::{display_url, error_detail};
use crate::{anthropic, openai};
use nuvira_api::{LlmClient, LlmError, LlmRequest, LlmResponse, async_trait};
use reqwest::header::{HeaderMap, HeaderValue};
use std::fmt;
use std::time::{Duration, SystemTime};

/// A chat model reached over HTTP, speaking the OpenAI-compatible Chat Completions API or
/// Anthropic's Messages API.
///
/// Each [`complete`](LlmClient::complete) call:
/// 1. serializes the body and fails with [`LlmError::TooLarge`] above `max_request_bytes`,
///    before any connection is made;
/// 2. asks the model's [`CircuitBreaker`] ([`LlmError::CircuitOpen`] while it is open);
/// 3. sends, bounding each attempt by `timeout` ([`LlmError::Timeout`]);
/// 4. retries 429, 408, 5xx and broken connections up to `max_attempts`, waiting the
///    provider's `Retry-After` (or `retry-after-ms`) when given, else exponential backoff with
///    full jitter, never longer than `max_delay`;
/// 5. reads the answer: text, JSON for schema requests, usage, model; refusals become
///    [`LlmError::Refused`].
///
/// The key goes into one header marked sensitive and is cut out of every message.
pub struct HttpLlm {
    config: LlmConfig,
    model_id: String,
    url: String,
    http: reqwest::Client,
    breaker: CircuitBreaker,
}

impl fmt::Debug for HttpLlm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpLlm")
            .field("model", &self.model_id)
            .field("url", &display_url(&self.url))
            .field("api_key", &self.config.api_key)
            .field("breaker", &self.breaker.state())
            .finish_non_exhaustive()
    }
}

/// One failed attempt and whether another may follow.
struct AttemptError {
    error: LlmError,
    retryable: bool,
    retry_after: Option<Duration>,
}

impl AttemptError {
    fn fatal(error: LlmError) -> Self {
        Self {
            error,
            retryable: false,
            retry_after: None,
        }
    }
}

impl HttpLlm {
    /// A transport for one model.
    ///
    /// # Errors
    /// [`LlmError::Config`] when the base URL is not an `http`/`https` URL, the key cannot go
    /// into a header, or the HTTP client cannot be built.
    pub fn new(config: LlmConfig) -> Result<Self, LlmError> {
        let model_id = config.model_id();
        let base = match reqwest::Url::parse(config.base_url.trim()) {
            Ok(u) if matches!(u.scheme(), "http" | "https") => u,
            _ => {
                return Err(LlmError::Config(format!(
                    "base url `{}` of {model_id} is not an http(s) url: set NUVIRA_LLM_BASE_URL to e.g. `http://127.0.0.1:11434/v1`",
                    display_url(&config.base_url)
                )));
            }
        };
        let url = match config.provider {
            Provider::OpenAi => openai::endpoint(&base),
            Provider::Anthropic => anthropic::endpoint(&base),
        }
        .to_string();
        let mut headers = HeaderMap::new();
        if let Some(key) = &config.api_key {
            let (name, value) = match config.provider {
                Provider::OpenAi => ("authorization", format!("Bearer {}", key.expose())),
                Provider::Anthropic => ("x-api-key", key.expose().to_owned()),
            };
            let mut value = HeaderValue::from_str(&value).map_err(|_| {
                LlmError::Config(format!(
                    "the api key for {model_id} contains characters not allowed in an http header"
                ))
            })?;
            value.set_sensitive(true);
            headers.insert(name, value);
        }
        if config.provider == Provider::Anthropic {
            let version = HeaderValue::from_str(&config.anthropic_version).map_err(|_| {
                LlmError::Config("the anthropic-version setting is not a valid header value".into())
            })?;
            headers.insert("anthropic-version", version);
        }
        let http = reqwest::Client::builder()
            .default_headers(headers)
            .connect_timeout(config.connect_timeout)
            .user_agent(concat!("nuvira/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| LlmError::Config(format!("could not build the http client: {e}")))?;
        let breaker = CircuitBreaker::new(model_id.clone(), config.breaker);
        Ok(Self {
            config,
            model_id,
            url,
            http,
            breaker,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &LlmConfig {
        &self.config
    }

    /// Builder-style: the model's circuit breaker reads the time from `clock` (tests pass a
    /// [`ManualClock`](crate::ManualClock) to end a cool-down without waiting).
    #[must_use]
    pub fn with_breaker_clock(mut self, clock: std::sync::Arc<dyn crate::Clock>) -> Self {
        self.breaker = self.breaker.with_clock(clock);
        self
    }

    /// The model's circuit breaker (a handle to the same breaker this client uses).
    pub fn breaker(&self) -> &CircuitBreaker {
        &self.breaker
    }

    /// The URL requests go to.
    pub fn endpoint(&self) -> &str {
        &self.url
    }

    fn body(&self, req: &LlmRequest) -> serde_json::Value {
        match self.config.provider {
            Provider::OpenAi => openai::request_body(&self.config, req),
            Provider::Anthropic => anthropic::request_body(&self.config, req),
        }
    }

    fn redact(&self, text: &str) -> String {
        redact(self.config.api_key.as_ref(), text)
    }

    async fn attempt(&self, body: &[u8]) -> Result<(u16, HeaderMap, Vec<u8>), AttemptError> {
        let send = async {
            let resp = self
                .http
                .post(&self.url)
                .header("content-type", "application/json")
                .body(body.to_vec())
                .send()
                .await?;
            let status = resp.status().as_u16();
            let headers = resp.headers().clone();
            let bytes = resp.bytes().await?;
            Ok::<_, reqwest::Error>((status, headers, bytes.to_vec()))
        };
        match tokio::time::timeout(self.config.timeout, send).await {
            Err(_) => Err(AttemptError {
                error: LlmError::Timeout,
                retryable: self.config.retry.retry_timeouts,
                retry_after: None,
            }),
            Ok(Err(e)) => Err(AttemptError {
                error: LlmError::Provider(self.transport_message(&e)),
                retryable: true,
                retry_after: None,
            }),
            Ok(Ok(answer)) => Ok(answer),
        }
    }

    /// "could not reach URL: cause: cause", without the key and without reqwest's own URL
    /// (which could carry user info).
    fn transport_message(&self, e: &reqwest::Error) -> String {
        let what = if e.is_connect() {
            "could not connect to"
        } else if e.is_timeout() {
            "timed out connecting to"
        } else if e.is_body() || e.is_decode() {
            "the answer broke off from"
        } else {
            "the request failed at"
        };
        let mut msg = format!("{what} {}", display_url(&self.url));
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            msg.push_str(": ");
            msg.push_str(&s.to_string());
            source = s.source();
        }
        self.redact(&msg)
    }

    fn status_error(&self, status: u16, headers: &HeaderMap, body: &[u8]) -> AttemptError {
        let (detail, code) = error_detail(body);
        let detail = self.redact(&detail);
        let code = code.unwrap_or_default();
        let id = &self.model_id;
        match status {
            429 => AttemptError {
                error: LlmError::RateLimited {
                    retry_after: retry_after(headers),
                },
                retryable: true,
                retry_after: retry_after(headers),
            },
            408 | 500..=599 => AttemptError {
                error: LlmError::Provider(format!("{id} answered http {status}: {detail}")),
                retryable: true,
                retry_after: retry_after(headers),
            },
            401 | 403 => {
                let source = self
                    .config
                    .api_key_source
                    .as_deref()
                    .unwrap_or("NUVIRA_LLM_API_KEY");
                AttemptError::fatal(LlmError::Config(format!(
                    "{id} rejected the api key (http {status}: {detail}); check {source}"
                )))
            }
            404 => AttemptError::fatal(LlmError::Config(format!(
                "{id} is not served at {} (http 404: {detail}); check the model name and NUVIRA_LLM_BASE_URL",
                display_url(&self.url)
            ))),
            413 => AttemptError::fatal(LlmError::TooLarge(format!(
                "{id} refused the request as too large (http 413: {detail})"
            ))),
            400 if code.contains("context_length")
                || detail.contains("prompt is too long")
                || detail.contains("maximum context length") =>
            {
                AttemptError::fatal(LlmError::TooLarge(format!(
                    "the prompt does not fit the context window of {id}: {detail}"
                )))
            }
            _ => AttemptError::fatal(LlmError::Provider(format!(
                "{id} rejected the request (http {status}: {detail})"
            ))),
        }
    }

    async fn send_with_retries(
        &self,
        req: &LlmRequest,
        body: &[u8],
    ) -> Result<LlmResponse, LlmError> {
        let policy = self.config.retry;
        let mut attempt = 1;
        loop {
            let failure = match self.attempt(body).await {
                Ok((status, _, bytes)) if (200..300).contains(&status) => {
                    let parsed = match self.config.provider {
                        Provider::OpenAi => openai::parse_response(&self.config, req, &bytes),
                        Provider::Anthropic => anthropic::parse_response(&self.config, req, &bytes),
                    };
                    return parsed.map_err(|e| redact_error(&self.config, e));
                }
                Ok((status, headers, bytes)) => self.status_error(status, &headers, &bytes),
                Err(e) => e,
            };
            if !failure.retryable || attempt >= policy.max_attempts {
                return Err(failure.error);
            }
            let wait = policy.delay(attempt - 1, failure.retry_after);
            tracing::warn!(
                model = %self.model_id,
                attempt,
                error = %failure.error,
                wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                "model request failed; retrying"
            );
            tokio::time::sleep(wait).await;
            crate::retry::note_retry();
            attempt += 1;
        }
    }
}

fn redact_error(config: &LlmConfig, e: LlmError) -> LlmError {
    let s = |t: String| redact(config.api_key.as_ref(), &t);
    match e {
        LlmError::Refused(t) => LlmError::Refused(s(t)),
        LlmError::InvalidOutput(t) => LlmError::InvalidOutput(s(t)),
        LlmError::Provider(t) => LlmError::Provider(s(t)),
        other => other,
    }
}

/// `retry-after-ms` (OpenAI) or `Retry-After` (seconds or an HTTP date).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    if let Some(ms) = headers
        .get("retry-after-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|ms| ms.is_finite() && *ms >= 0.0 && *ms < 1e12)
    {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let value = headers.get("retry-after")?.to_str().ok()?;
    crate::retry::parse_retry_after(value, SystemTime::now())
}

#[async_trait]
impl LlmClient for HttpLlm {
    fn model(&self) -> &str {
        &self.model_id
    }

    async fn complete(&self, request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        let body = serde_json::to_vec(&self.body(request)).map_err(|e| {
            LlmError::InvalidOutput(format!("could not serialize the request: {e}"))
        })?;
        if body.len() > self.config.max_request_bytes {
            return Err(LlmError::TooLarge(format!(
                "the request to {} is {} bytes, over the cap of {} bytes (max_request_bytes): send less context",
                self.model_id,
                body.len(),
                self.config.max_request_bytes
            )));
        }
        let permit = self.breaker.acquire()?;
        let outcome = self.send_with_retries(request, &body).await;
        permit.record(&outcome);
        if let Err(e) = &outcome {
            tracing::debug!(model = %self.model_id, error = %e, "model request failed");
        }
        outcome.map_err(|e| redact_error(&self.config, e))
    }

    fn open_circuits(&self) -> Vec<String> {
        if self.breaker.is_open() {
            vec![self.model_id.clone()]
        } else {
            Vec::new()
        }
    }
}
