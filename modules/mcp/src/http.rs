//! The streamable HTTP client of the `mcp` module: rmcp's own client transport
//! ([`StreamableHttpClientTransport`](rmcp::transport::StreamableHttpClientTransport): sessions, SSE streams, resumption, cancellation) over
//! the workspace's `reqwest`.
//!
//! Why not rmcp's `transport-streamable-http-client-reqwest` feature: it is built on reqwest
//! 0.13, the workspace (nuvira-llm, nuvira-git) on 0.12, and two reqwest versions (each with
//! its TLS stack) for one client is not worth it. rmcp makes the HTTP backend a trait
//! ([`StreamableHttpClient`]); this is that trait on reqwest 0.12, with the same byte limits
//! the built-in client enforces ([`StreamableHttpResponseLimits`]).
//!
//! Only the host the step names is contacted: redirects are not followed (one could point
//! anywhere) and no proxy is used (the proxy would be contacted instead of the host).

use futures::{Stream, StreamExt, TryStreamExt, stream::BoxStream};
use reqwest::StatusCode;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, JsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::common::http_header::{
    EVENT_STREAM_MIME_TYPE, HEADER_LAST_EVENT_ID, HEADER_SESSION_ID, JSON_MIME_TYPE,
};
use rmcp::transport::streamable_http_client::{
    HttpStatusError, SseError, StreamableHttpClient, StreamableHttpError,
    StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use sse_stream::{Sse, SseStream};
use std::collections::HashMap;
use std::sync::Arc;

type Error = StreamableHttpError<reqwest::Error>;
type SseResponse = BoxStream<'static, Result<Sse, SseError>>;

/// The reqwest client the `mcp` module talks HTTP servers through.
#[derive(Clone, Debug)]
pub struct HttpClient {
    inner: reqwest::Client,
}

impl HttpClient {
    /// A client that follows no redirect and uses no proxy.
    ///
    /// # Errors
    /// When reqwest cannot set up its TLS backend.
    pub fn new() -> Result<Self, reqwest::Error> {
        let inner = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            // A response body left unread must not stall the next request on the connection.
            .pool_max_idle_per_host(0)
            .build()?;
        Ok(Self { inner })
    }

    fn request(
        &self,
        builder: reqwest::RequestBuilder,
        session_id: Option<&str>,
        auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
    ) -> reqwest::RequestBuilder {
        let mut builder = builder;
        if let Some(id) = session_id {
            builder = builder.header(HEADER_SESSION_ID, id);
        }
        if let Some(token) = auth {
            builder = builder.bearer_auth(token);
        }
        for (name, value) in headers {
            builder = builder.header(name, value);
        }
        builder
    }
}

fn media_type_is(value: &str, expected: &str) -> bool {
    value
        .split(';')
        .next()
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case(expected))
}

fn content_type(response: &reqwest::Response) -> Option<String> {
    response
        .headers()
        .get(CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
}

/// Rate limits and server errors, as rmcp's body-free status error.
fn status_error(response: &reqwest::Response) -> Option<HttpStatusError> {
    let status = response.status();
    if status != StatusCode::TOO_MANY_REQUESTS && !status.is_server_error() {
        return None;
    }
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    Some(HttpStatusError::new(status.as_u16(), retry_after))
}

/// The whole body, refused once it passes `max` bytes.
async fn read_bounded(response: reqwest::Response, max: usize) -> Result<Vec<u8>, Error> {
    if response.content_length().is_some_and(|n| n > max as u64) {
        return Err(StreamableHttpError::ResponseBodyTooLarge { max_size: max });
    }
    let mut stream = response.bytes_stream();
    let mut body = Vec::new();
    while let Some(chunk) = stream
        .try_next()
        .await
        .map_err(StreamableHttpError::Client)?
    {
        if chunk.len() > max - body.len() {
            return Err(StreamableHttpError::ResponseBodyTooLarge { max_size: max });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// At most `max` bytes of the body, for a diagnostic.
async fn read_prefix(response: reqwest::Response, max: usize) -> Vec<u8> {
    let mut stream = response.bytes_stream();
    let mut body = Vec::new();
    while body.len() < max {
        let Ok(Some(chunk)) = stream.try_next().await else {
            break;
        };
        let n = chunk.len().min(max - body.len());
        body.extend_from_slice(&chunk[..n]);
    }
    body
}

/// Counts the bytes of the SSE event being received (blank lines end one; comments do not
/// count) and fails the stream once one passes `max`, before the parser buffers it.
fn bounded_sse<S>(stream: S, max: usize) -> SseResponse
where
    S: Stream<Item = Result<bytes::Bytes, reqwest::Error>> + Send + 'static,
{
    let mut event = 0usize;
    let mut line = 0usize;
    let mut comment = false;
    let mut failed = false;
    let limited = stream.map(move |chunk| {
        if failed {
            return Err(std::io::Error::other("the SSE stream failed earlier"));
        }
        let chunk = chunk.map_err(std::io::Error::other)?;
        for &b in chunk.iter() {
            match b {
                b'\r' | b'\n' => {
                    if line == 0 {
                        event = 0;
                    } else if !comment {
                        event = event.saturating_add(line + 1);
                    }
                    line = 0;
                    comment = false;
                }
                _ => {
                    if line == 0 {
                        comment = b == b':';
                    }
                    line = line.saturating_add(1);
                }
            }
            if event.saturating_add(line) > max {
                failed = true;
                return Err(std::io::Error::other(format!(
                    "an SSE event of the server passed {max} bytes"
                )));
            }
        }
        Ok(chunk)
    });
    SseStream::from_bytes_stream(limited).boxed()
}

impl StreamableHttpClient for HttpClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, Error> {
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth,
            headers,
            StreamableHttpResponseLimits::default(),
        )
        .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, Error> {
        let mut limits = StreamableHttpResponseLimits::default();
        limits.max_sse_event_size = max_sse_event_size;
        self.post_message_with_response_limits(uri, message, session_id, auth, headers, limits)
            .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, Error> {
        let attached = session_id.is_some();
        let response = self
            .request(
                self.inner.post(uri.as_ref()).header(
                    ACCEPT,
                    format!("{EVENT_STREAM_MIME_TYPE}, {JSON_MIME_TYPE}"),
                ),
                session_id.as_deref(),
                auth,
                headers,
            )
            .json(&message)
            .send()
            .await
            .map_err(StreamableHttpError::Client)?;
        let status = response.status();
        if matches!(status, StatusCode::ACCEPTED | StatusCode::NO_CONTENT) {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        if status == StatusCode::NOT_FOUND && attached {
            return Err(StreamableHttpError::SessionExpired);
        }
        let ctype = content_type(&response);
        let is_json = ctype
            .as_deref()
            .is_some_and(|c| media_type_is(c, JSON_MIME_TYPE));
        let session = response
            .headers()
            .get(HEADER_SESSION_ID)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        // Nothing waits for an answer to a notification, a response or an error.
        let awaits_nothing = matches!(
            message,
            ClientJsonRpcMessage::Notification(_)
                | ClientJsonRpcMessage::Response(_)
                | ClientJsonRpcMessage::Error(_)
        );
        if status.is_success() && response.content_length() == Some(0) && awaits_nothing {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        if !status.is_success() {
            let status_err = status_error(&response);
            if let Some(e) = status_err.as_ref().filter(|_| !is_json) {
                return Err(HttpStatusError::new(e.status, e.retry_after.clone()).into());
            }
            let auth_failure = matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN);
            let body = if is_json && !auth_failure {
                let body = read_bounded(response, limits.max_json_response_size).await?;
                // A JSON-RPC error in the body is the server's answer to the request.
                if let Ok(m @ JsonRpcMessage::Error(_)) =
                    serde_json::from_slice::<ServerJsonRpcMessage>(&body)
                {
                    return Ok(StreamableHttpPostResponse::Json(m, session));
                }
                body
            } else {
                read_prefix(response, limits.max_error_response_size).await
            };
            if let Some(e) = status_err {
                return Err(e.into());
            }
            let end = body.len().min(limits.max_error_response_size).min(2000);
            return Err(StreamableHttpError::UnexpectedServerResponse(
                format!("HTTP {status}: {}", String::from_utf8_lossy(&body[..end])).into(),
            ));
        }
        match ctype.as_deref() {
            Some(c) if media_type_is(c, EVENT_STREAM_MIME_TYPE) => {
                Ok(StreamableHttpPostResponse::Sse(
                    bounded_sse(response.bytes_stream(), limits.max_sse_event_size),
                    session,
                ))
            }
            Some(c) if media_type_is(c, JSON_MIME_TYPE) => {
                let body = read_bounded(response, limits.max_json_response_size).await?;
                match serde_json::from_slice::<ServerJsonRpcMessage>(&body) {
                    Ok(m) => Ok(StreamableHttpPostResponse::Json(m, session)),
                    Err(_) if awaits_nothing => Ok(StreamableHttpPostResponse::Accepted),
                    Err(e) => Err(StreamableHttpError::UnexpectedServerResponse(
                        format!("the server's answer is not a JSON-RPC message: {e}").into(),
                    )),
                }
            }
            _ if awaits_nothing => Ok(StreamableHttpPostResponse::Accepted),
            _ => Err(StreamableHttpError::UnexpectedContentType(ctype)),
        }
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), Error> {
        let response = self
            .request(
                self.inner.delete(uri.as_ref()),
                Some(&session_id),
                auth,
                headers,
            )
            .send()
            .await
            .map_err(StreamableHttpError::Client)?;
        if response.status() == StatusCode::METHOD_NOT_ALLOWED {
            return Ok(());
        }
        response
            .error_for_status()
            .map(|_| ())
            .map_err(StreamableHttpError::Client)
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<SseResponse, Error> {
        self.get_stream_with_max_sse_event_size(
            uri,
            session_id,
            last_event_id,
            auth,
            headers,
            StreamableHttpResponseLimits::default().max_sse_event_size,
        )
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<SseResponse, Error> {
        let mut builder = self.inner.get(uri.as_ref()).header(
            ACCEPT,
            format!("{EVENT_STREAM_MIME_TYPE}, {JSON_MIME_TYPE}"),
        );
        if let Some(id) = last_event_id {
            builder = builder.header(HEADER_LAST_EVENT_ID, id);
        }
        let response = self
            .request(builder, session_id.as_deref(), auth, headers)
            .send()
            .await
            .map_err(StreamableHttpError::Client)?;
        if response.status() == StatusCode::METHOD_NOT_ALLOWED {
            return Err(StreamableHttpError::ServerDoesNotSupportSse);
        }
        if let Some(e) = status_error(&response) {
            return Err(e.into());
        }
        let response = response
            .error_for_status()
            .map_err(StreamableHttpError::Client)?;
        match content_type(&response) {
            Some(c)
                if media_type_is(&c, EVENT_STREAM_MIME_TYPE)
                    || media_type_is(&c, JSON_MIME_TYPE) => {}
            other => return Err(StreamableHttpError::UnexpectedContentType(other)),
        }
        Ok(bounded_sse(response.bytes_stream(), max_sse_event_size))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_types_compare_without_case_or_parameters() {
        assert!(media_type_is(
            "Application/JSON; charset=utf-8",
            JSON_MIME_TYPE
        ));
        assert!(!media_type_is("application/jsonx", JSON_MIME_TYPE));
    }

    #[tokio::test]
    async fn an_sse_event_larger_than_the_limit_fails_the_stream() {
        let big = format!("data: {}\n\n", "x".repeat(100));
        let chunks: Vec<Result<bytes::Bytes, reqwest::Error>> = vec![
            Ok(bytes::Bytes::from_static(
                b": a long comment does not count\n",
            )),
            Ok(bytes::Bytes::from_static(b"data: small\n\n")),
            Ok(bytes::Bytes::from(big)),
        ];
        let mut s = bounded_sse(futures::stream::iter(chunks), 50);
        let first = s.next().await.unwrap().unwrap();
        assert_eq!(first.data.as_deref(), Some("small"));
        assert!(s.next().await.unwrap().is_err());
    }
}
