//! Retries: exponential backoff with full jitter, and `Retry-After` parsing.

use rand::Rng;
use std::cell::Cell;
use std::future::Future;
use std::time::{Duration, SystemTime};

tokio::task_local! {
    /// The retries counted for the model call [`count_retries`] runs on this task.
    static RETRIES: Cell<u32>;
}

/// Runs `call` (one model request through any client of this crate: [`HttpLlm`](crate::HttpLlm),
/// [`FallbackClient`](crate::FallbackClient), or a wrapper around them) and counts its retries:
/// each time a transport sent the request again after a failure (429, 408, 5xx, a broken
/// connection), and each time a fallback client passed it on to its next model after an
/// availability error. Returns `call`'s output and the count (0 for clients that never retry,
/// such as the scripted one).
///
/// The count is kept in a tokio task-local, so it sees the retries made on the task that
/// awaits `call` (every client of this crate retries in place); calls on other tasks have
/// counts of their own.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let (out, retries) = nuvira_llm::count_retries(async { 42 }).await;
/// assert_eq!((out, retries), (42, 0));
/// # });
/// ```
pub async fn count_retries<F: Future>(call: F) -> (F::Output, u32) {
    RETRIES
        .scope(Cell::new(0), async move {
            let out = call.await;
            (out, RETRIES.with(Cell::get))
        })
        .await
}

/// Counts one retry for the [`count_retries`] around this task's call, if there is one.
pub(crate) fn note_retry() {
    let _ = RETRIES.try_with(|n| n.set(n.get().saturating_add(1)));
}

/// How a transport retries a request that failed with 429, a 5xx status or a broken connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Attempts in all, the first one included (1 = never retry).
    pub max_attempts: u32,
    /// The backoff before the first retry, doubled for each further retry (before jitter).
    pub base_delay: Duration,
    /// No wait is longer than this, including a provider's `Retry-After`.
    pub max_delay: Duration,
    /// Whether a request that timed out is retried (off by default: a server that hung once
    /// tends to hang again, and the caller's repair budget is the better place to decide).
    pub retry_timeouts: bool,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 4,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
            retry_timeouts: false,
        }
    }
}

impl RetryPolicy {
    /// A policy that never retries.
    pub fn never() -> Self {
        Self {
            max_attempts: 1,
            ..Self::default()
        }
    }

    /// Builder-style: attempts in all (at least 1).
    #[must_use]
    pub fn with_max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = n.max(1);
        self
    }

    /// Builder-style: base and maximum delays.
    #[must_use]
    pub fn with_delays(mut self, base: Duration, max: Duration) -> Self {
        self.base_delay = base;
        self.max_delay = max;
        self
    }

    /// Builder-style: whether timeouts are retried.
    #[must_use]
    pub fn with_retry_timeouts(mut self, yes: bool) -> Self {
        self.retry_timeouts = yes;
        self
    }

    /// The exponential ceiling before retry number `retry` (0 for the first retry):
    /// `min(max_delay, base_delay * 2^retry)`.
    pub fn ceiling(&self, retry: u32) -> Duration {
        let factor = 1u32.checked_shl(retry.min(30)).unwrap_or(u32::MAX);
        self.base_delay
            .checked_mul(factor)
            .unwrap_or(self.max_delay)
            .min(self.max_delay)
    }

    /// How long to wait before retry number `retry` (0 for the first retry): the provider's
    /// `Retry-After` when it sent one, else a uniformly random wait between zero and
    /// [`ceiling`](Self::ceiling) ("full jitter"); never more than `max_delay`.
    pub fn delay(&self, retry: u32, retry_after: Option<Duration>) -> Duration {
        match retry_after {
            Some(wait) => wait.min(self.max_delay),
            None => {
                let ceiling = self.ceiling(retry);
                let nanos = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
                Duration::from_nanos(rand::rng().random_range(0..=nanos))
            }
        }
    }
}

/// Parses a `Retry-After` header value: a number of seconds (`"2"`, also `"1.5"`) or an HTTP
/// date (`"Wed, 21 Oct 2015 07:28:00 GMT"`), relative to `now`. A date in the past means zero.
/// Returns `None` for anything else.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return (0.0..1e9)
            .contains(&secs)
            .then(|| Duration::from_secs_f64(secs));
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(when.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        let now = httpdate::parse_http_date("Wed, 21 Oct 2015 07:28:00 GMT").unwrap();
        assert_eq!(parse_retry_after("2", now), Some(Duration::from_secs(2)));
        assert_eq!(
            parse_retry_after(" 0.5 ", now),
            Some(Duration::from_millis(500))
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:07 GMT", now),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:27:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-3", now), None);
    }

    #[test]
    fn full_jitter_stays_under_the_exponential_ceiling_and_the_cap() {
        let p = RetryPolicy::default()
            .with_delays(Duration::from_millis(100), Duration::from_millis(700));
        assert_eq!(p.ceiling(0), Duration::from_millis(100));
        assert_eq!(p.ceiling(2), Duration::from_millis(400));
        assert_eq!(p.ceiling(3), Duration::from_millis(700));
        assert_eq!(p.ceiling(60), Duration::from_millis(700));
        let mut distinct = std::collections::HashSet::new();
        for _ in 0..200 {
            let d = p.delay(1, None);
            assert!(d <= Duration::from_millis(200), "{d:?}");
            distinct.insert(d);
        }
        assert!(distinct.len() > 50, "jitter should spread the waits");
        assert_eq!(
            p.delay(0, Some(Duration::from_secs(5))),
            Duration::from_millis(700)
        );
        assert_eq!(
            p.delay(0, Some(Duration::from_millis(30))),
            Duration::from_millis(30)
        );
    }
}
