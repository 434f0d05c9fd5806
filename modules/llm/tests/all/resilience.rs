//! Timeouts, retries, Retry-After, the size cap and the circuit breaker, over real HTTP.

use crate::support::{Reply, Server, fixture};
use crate::{ask, assert_no_key, openai_config, quick_retry};
use nuvira_api::{ChatMessage, LlmClient, LlmError, LlmRequest};
use nuvira_llm::{BreakerPolicy, BreakerState, HttpLlm, ManualClock, RetryPolicy};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[tokio::test]
async fn a_429_waits_the_retry_after_seconds_then_retries() {
    let server = Server::start(vec![
        Reply::status(429, fixture("openai_429.json")).header("retry-after", "1"),
        Reply::ok(fixture("openai_chat.json")),
    ])
    .await;
    let llm = HttpLlm::new(openai_config(&server)).unwrap();
    let started = Instant::now();
    let r = llm.complete(&ask("hi")).await.unwrap();
    assert_eq!(r.usage.output_tokens, 10);
    let seen = server.requests();
    assert_eq!(seen.len(), 2, "retried once");
    let gap = seen[1].at - seen[0].at;
    assert!(gap >= Duration::from_millis(990), "waited only {gap:?}");
    // Backoff alone would have waited at most 10 ms: the header was honoured, and no more.
    assert!(started.elapsed() < Duration::from_secs(8));
}

#[tokio::test]
async fn a_retry_after_http_date_is_honoured() {
    let when = std::time::SystemTime::now() + Duration::from_secs(2);
    let server = Server::start(vec![
        Reply::status(429, fixture("openai_429.json"))
            .header("retry-after", &httpdate::fmt_http_date(when)),
        Reply::ok(fixture("openai_chat.json")),
    ])
    .await;
    let llm = HttpLlm::new(openai_config(&server)).unwrap();
    llm.complete(&ask("hi")).await.unwrap();
    let seen = server.requests();
    assert_eq!(seen.len(), 2);
    // The date has whole seconds: the wait is between 1 and 2 seconds.
    let gap = seen[1].at - seen[0].at;
    assert!(gap >= Duration::from_millis(990), "waited only {gap:?}");
}

#[tokio::test]
async fn retry_after_is_capped_by_the_max_delay() {
    let server = Server::start(vec![
        Reply::status(429, fixture("openai_429.json")).header("retry-after", "3600"),
        Reply::ok(fixture("openai_chat.json")),
    ])
    .await;
    let cfg = openai_config(&server).with_retry(
        quick_retry().with_delays(Duration::from_millis(10), Duration::from_millis(200)),
    );
    let llm = HttpLlm::new(cfg).unwrap();
    let started = Instant::now();
    llm.complete(&ask("hi")).await.unwrap();
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(190), "{elapsed:?}");
    assert!(
        elapsed < Duration::from_secs(8),
        "3600 s were not capped: {elapsed:?}"
    );
}

#[tokio::test]
async fn rate_limited_after_the_last_attempt_reports_retry_after() {
    let server = Server::start(vec![
        Reply::status(429, fixture("openai_429.json")).header("retry-after-ms", "20"),
        Reply::status(429, fixture("openai_429.json")).header("retry-after", "0"),
    ])
    .await;
    let cfg = openai_config(&server).with_retry(quick_retry().with_max_attempts(2));
    let llm = HttpLlm::new(cfg).unwrap();
    let e = llm.complete(&ask("hi")).await.unwrap_err();
    assert_eq!(
        e,
        LlmError::RateLimited {
            retry_after: Some(Duration::ZERO)
        }
    );
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn a_500_then_success_is_retried() {
    let server = Server::start(vec![
        Reply::status(500, fixture("openai_500.json")),
        Reply::ok(fixture("openai_chat.json")),
    ])
    .await;
    let llm = HttpLlm::new(openai_config(&server)).unwrap();
    let r = llm.complete(&ask("hi")).await.unwrap();
    assert_eq!(r.model, "openai:gpt-4.1-2025-04-14");
    let seen = server.requests();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].body, seen[1].body, "the same request is sent again");
}

#[tokio::test]
async fn a_dropped_connection_is_retried() {
    let server = Server::start(vec![Reply::Close, Reply::ok(fixture("openai_chat.json"))]).await;
    let llm = HttpLlm::new(openai_config(&server)).unwrap();
    llm.complete(&ask("hi")).await.unwrap();
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn a_server_that_never_answers_times_out_within_the_bound() {
    let server = Server::start(vec![Reply::Hang, Reply::Hang]).await;
    let cfg = openai_config(&server).with_timeout(Duration::from_millis(300));
    let llm = HttpLlm::new(cfg).unwrap();
    let started = Instant::now();
    let e = llm.complete(&ask("hi")).await.unwrap_err();
    let elapsed = started.elapsed();
    assert_eq!(e, LlmError::Timeout);
    assert!(elapsed >= Duration::from_millis(300), "{elapsed:?}");
    // The configured bound, plus slack for a loaded machine.
    assert!(elapsed < Duration::from_millis(300 + 2000), "{elapsed:?}");
    assert_eq!(
        server.requests().len(),
        1,
        "timeouts are not retried by default"
    );
}

#[tokio::test]
async fn timeouts_are_retried_when_configured() {
    let server = Server::start(vec![Reply::Hang, Reply::ok(fixture("openai_chat.json"))]).await;
    let cfg = openai_config(&server)
        .with_timeout(Duration::from_millis(200))
        .with_retry(quick_retry().with_retry_timeouts(true));
    let llm = HttpLlm::new(cfg).unwrap();
    llm.complete(&ask("hi")).await.unwrap();
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn an_oversized_request_is_refused_before_sending() {
    let server = Server::start(vec![Reply::ok(fixture("openai_chat.json"))]).await;
    let cfg = openai_config(&server).with_max_request_bytes(4096);
    let llm = HttpLlm::new(cfg).unwrap();
    let big = LlmRequest::new(vec![ChatMessage::user("x".repeat(5000))]);
    let e = llm.complete(&big).await.unwrap_err();
    assert!(
        matches!(&e, LlmError::TooLarge(m) if m.contains("over the cap of 4096 bytes (max_request_bytes)")),
        "{e}"
    );
    assert_eq!(server.requests().len(), 0);
    assert_eq!(server.connections(), 0, "not even a connection was opened");
    // Just under the cap goes through.
    let small = LlmRequest::new(vec![ChatMessage::user("x".repeat(3000))]);
    llm.complete(&small).await.unwrap();
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn the_breaker_opens_fails_fast_then_half_opens_after_the_cool_down() {
    // The breaker's clock moves only when the test says so.
    let clock = Arc::new(ManualClock::new());
    let cool_down = Duration::from_secs(30);
    let server = Server::start(vec![
        Reply::status(500, fixture("openai_500.json")),
        Reply::status(503, fixture("openai_500.json")),
        // The first half-open trial fails: open again.
        Reply::status(500, fixture("openai_500.json")),
        // The second trial succeeds: closed.
        Reply::ok(fixture("openai_chat.json")),
        Reply::ok(fixture("openai_chat.json")),
    ])
    .await;
    let cfg = openai_config(&server)
        .with_retry(RetryPolicy::never())
        .with_breaker(BreakerPolicy::new(2, cool_down));
    let llm = HttpLlm::new(cfg).unwrap().with_breaker_clock(clock.clone());
    for _ in 0..2 {
        assert!(matches!(
            llm.complete(&ask("hi")).await,
            Err(LlmError::Provider(_))
        ));
    }
    assert_eq!(llm.breaker().state(), BreakerState::Open);
    assert_eq!(llm.open_circuits(), vec!["openai:gpt-4.1".to_string()]);
    let e = llm.complete(&ask("hi")).await.unwrap_err();
    assert_eq!(e, LlmError::CircuitOpen("openai:gpt-4.1".into()));
    assert_eq!(server.requests().len(), 2, "an open breaker sends nothing");

    clock.advance(cool_down - Duration::from_millis(1));
    assert_eq!(llm.breaker().state(), BreakerState::Open);
    clock.advance(Duration::from_millis(1));
    assert_eq!(llm.breaker().state(), BreakerState::HalfOpen);
    assert!(llm.open_circuits().is_empty());
    assert!(matches!(
        llm.complete(&ask("hi")).await,
        Err(LlmError::Provider(_))
    ));
    assert_eq!(server.requests().len(), 3, "one trial request went through");
    assert_eq!(llm.breaker().state(), BreakerState::Open);
    assert!(matches!(
        llm.complete(&ask("hi")).await,
        Err(LlmError::CircuitOpen(_))
    ));

    clock.advance(cool_down);
    llm.complete(&ask("hi")).await.unwrap();
    assert_eq!(llm.breaker().state(), BreakerState::Closed);
    llm.complete(&ask("hi")).await.unwrap();
    assert_eq!(server.requests().len(), 5);
}

#[tokio::test]
async fn the_key_is_absent_from_every_error_and_debug_output() {
    // Connection refused: bind a port, then close it.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let server = Server::start(vec![]).await;
    let cfg = openai_config(&server)
        .with_base_url(format!("http://user:pw@127.0.0.1:{port}/v1?key=x"))
        .with_retry(RetryPolicy::never());
    let llm = HttpLlm::new(cfg.clone()).unwrap();
    let e = llm.complete(&ask("hi")).await.unwrap_err();
    let text = e.to_string();
    assert!(text.starts_with(&format!("the model provider failed: could not connect to http://127.0.0.1:{port}/v1/chat/completions")), "{text}");
    assert!(!text.contains("pw"), "{text}");
    for s in [
        text,
        format!("{e:?}"),
        format!("{llm:?}"),
        format!("{cfg:?}"),
    ] {
        assert_no_key(&s);
    }
    // The rest: timeout, too large, open breaker, 5xx.
    let server = Server::start(vec![Reply::Hang]).await;
    let cfg = openai_config(&server)
        .with_timeout(Duration::from_millis(100))
        .with_max_request_bytes(2000)
        .with_breaker(BreakerPolicy::new(1, Duration::from_secs(60)));
    let llm = HttpLlm::new(cfg).unwrap();
    let mut errors = vec![llm.complete(&ask("hi")).await.unwrap_err()];
    errors.push(llm.complete(&ask("hi")).await.unwrap_err());
    errors.push(
        llm.complete(&LlmRequest::new(vec![ChatMessage::user("y".repeat(3000))]))
            .await
            .unwrap_err(),
    );
    assert!(matches!(errors[0], LlmError::Timeout));
    assert!(matches!(errors[1], LlmError::CircuitOpen(_)));
    assert!(matches!(errors[2], LlmError::TooLarge(_)));
    for e in &errors {
        assert_no_key(&format!("{e} {e:?}"));
    }
}

#[tokio::test]
async fn count_retries_counts_each_request_sent_again_and_none_for_a_first_success() {
    let server = Server::start(vec![
        Reply::status(500, fixture("openai_500.json")),
        Reply::status(429, fixture("openai_429.json")).header("retry-after-ms", "1"),
        Reply::ok(fixture("openai_chat.json")),
        Reply::ok(fixture("openai_chat.json")),
    ])
    .await;
    let llm = HttpLlm::new(openai_config(&server)).unwrap();
    let (r, retries) = nuvira_llm::count_retries(llm.complete(&ask("hi"))).await;
    r.unwrap();
    assert_eq!(server.requests().len(), 3);
    assert_eq!(retries, 2, "a 500 and a 429 were retried");
    let (r, retries) = nuvira_llm::count_retries(llm.complete(&ask("hi"))).await;
    r.unwrap();
    assert_eq!(retries, 0);
    // A call that fails after its retries still has them counted.
    let down = Server::start(vec![
        Reply::status(503, fixture("openai_500.json")),
        Reply::status(503, fixture("openai_500.json")),
        Reply::status(503, fixture("openai_500.json")),
    ])
    .await;
    let llm = HttpLlm::new(openai_config(&down)).unwrap();
    let (r, retries) = nuvira_llm::count_retries(llm.complete(&ask("hi"))).await;
    assert!(r.is_err());
    assert_eq!(retries, 2, "three attempts in all");
}
