//! The GitHub REST API calls that open a pull request: create it, label it, request reviewers.
//!
//! Every request sends `Authorization: Bearer TOKEN`, `Accept: application/vnd.github+json`
//! and `X-GitHub-Api-Version: 2022-11-28`. Rate limits and server errors are retried, a bounded
//! number of times: `retry-after` (seconds or an HTTP date) is honoured, else
//! `x-ratelimit-reset` when `x-ratelimit-remaining` is `0`, else an exponential backoff for a
//! 5xx. A wait longer than [`RetryPolicy::max_wait`] is not waited: the error says when to try
//! again. 401, 404 and 422 are never retried; their errors carry GitHub's `message` and
//! `errors[]`.

use serde::Deserialize;
use serde_json::{Value, json};
use std::time::{Duration, SystemTime};

/// The API version every request asks for.
pub const API_VERSION: &str = "2022-11-28";
/// The public API's base URL.
pub const DEFAULT_API_URL: &str = "https://api.github.com";

/// How often and how long to retry.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    pub attempts: u32,
    /// The first backoff for a 5xx; doubled each time.
    pub backoff: Duration,
    /// The longest single wait; a rate limit that resets later fails at once.
    pub max_wait: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            attempts: 4,
            backoff: Duration::from_secs(1),
            max_wait: Duration::from_secs(60),
        }
    }
}

/// One error GitHub's `errors[]` lists, in words.
fn error_item(v: &Value) -> String {
    if let Some(m) = v.get("message").and_then(Value::as_str) {
        return m.to_owned();
    }
    if let Some(s) = v.as_str() {
        return s.to_owned();
    }
    let part = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("");
    let mut s = String::new();
    for (k, sep) in [("resource", ""), ("field", "."), ("code", ": ")] {
        let p = part(k);
        if !p.is_empty() {
            if !s.is_empty() {
                s.push_str(sep);
            }
            s.push_str(p);
        }
    }
    s
}

fn esc(s: &str) -> String {
    nuvira_api::text::escape_control(s).into_owned()
}

/// GitHub's `errors[]` as `: a; b`, escaped, or nothing.
fn errors_suffix(errors: &[String]) -> String {
    if errors.is_empty() {
        String::new()
    } else {
        let items: Vec<String> = errors.iter().map(|e| esc(e)).collect();
        format!(": {}", items.join("; "))
    }
}

/// Why a GitHub request failed. GitHub's own text (`message`, `errors[]`) is escaped when
/// displayed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GitHubError {
    /// 401: the token is missing, wrong or expired.
    #[error("GitHub refused the token (401 {}): set GITHUB_TOKEN to a valid token with access to the repository", esc(.message))]
    Unauthorized {
        /// GitHub's `message`.
        message: String,
    },
    /// 403 (or 429) for a rate limit that was not retried or still holds after the retries.
    #[error("GitHub's rate limit was hit ({status} {}){}; try again {}", esc(.message), match .reset_in { Some(d) => format!(" and resets in {}s", d.as_secs()), None => String::new() }, if .reset_in.is_some() { "after that" } else { "later" })]
    RateLimited {
        /// 403 or 429.
        status: u16,
        /// GitHub's `message`.
        message: String,
        /// When the limit resets, if GitHub said.
        reset_in: Option<Duration>,
    },
    /// 403 for anything else: the token lacks a permission.
    #[error("GitHub forbade {what} (403 {}){}: the token needs the `pull-requests: write` (and `issues: write` for labels) permission on the repository", esc(.message), errors_suffix(.errors))]
    Forbidden {
        /// What was asked.
        what: String,
        /// GitHub's `message`.
        message: String,
        /// GitHub's `errors[]`.
        errors: Vec<String>,
    },
    /// 404: the repository does not exist, or the token cannot see it.
    #[error("GitHub does not know {what} (404 {}): check the repository (`owner/name`, from the remote or GITHUB_REPOSITORY) and that the token can see it", esc(.message))]
    NotFound {
        /// What was asked.
        what: String,
        /// GitHub's `message`.
        message: String,
    },
    /// 422: the request was understood and refused (no commits between the branches, a pull
    /// request exists already, an unknown reviewer).
    #[error("GitHub refused {what} (422 {}){}", esc(.message), errors_suffix(.errors))]
    Validation {
        /// What was asked.
        what: String,
        /// GitHub's `message`.
        message: String,
        /// GitHub's `errors[]`, each in words.
        errors: Vec<String>,
    },
    /// Any other status, after the retries for a 5xx.
    #[error("GitHub answered {what} with {status} {}{}", esc(.message), if *.attempts > 1 { format!(" after {} attempts", .attempts) } else { String::new() })]
    Status {
        /// What was asked.
        what: String,
        /// The HTTP status.
        status: u16,
        /// GitHub's `message`, or the body's start.
        message: String,
        /// Attempts made.
        attempts: u32,
    },
    /// The request did not get an answer.
    #[error("failed to reach GitHub at {url} for {what}: {source}")]
    Transport {
        /// What was asked.
        what: String,
        /// The URL.
        url: String,
        /// reqwest's error.
        #[source]
        source: reqwest::Error,
    },
    /// The answer was not the JSON expected.
    #[error("GitHub's answer to {what} is not the JSON expected: {reason}")]
    BadAnswer {
        /// What was asked.
        what: String,
        /// What is wrong.
        reason: String,
    },
    /// The API base URL cannot be used.
    #[error(
        "the GitHub API URL `{0}` is not a valid http(s) URL; pass e.g. --api-url https://github.example.com/api/v3"
    )]
    BadUrl(String),
}

/// A pull request to open.
#[derive(Debug, Clone, Default)]
pub struct NewPullRequest {
    /// The title.
    pub title: String,
    /// The branch with the changes (`feature`, or `owner:feature` from a fork).
    pub head: String,
    /// The branch to merge into.
    pub base: String,
    /// The description (Markdown).
    pub body: String,
    /// Open it as a draft.
    pub draft: bool,
}

/// A pull request GitHub created.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct PullRequest {
    /// Its number.
    pub number: u64,
    /// Its page.
    #[serde(default)]
    pub html_url: String,
}

/// A GitHub REST client for one API base URL and token.
#[derive(Debug, Clone)]
pub struct GitHub {
    http: reqwest::Client,
    api: String,
    token: String,
    retry: RetryPolicy,
}

impl GitHub {
    /// A client for `api_url` (`https://api.github.com`, or a GitHub Enterprise server's
    /// `https://HOST/api/v3`) with `token`.
    ///
    /// # Errors
    /// [`GitHubError::BadUrl`] for a URL that is not http(s).
    pub fn new(api_url: &str, token: &str) -> Result<Self, GitHubError> {
        let api = api_url.trim().trim_end_matches('/').to_owned();
        let parsed = reqwest::Url::parse(&api).map_err(|_| GitHubError::BadUrl(esc(api_url)))?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
            return Err(GitHubError::BadUrl(esc(api_url)));
        }
        let http = reqwest::Client::builder()
            .user_agent(concat!("nuvira/", env!("CARGO_PKG_VERSION")))
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|_| GitHubError::BadUrl(esc(api_url)))?;
        Ok(Self {
            http,
            api,
            token: token.to_owned(),
            retry: RetryPolicy::default(),
        })
    }

    /// Builder-style: the retry policy.
    #[must_use]
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// `POST /repos/{owner}/{repo}/pulls`.
    ///
    /// # Errors
    /// A [`GitHubError`] naming the status and GitHub's message.
    pub async fn create_pull(
        &self,
        owner: &str,
        repo: &str,
        pr: &NewPullRequest,
    ) -> Result<PullRequest, GitHubError> {
        let what = format!(
            "the pull request from `{}` into `{}` of {owner}/{repo}",
            pr.head, pr.base
        );
        let body = json!({
            "title": pr.title, "head": pr.head, "base": pr.base, "body": pr.body, "draft": pr.draft,
        });
        let v = self
            .post(
                &format!("/repos/{}/{}/pulls", seg(owner), seg(repo)),
                &body,
                &what,
            )
            .await?;
        serde_json::from_value(v).map_err(|e| GitHubError::BadAnswer {
            what,
            reason: e.to_string(),
        })
    }

    /// `POST /repos/{owner}/{repo}/issues/{number}/labels`.
    ///
    /// # Errors
    /// A [`GitHubError`].
    pub async fn add_labels(
        &self,
        owner: &str,
        repo: &str,
        number: u64,
        labels: &[String],
    ) -> Result<(), GitHubError> {
        let what = format!("the labels of pull request #{number}");
        self.post(
            &format!("/repos/{}/{}/issues/{number}/labels", seg(owner), seg(repo)),
            &json!({ "labels": labels }),
            &what,
        )
        .await
        .map(|_| ())
    }

    /// `POST /repos/{owner}/{repo}/pulls/{number}/requested_reviewers`. A reviewer written
    /// `org/team` (or `@org/team`) is requested as a team (`team_reviewers`, by its slug).
    ///
    /// # Errors
    /// A [`GitHubError`].
    pub async fn request_reviewers(
        &self,
        owner: &str,
        repo: &str,
        number: u64,
        reviewers: &[String],
    ) -> Result<(), GitHubError> {
        let mut users = Vec::new();
        let mut teams = Vec::new();
        for r in reviewers {
            let r = r.trim_start_matches('@');
            match r.split_once('/') {
                Some((_, team)) => teams.push(team.to_owned()),
                None => users.push(r.to_owned()),
            }
        }
        let mut body = json!({ "reviewers": users });
        if !teams.is_empty() {
            body["team_reviewers"] = json!(teams);
        }
        let what = format!("the reviewers of pull request #{number}");
        self.post(
            &format!(
                "/repos/{}/{}/pulls/{number}/requested_reviewers",
                seg(owner),
                seg(repo)
            ),
            &body,
            &what,
        )
        .await
        .map(|_| ())
    }

    async fn post(&self, path: &str, body: &Value, what: &str) -> Result<Value, GitHubError> {
        let url = format!("{}{path}", self.api);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let res = self
                .http
                .post(&url)
                .bearer_auth(&self.token)
                .header("Accept", "application/vnd.github+json")
                .header("X-GitHub-Api-Version", API_VERSION)
                .json(body)
                .send()
                .await;
            let res = match res {
                Ok(r) => r,
                Err(source) if attempt >= self.retry.attempts || !source.is_connect() => {
                    return Err(GitHubError::Transport {
                        what: what.to_owned(),
                        url,
                        source,
                    });
                }
                Err(_) => {
                    tokio::time::sleep(self.backoff(attempt)).await;
                    continue;
                }
            };
            let status = res.status().as_u16();
            let headers = res.headers().clone();
            let text = res.text().await.unwrap_or_default();
            if (200..300).contains(&status) {
                if text.trim().is_empty() {
                    return Ok(Value::Null);
                }
                return serde_json::from_str(&text).map_err(|e| GitHubError::BadAnswer {
                    what: what.to_owned(),
                    reason: e.to_string(),
                });
            }
            let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            let message = v
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .unwrap_or_else(|| text.chars().take(200).collect());
            let errors: Vec<String> = v
                .get("errors")
                .and_then(Value::as_array)
                .map(|a| a.iter().map(error_item).collect())
                .unwrap_or_default();
            let rate_limited = status == 429
                || (status == 403
                    && (headers.contains_key("retry-after")
                        || header(&headers, "x-ratelimit-remaining") == Some("0")));
            if rate_limited {
                let wait = wait_for(&headers);
                let wait = wait.unwrap_or_else(|| self.backoff(attempt));
                if attempt >= self.retry.attempts || wait > self.retry.max_wait {
                    return Err(GitHubError::RateLimited {
                        status,
                        message,
                        reset_in: wait_for(&headers),
                    });
                }
                tokio::time::sleep(wait).await;
                continue;
            }
            if status >= 500 && attempt < self.retry.attempts {
                let wait = wait_for(&headers)
                    .filter(|w| *w <= self.retry.max_wait)
                    .unwrap_or_else(|| self.backoff(attempt));
                tokio::time::sleep(wait).await;
                continue;
            }
            let what = what.to_owned();
            return Err(match status {
                401 => GitHubError::Unauthorized { message },
                403 => GitHubError::Forbidden {
                    what,
                    message,
                    errors,
                },
                404 => GitHubError::NotFound { what, message },
                422 => GitHubError::Validation {
                    what,
                    message,
                    errors,
                },
                _ => GitHubError::Status {
                    what,
                    status,
                    message,
                    attempts: attempt,
                },
            });
        }
    }

    fn backoff(&self, attempt: u32) -> Duration {
        let factor = 1u32 << attempt.saturating_sub(1).min(6);
        (self.retry.backoff * factor).min(self.retry.max_wait)
    }
}

fn header<'a>(h: &'a reqwest::header::HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok()).map(str::trim)
}

/// How long the headers say to wait: `retry-after` (seconds or an HTTP date), else
/// `x-ratelimit-reset` (epoch seconds) when no requests remain.
fn wait_for(h: &reqwest::header::HeaderMap) -> Option<Duration> {
    if let Some(ra) = header(h, "retry-after") {
        if let Ok(secs) = ra.parse::<u64>() {
            return Some(Duration::from_secs(secs));
        }
        if let Ok(at) = httpdate::parse_http_date(ra) {
            return Some(at.duration_since(SystemTime::now()).unwrap_or_default());
        }
    }
    if header(h, "x-ratelimit-remaining") == Some("0")
        && let Some(reset) = header(h, "x-ratelimit-reset").and_then(|r| r.parse::<u64>().ok())
    {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(reset);
        return Some(at.duration_since(SystemTime::now()).unwrap_or_default());
    }
    None
}

/// A URL path segment: everything but unreserved characters percent-encoded.
fn seg(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            o.push(char::from(b));
        } else {
            o.push_str(&format!("%{b:02X}"));
        }
    }
    o
}

/// `owner/name` from a remote URL: `https://github.com/o/r(.git)`, `git@github.com:o/r.git`,
/// `ssh://git@host[:port]/o/r.git`, a GitHub Enterprise host alike. `None` for anything else
/// (a local path, a URL without two path segments).
pub fn parse_remote(url: &str) -> Option<(String, String)> {
    let url = url.trim();
    let path = if let Some((scheme, rest)) = url.split_once("://") {
        if !matches!(scheme, "https" | "http" | "ssh" | "git") {
            return None;
        }
        rest.split_once('/')?.1
    } else {
        // scp-like `user@host:path`.
        let (host, path) = url.split_once(':')?;
        if host.contains('/') || host.is_empty() {
            return None;
        }
        path
    };
    let path = path.trim_matches('/');
    let path = path.strip_suffix(".git").unwrap_or(path);
    let mut parts = path.rsplitn(3, '/');
    let name = parts.next()?;
    let owner = parts.next()?;
    let ok = |s: &str| {
        !s.is_empty()
            && s != "."
            && s != ".."
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    (ok(owner) && ok(name)).then(|| (owner.to_owned(), name.to_owned()))
}

/// `owner/name` from `GITHUB_REPOSITORY`'s form.
pub fn parse_repository(text: &str) -> Option<(String, String)> {
    let (o, r) = text.trim().split_once('/')?;
    if r.contains('/') {
        return None;
    }
    parse_remote(&format!("https://x/{o}/{r}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remotes_of_every_shape_give_owner_and_name() {
        let want = Some(("octo".to_owned(), "hello-world".to_owned()));
        for url in [
            "https://github.com/octo/hello-world.git",
            "https://github.com/octo/hello-world",
            "git@github.com:octo/hello-world.git",
            "ssh://git@github.example.com:2222/octo/hello-world.git",
            "https://ghe.example.com/octo/hello-world/",
        ] {
            assert_eq!(parse_remote(url), want, "{url}");
        }
        assert_eq!(parse_remote("/srv/repo.git"), None);
        assert_eq!(parse_remote("file:///srv/o/r.git"), None);
        assert_eq!(parse_remote("https://github.com/only"), None);
        assert_eq!(parse_repository("octo/hello-world"), want);
        assert_eq!(parse_repository("octo/../x"), None);
    }

    #[test]
    fn error_items_read_every_documented_shape() {
        assert_eq!(
            error_item(
                &json!({"resource":"PullRequest","code":"custom","message":"A pull request already exists for o:b."})
            ),
            "A pull request already exists for o:b."
        );
        assert_eq!(
            error_item(&json!({"resource":"PullRequest","field":"head","code":"invalid"})),
            "PullRequest.head: invalid"
        );
    }
}
