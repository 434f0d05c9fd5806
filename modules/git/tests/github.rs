//! `pr create`'s requests against a local server speaking the GitHub REST API's documented
//! shapes, on 127.0.0.1: the exact requests sent, retries, and the errors.

use nuvira_git::github::{GitHub, GitHubError, NewPullRequest, RetryPolicy};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One request the server received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A response: status, extra headers, JSON body.
pub type Reply = (u16, Vec<(&'static str, String)>, Value);

/// Serves `replies` in order, one per connection, and records every request.
pub struct Server {
    pub url: String,
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

pub fn serve(replies: Vec<Reply>) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for (status, headers, body) in replies {
            let Ok((stream, _)) = listener.accept() else {
                return;
            };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            let mut parts = line.split_whitespace();
            let method = parts.next().unwrap_or("").to_owned();
            let path = parts.next().unwrap_or("").to_owned();
            let mut hs = Vec::new();
            let mut len = 0;
            loop {
                let mut h = String::new();
                reader.read_line(&mut h).unwrap();
                let h = h.trim_end();
                if h.is_empty() {
                    break;
                }
                let (k, v) = h.split_once(':').unwrap();
                if k.eq_ignore_ascii_case("content-length") {
                    len = v.trim().parse().unwrap();
                }
                hs.push((k.to_owned(), v.trim().to_owned()));
            }
            let mut buf = vec![0; len];
            reader.read_exact(&mut buf).unwrap();
            let sent = serde_json::from_slice(&buf).unwrap_or(Value::Null);
            log.lock().unwrap().push(Seen {
                method,
                path,
                headers: hs,
                body: sent,
            });
            let text = body_text(&body);
            let reason = match status {
                200 => "OK",
                201 => "Created",
                401 => "Unauthorized",
                403 => "Forbidden",
                404 => "Not Found",
                422 => "Unprocessable Entity",
                _ => "Status",
            };
            let mut out = format!(
                "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n",
                text.len()
            );
            for (k, v) in headers {
                out.push_str(&format!("{k}: {v}\r\n"));
            }
            out.push_str("\r\n");
            out.push_str(&text);
            let mut stream = stream;
            stream.write_all(out.as_bytes()).unwrap();
            let _ = stream.flush();
        }
    });
    Server { url, seen }
}

fn body_text(v: &Value) -> String {
    let s = v.to_string();
    if s == "null" { String::new() } else { s }
}

fn pull_created() -> Value {
    json!({
        "id": 1, "number": 1347, "state": "open", "title": "Amazing new feature",
        "html_url": "https://github.com/octocat/Hello-World/pull/1347",
        "url": "https://api.github.com/repos/octocat/Hello-World/pulls/1347", "draft": true
    })
}

fn fast() -> RetryPolicy {
    RetryPolicy {
        attempts: 3,
        backoff: Duration::from_millis(10),
        max_wait: Duration::from_secs(5),
    }
}

fn pr() -> NewPullRequest {
    NewPullRequest {
        title: "Amazing new feature".into(),
        head: "nuvira/feature".into(),
        base: "main".into(),
        body: "## Goal\n".into(),
        draft: true,
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn assert_github_headers(s: &Seen) {
    assert_eq!(s.header("authorization"), Some("Bearer ghp_test"));
    assert_eq!(s.header("accept"), Some("application/vnd.github+json"));
    assert_eq!(s.header("x-github-api-version"), Some("2022-11-28"));
    assert!(
        s.header("user-agent")
            .is_some_and(|u| u.starts_with("nuvira/"))
    );
    assert_eq!(s.header("content-type"), Some("application/json"));
}

#[test]
fn create_label_and_request_reviewers_send_exactly_the_documented_requests() {
    let server = serve(vec![
        (201, vec![], pull_created()),
        (200, vec![], json!([{"id": 208045946, "name": "bug"}])),
        (201, vec![], pull_created()),
    ]);
    let gh = GitHub::new(&format!("{}/api/v3/", server.url), "ghp_test")
        .unwrap()
        .with_retry(fast());
    let rt = rt();
    let made = rt
        .block_on(gh.create_pull("octocat", "Hello-World", &pr()))
        .unwrap();
    assert_eq!(made.number, 1347);
    assert_eq!(
        made.html_url,
        "https://github.com/octocat/Hello-World/pull/1347"
    );
    rt.block_on(gh.add_labels(
        "octocat",
        "Hello-World",
        1347,
        &["bug".into(), "nuvira".into()],
    ))
    .unwrap();
    rt.block_on(gh.request_reviewers(
        "octocat",
        "Hello-World",
        1347,
        &["octocat".into(), "@my-org/justice-league".into()],
    ))
    .unwrap();
    let seen = server.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3);
    for s in &seen {
        assert_eq!(s.method, "POST");
        assert_github_headers(s);
    }
    assert_eq!(seen[0].path, "/api/v3/repos/octocat/Hello-World/pulls");
    assert_eq!(
        seen[0].body,
        json!({"title": "Amazing new feature", "head": "nuvira/feature", "base": "main", "body": "## Goal\n", "draft": true})
    );
    assert_eq!(
        seen[1].path,
        "/api/v3/repos/octocat/Hello-World/issues/1347/labels"
    );
    assert_eq!(seen[1].body, json!({"labels": ["bug", "nuvira"]}));
    assert_eq!(
        seen[2].path,
        "/api/v3/repos/octocat/Hello-World/pulls/1347/requested_reviewers"
    );
    assert_eq!(
        seen[2].body,
        json!({"reviewers": ["octocat"], "team_reviewers": ["justice-league"]})
    );
}

#[test]
fn validation_failed_422_is_not_retried_and_carries_message_and_errors_escaped() {
    let server = serve(vec![(
        422,
        vec![],
        json!({
            "message": "Validation Failed",
            "errors": [{"resource": "PullRequest", "code": "custom", "message": "A pull request already exists for octocat:nuvira/feature.\u{1b}[2J"}],
            "documentation_url": "https://docs.github.com/rest/pulls/pulls#create-a-pull-request",
            "status": "422"
        }),
    )]);
    let gh = GitHub::new(&server.url, "ghp_test")
        .unwrap()
        .with_retry(fast());
    let err = rt()
        .block_on(gh.create_pull("octocat", "Hello-World", &pr()))
        .unwrap_err();
    let GitHubError::Validation {
        ref message,
        ref errors,
        ..
    } = err
    else {
        panic!("{err:?}")
    };
    assert_eq!(message, "Validation Failed");
    assert_eq!(errors.len(), 1);
    let text = err.to_string();
    assert!(text.contains("422 Validation Failed"), "{text}");
    assert!(
        text.contains("A pull request already exists for octocat:nuvira/feature."),
        "{text}"
    );
    assert!(!text.contains('\u{1b}'), "escaped: {text:?}");
    assert_eq!(server.seen.lock().unwrap().len(), 1, "no retry");
}

#[test]
fn unauthorized_401_says_to_fix_the_token_and_is_not_retried() {
    let server = serve(vec![(
        401,
        vec![],
        json!({"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest", "status": "401"}),
    )]);
    let gh = GitHub::new(&server.url, "ghp_test")
        .unwrap()
        .with_retry(fast());
    let err = rt()
        .block_on(gh.create_pull("octocat", "Hello-World", &pr()))
        .unwrap_err();
    assert!(matches!(err, GitHubError::Unauthorized { .. }), "{err:?}");
    assert!(
        err.to_string().contains("Bad credentials") && err.to_string().contains("GITHUB_TOKEN"),
        "{err}"
    );
    assert_eq!(server.seen.lock().unwrap().len(), 1);
}

#[test]
fn a_403_rate_limit_with_retry_after_is_waited_out_and_retried() {
    let server = serve(vec![
        (
            403,
            vec![
                ("retry-after", "1".into()),
                ("x-ratelimit-remaining", "0".into()),
            ],
            json!({"message": "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.", "documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"}),
        ),
        (201, vec![], pull_created()),
    ]);
    let gh = GitHub::new(&server.url, "ghp_test")
        .unwrap()
        .with_retry(fast());
    let start = std::time::Instant::now();
    let made = rt()
        .block_on(gh.create_pull("octocat", "Hello-World", &pr()))
        .unwrap();
    assert_eq!(made.number, 1347);
    assert!(
        start.elapsed() >= Duration::from_secs(1),
        "retry-after was honoured"
    );
    let seen = server.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].body, seen[1].body, "the same request again");
}

#[test]
fn a_rate_limit_that_resets_later_than_the_longest_wait_fails_at_once_saying_when() {
    let reset = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600;
    let server = serve(vec![(
        403,
        vec![
            ("x-ratelimit-remaining", "0".into()),
            ("x-ratelimit-reset", reset.to_string()),
        ],
        json!({"message": "API rate limit exceeded for user ID 1."}),
    )]);
    let gh = GitHub::new(&server.url, "ghp_test")
        .unwrap()
        .with_retry(fast());
    let err = rt()
        .block_on(gh.create_pull("octocat", "Hello-World", &pr()))
        .unwrap_err();
    let GitHubError::RateLimited {
        reset_in: Some(d), ..
    } = &err
    else {
        panic!("{err:?}")
    };
    assert!(d.as_secs() > 3500, "{d:?}");
    assert!(err.to_string().contains("API rate limit exceeded"), "{err}");
    assert_eq!(server.seen.lock().unwrap().len(), 1);
}

#[test]
fn server_errors_are_retried_with_backoff_a_bounded_number_of_times() {
    let boom = || (502, vec![], json!({"message": "Server Error"}));
    let server = serve(vec![boom(), boom(), boom(), (201, vec![], pull_created())]);
    let gh = GitHub::new(&server.url, "ghp_test")
        .unwrap()
        .with_retry(fast());
    let err = rt()
        .block_on(gh.create_pull("octocat", "Hello-World", &pr()))
        .unwrap_err();
    assert!(
        matches!(
            err,
            GitHubError::Status {
                status: 502,
                attempts: 3,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(server.seen.lock().unwrap().len(), 3, "3 attempts, not 4");
}

#[test]
fn not_found_404_names_the_repository_to_check() {
    let server = serve(vec![(404, vec![], json!({"message": "Not Found"}))]);
    let gh = GitHub::new(&server.url, "ghp_test")
        .unwrap()
        .with_retry(fast());
    let err = rt()
        .block_on(gh.create_pull("octocat", "nope", &pr()))
        .unwrap_err();
    assert!(matches!(err, GitHubError::NotFound { .. }), "{err:?}");
    assert!(err.to_string().contains("octocat/nope"), "{err}");
}

#[test]
fn a_bad_api_url_is_refused() {
    assert!(matches!(
        GitHub::new("ftp://x", "t"),
        Err(GitHubError::BadUrl(_))
    ));
    assert!(matches!(
        GitHub::new("not a url", "t"),
        Err(GitHubError::BadUrl(_))
    ));
}
