//! A circuit breaker per model.

use nuvira_api::LlmError;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// When a breaker opens and how long it stays open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct BreakerPolicy {
    /// Consecutive failed requests (after their retries) that open the breaker; 0 disables it.
    pub failure_threshold: u32,
    /// How long an open breaker refuses requests before it lets one trial request through.
    pub cool_down: Duration,
}

impl Default for BreakerPolicy {
    fn default() -> Self {
        Self {
            failure_threshold: 5,
            cool_down: Duration::from_secs(30),
        }
    }
}

impl BreakerPolicy {
    /// A policy with this threshold and cool-down.
    pub fn new(failure_threshold: u32, cool_down: Duration) -> Self {
        Self {
            failure_threshold,
            cool_down,
        }
    }
}

/// What a breaker does with the next request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Requests go through.
    Closed,
    /// Requests fail fast with [`LlmError::CircuitOpen`].
    Open,
    /// The cool-down is over: one trial request goes through; its outcome closes or re-opens
    /// the breaker.
    HalfOpen,
}

#[derive(Debug)]
enum State {
    Closed { failures: u32 },
    Open { until: Instant },
    HalfOpen { trial_in_flight: bool },
}

/// A circuit breaker for one model: it opens after `failure_threshold` consecutive failures
/// (time-outs, 429s and 5xx after retries, broken connections), refuses requests during the
/// cool-down, then lets a single trial request through ("half-open").
///
/// Cloning gives another handle to the same breaker.
#[derive(Debug, Clone)]
pub struct CircuitBreaker {
    model: Arc<str>,
    policy: BreakerPolicy,
    state: Arc<Mutex<State>>,
}

/// Permission to send one request; report its outcome with [`Permit::record`]. Dropping a
/// permit unreported (the request was cancelled) frees a half-open trial slot.
#[derive(Debug)]
#[must_use = "report the request's outcome with Permit::record"]
pub struct Permit {
    breaker: CircuitBreaker,
    trial: bool,
    done: bool,
}

impl CircuitBreaker {
    /// A closed breaker for `model` (`provider:model`, used in the error message).
    pub fn new(model: impl Into<String>, policy: BreakerPolicy) -> Self {
        Self {
            model: Arc::from(model.into()),
            policy,
            state: Arc::new(Mutex::new(State::Closed { failures: 0 })),
        }
    }

    /// The model this breaker guards.
    pub fn model(&self) -> &str {
        &self.model
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is a few integers updated atomically under the lock: a panic elsewhere
        // cannot leave it half-written, so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The state right now (an open breaker whose cool-down has passed reports half-open).
    pub fn state(&self) -> BreakerState {
        self.state_at(Instant::now())
    }

    fn state_at(&self, now: Instant) -> BreakerState {
        match *self.lock() {
            State::Closed { .. } => BreakerState::Closed,
            State::Open { until } if now < until => BreakerState::Open,
            State::Open { .. } | State::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }

    /// Whether requests fail fast right now.
    pub fn is_open(&self) -> bool {
        self.state() == BreakerState::Open
    }

    /// Asks to send a request.
    ///
    /// # Errors
    /// [`LlmError::CircuitOpen`] while the breaker is open, or half-open with its trial request
    /// still in flight.
    pub fn acquire(&self) -> Result<Permit, LlmError> {
        self.acquire_at(Instant::now())
    }

    fn acquire_at(&self, now: Instant) -> Result<Permit, LlmError> {
        let mut state = self.lock();
        let trial = match *state {
            State::Closed { .. } => false,
            State::Open { until } if now < until => {
                return Err(LlmError::CircuitOpen(self.model.to_string()));
            }
            State::Open { .. }
            | State::HalfOpen {
                trial_in_flight: false,
            } => {
                *state = State::HalfOpen {
                    trial_in_flight: true,
                };
                true
            }
            State::HalfOpen {
                trial_in_flight: true,
            } => return Err(LlmError::CircuitOpen(self.model.to_string())),
        };
        drop(state);
        Ok(Permit {
            breaker: self.clone(),
            trial,
            done: false,
        })
    }

    fn record_at(&self, failed: bool, trial: bool, now: Instant) {
        if self.policy.failure_threshold == 0 {
            return;
        }
        let mut state = self.lock();
        let open = State::Open {
            until: now + self.policy.cool_down,
        };
        *state = match (&*state, failed) {
            (_, false) => State::Closed { failures: 0 },
            (State::HalfOpen { .. }, true) if trial => open,
            (State::Closed { failures }, true) => {
                let failures = failures.saturating_add(1);
                if failures >= self.policy.failure_threshold {
                    tracing::warn!(model = %self.model, failures, "circuit breaker opened");
                    open
                } else {
                    State::Closed { failures }
                }
            }
            // A late failure of a request sent before the breaker opened changes nothing.
            (State::Open { until }, true) => State::Open { until: *until },
            (State::HalfOpen { trial_in_flight }, true) => State::HalfOpen {
                trial_in_flight: *trial_in_flight,
            },
        };
    }
}

/// Whether an error says the model is unavailable (it counts towards opening the breaker and
/// makes a fallback router try the next model). Refusals, invalid answers, oversized requests
/// and configuration errors come from a model that is up, so they do not.
pub fn is_availability_error(error: &LlmError) -> bool {
    matches!(
        error,
        LlmError::Timeout
            | LlmError::Provider(_)
            | LlmError::RateLimited { .. }
            | LlmError::CircuitOpen(_)
    )
}

impl Permit {
    /// Reports how the request ended.
    pub fn record<T>(self, outcome: &Result<T, LlmError>) {
        self.record_at(outcome, Instant::now());
    }

    fn record_at<T>(mut self, outcome: &Result<T, LlmError>, now: Instant) {
        let failed = matches!(outcome, Err(e) if is_availability_error(e));
        self.breaker.record_at(failed, self.trial, now);
        self.done = true;
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if self.done || !self.trial {
            return;
        }
        let mut state = self.breaker.lock();
        if let State::HalfOpen { .. } = *state {
            *state = State::HalfOpen {
                trial_in_flight: false,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_consecutive_failures_then_half_opens_after_the_cool_down() {
        let b = CircuitBreaker::new("openai:m", BreakerPolicy::new(2, Duration::from_secs(10)));
        let t0 = Instant::now();
        let fail: Result<(), LlmError> = Err(LlmError::Timeout);
        // A success in between resets the count.
        b.acquire_at(t0).unwrap().record(&fail);
        b.acquire_at(t0).unwrap().record(&Ok::<(), LlmError>(()));
        b.acquire_at(t0).unwrap().record(&fail);
        assert_eq!(b.state_at(t0), BreakerState::Closed);
        // Refusals do not count.
        b.acquire_at(t0)
            .unwrap()
            .record(&Err::<(), _>(LlmError::Refused("no".into())));
        b.acquire_at(t0).unwrap().record(&fail);
        b.acquire_at(t0).unwrap().record(&fail);
        let t1 = Instant::now();
        assert_eq!(b.state_at(t1), BreakerState::Open);
        assert_eq!(
            b.acquire_at(t1).unwrap_err(),
            LlmError::CircuitOpen("openai:m".into())
        );
        let later = t1 + Duration::from_secs(11);
        assert_eq!(b.state_at(later), BreakerState::HalfOpen);
        let trial = b.acquire_at(later).unwrap();
        // Only one trial at a time.
        assert!(b.acquire_at(later).is_err());
        // A failed trial re-opens it.
        trial.record_at(&fail, later);
        assert!(b.acquire_at(later).is_err());
        let much_later = later + Duration::from_secs(11);
        let trial = b.acquire_at(much_later).unwrap();
        trial.record(&Ok::<(), LlmError>(()));
        assert_eq!(b.state(), BreakerState::Closed);
    }

    #[test]
    fn a_cancelled_trial_frees_the_slot() {
        let b = CircuitBreaker::new("m", BreakerPolicy::new(1, Duration::ZERO));
        b.acquire()
            .unwrap()
            .record(&Err::<(), _>(LlmError::Timeout));
        let trial = b.acquire().unwrap();
        assert!(b.acquire().is_err());
        drop(trial);
        assert!(b.acquire().is_ok());
    }
}
