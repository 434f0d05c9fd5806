//! A circuit breaker per model.

use nuvira_api::LlmError;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Where a [`CircuitBreaker`] reads the time: [`SystemClock`] unless a test gives it a
/// [`ManualClock`], so that a cool-down can pass without waiting for it.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The time now.
    fn now(&self) -> Instant;
}

/// The real clock ([`Instant::now`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A clock that stands still until [`advance`](Self::advance)d, for tests of cool-downs.
///
/// ```
/// use nuvira_llm::{BreakerPolicy, BreakerState, CircuitBreaker, ManualClock};
/// use std::{sync::Arc, time::Duration};
///
/// let clock = Arc::new(ManualClock::new());
/// let b = CircuitBreaker::new("m", BreakerPolicy::new(1, Duration::from_secs(30)))
///     .with_clock(clock.clone());
/// b.acquire().unwrap().record(&Err::<(), _>(nuvira_api::LlmError::Timeout));
/// assert_eq!(b.state(), BreakerState::Open);
/// clock.advance(Duration::from_secs(30));
/// assert_eq!(b.state(), BreakerState::HalfOpen);
/// ```
#[derive(Debug)]
pub struct ManualClock {
    start: Instant,
    elapsed: Mutex<Duration>,
}

impl ManualClock {
    /// A clock standing at the time it was made.
    pub fn new() -> Self {
        Self {
            start: Instant::now(),
            elapsed: Mutex::new(Duration::ZERO),
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        *self.elapsed.lock().unwrap_or_else(PoisonError::into_inner) += by;
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.start + *self.elapsed.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

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
    clock: Arc<dyn Clock>,
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
            clock: Arc::new(SystemClock),
        }
    }

    /// Builder-style: reads the time from `clock` (default: [`SystemClock`]). Set it before
    /// handing out clones: a clone shares the breaker's state and keeps the clock it had.
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
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
        let now = self.clock.now();
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
        let now = self.clock.now();
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

    fn record(&self, failed: bool, trial: bool) {
        if self.policy.failure_threshold == 0 {
            return;
        }
        let now = self.clock.now();
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
    pub fn record<T>(mut self, outcome: &Result<T, LlmError>) {
        let failed = matches!(outcome, Err(e) if is_availability_error(e));
        self.breaker.record(failed, self.trial);
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
        let clock = Arc::new(ManualClock::new());
        let b = CircuitBreaker::new("openai:m", BreakerPolicy::new(2, Duration::from_secs(10)))
            .with_clock(clock.clone());
        let fail: Result<(), LlmError> = Err(LlmError::Timeout);
        // A success in between resets the count.
        b.acquire().unwrap().record(&fail);
        b.acquire().unwrap().record(&Ok::<(), LlmError>(()));
        b.acquire().unwrap().record(&fail);
        assert_eq!(b.state(), BreakerState::Closed);
        // Refusals do not count.
        b.acquire()
            .unwrap()
            .record(&Err::<(), _>(LlmError::Refused("no".into())));
        b.acquire().unwrap().record(&fail);
        b.acquire().unwrap().record(&fail);
        assert_eq!(b.state(), BreakerState::Open);
        assert_eq!(
            b.acquire().unwrap_err(),
            LlmError::CircuitOpen("openai:m".into())
        );
        // Still open just before the cool-down ends.
        clock.advance(Duration::from_secs(10) - Duration::from_millis(1));
        assert_eq!(b.state(), BreakerState::Open);
        clock.advance(Duration::from_millis(1));
        assert_eq!(b.state(), BreakerState::HalfOpen);
        let trial = b.acquire().unwrap();
        // Only one trial at a time.
        assert!(b.acquire().is_err());
        // A failed trial re-opens it, for a whole cool-down.
        trial.record(&fail);
        assert!(b.acquire().is_err());
        clock.advance(Duration::from_secs(9));
        assert_eq!(b.state(), BreakerState::Open);
        clock.advance(Duration::from_secs(1));
        let trial = b.acquire().unwrap();
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
