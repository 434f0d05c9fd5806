//! [`FallbackClient`]: several models, tried in order while the preferred ones are unavailable.

use crate::breaker::{BreakerPolicy, BreakerState, CircuitBreaker, is_availability_error};
use crate::http::HttpLlm;
use nuvira_api::{LlmClient, LlmError, LlmRequest, LlmResponse, async_trait};
use std::sync::Arc;

struct Member {
    client: Arc<dyn LlmClient>,
    breaker: CircuitBreaker,
    /// Whether this router records outcomes in the breaker (false when the client does).
    records: bool,
}

/// A router over a primary model and its `fallback_models`.
///
/// A request goes to its preferred model ([`LlmRequest::model`], when it names a member) or
/// the primary, then to each other model in order while the answer is an availability error
/// (time-out, 429 or 5xx after retries, broken connection, open breaker). Other errors —
/// refusals, invalid answers, oversized requests, bad configuration — are returned at once:
/// another model would not fix them, or should not be asked silently.
///
/// [`open_circuits`](LlmClient::open_circuits) lists the members whose breaker is open, for
/// the switch-model repair strategy.
pub struct FallbackClient {
    members: Vec<Member>,
}

impl std::fmt::Debug for FallbackClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FallbackClient")
            .field("models", &self.breaker_states())
            .finish()
    }
}

impl FallbackClient {
    /// A router over HTTP models, the first one primary; each keeps its own breaker.
    ///
    /// # Errors
    /// [`LlmError::Config`] when `clients` is empty.
    pub fn from_http(clients: Vec<HttpLlm>) -> Result<Self, LlmError> {
        if clients.is_empty() {
            return Err(LlmError::Config(
                "a fallback router needs at least one model".into(),
            ));
        }
        Ok(Self {
            members: clients
                .into_iter()
                .map(|c| {
                    let breaker = c.breaker().clone();
                    Member {
                        client: Arc::new(c),
                        breaker,
                        records: false,
                    }
                })
                .collect(),
        })
    }

    /// A router over any clients (scripted ones in tests); the router keeps a breaker per
    /// client with `policy`.
    ///
    /// # Errors
    /// [`LlmError::Config`] when `clients` is empty.
    pub fn new(clients: Vec<Arc<dyn LlmClient>>, policy: BreakerPolicy) -> Result<Self, LlmError> {
        if clients.is_empty() {
            return Err(LlmError::Config(
                "a fallback router needs at least one model".into(),
            ));
        }
        Ok(Self {
            members: clients
                .into_iter()
                .map(|client| Member {
                    breaker: CircuitBreaker::new(client.model(), policy),
                    client,
                    records: true,
                })
                .collect(),
        })
    }

    /// Each model with its breaker's state, primary first.
    pub fn breaker_states(&self) -> Vec<(String, BreakerState)> {
        self.members
            .iter()
            .map(|m| (m.client.model().to_owned(), m.breaker.state()))
            .collect()
    }

    /// The models whose breaker is open right now.
    pub fn open_breakers(&self) -> Vec<String> {
        self.breaker_states()
            .into_iter()
            .filter(|(_, s)| *s == BreakerState::Open)
            .map(|(m, _)| m)
            .collect()
    }

    fn order(&self, preferred: Option<&str>) -> Vec<&Member> {
        let first = preferred
            .and_then(|p| self.members.iter().position(|m| m.client.model() == p))
            .unwrap_or(0);
        let mut order = Vec::with_capacity(self.members.len());
        order.extend(self.members.get(first));
        order.extend(
            self.members
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != first)
                .map(|(_, m)| m),
        );
        order
    }

    async fn try_member(&self, m: &Member, request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        if m.records {
            let permit = m.breaker.acquire()?;
            let outcome = m.client.complete(request).await;
            permit.record(&outcome);
            outcome
        } else {
            m.client.complete(request).await
        }
    }
}

#[async_trait]
impl LlmClient for FallbackClient {
    fn model(&self) -> &str {
        self.members.first().map_or("", |m| m.client.model())
    }

    async fn complete(&self, request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        let mut open = Vec::new();
        let mut last = None;
        // A model tried after an availability error is the request sent again: a retry.
        let mut pending_retry = false;
        for m in self.order(request.model.as_deref()) {
            if std::mem::take(&mut pending_retry) {
                crate::retry::note_retry();
            }
            match self.try_member(m, request).await {
                Ok(r) => return Ok(r),
                Err(LlmError::CircuitOpen(model)) => open.push(model),
                Err(e) if is_availability_error(&e) => {
                    tracing::warn!(model = %m.client.model(), error = %e, "model unavailable; trying the next one");
                    last = Some(e);
                    pending_retry = true;
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| LlmError::CircuitOpen(open.join(", "))))
    }

    fn models(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| m.client.model().to_owned())
            .collect()
    }

    fn open_circuits(&self) -> Vec<String> {
        self.open_breakers()
    }
}
