//! Nuvira and the Model Context Protocol, both ways.
//!
//! - [`server`]: `nuvira mcp` serves Nuvira's validated plans, all-or-nothing edits with
//!   rollback, sandboxed tests with structured failures and whole plan runs as MCP tools, so a
//!   coding agent (Claude Code, Cursor, Codex) gets them without a shell. Built on the official
//!   Rust SDK (`rmcp`); stdio, or streamable HTTP on a loopback address.
//! - [`client`]: the `mcp` module: a plan step that calls a tool of another MCP server, the
//!   servers declared once per plan (`mcp_servers:`) and shared by its steps.
//!
//! Why one crate: both sides share the SDK, the limits on untrusted server text and the
//! sandbox policy. Why no engine here: module crates depend on the contract only; the plan
//! tools reach the engine through [`server::PlanHost`], which the `nuvira` crate implements.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod client;
pub mod http;
pub mod policy;
pub mod server;

pub use client::McpModule;
pub use policy::{PolicyError, SandboxChoice, SandboxPolicy};
pub use server::{NuviraServer, PlanHost, PlanSource, RunContext, ServerOptions, ToolError};

use rmcp::ServiceExt;
use std::net::SocketAddr;

/// Why the server stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The transport failed to start (stdio closed before `initialize`, say).
    #[error("failed to start the MCP session: {0}")]
    Start(String),
    /// The HTTP address cannot be used.
    #[error("failed to listen on {addr}: {reason}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        reason: String,
    },
    /// The address is not a loopback one and `allow_remote` was not given.
    #[error(
        "refusing to listen on {0}: it is not a loopback address, and this server edits files and runs tests for whoever connects; use 127.0.0.1:PORT, or pass --allow-remote if the network is trusted"
    )]
    NotLoopback(SocketAddr),
}

/// Serves one session on stdin/stdout until the client closes it, then waits for the work
/// still running (a cancelled run rolling back) before returning.
///
/// # Errors
/// [`ServeError::Start`] when the session cannot start.
pub async fn serve_stdio(server: NuviraServer) -> Result<(), ServeError> {
    let running = server
        .clone()
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| ServeError::Start(e.to_string()))?;
    let _ = running.waiting().await;
    server.drain().await;
    Ok(())
}

/// Serves streamable HTTP on `addr` (path `/mcp`) until `shutdown` is cancelled. Only
/// loopback addresses unless `allow_remote`.
///
/// # Errors
/// [`ServeError::NotLoopback`] or [`ServeError::Listen`].
pub async fn serve_http(
    server: NuviraServer,
    addr: SocketAddr,
    allow_remote: bool,
    shutdown: tokio_util::sync::CancellationToken,
    on_listening: impl FnOnce(SocketAddr),
) -> Result<(), ServeError> {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use hyper_util::server::conn::auto::Builder;
    use hyper_util::service::TowerToHyperService;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    };
    if !allow_remote && !addr.ip().is_loopback() {
        return Err(ServeError::NotLoopback(addr));
    }
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| ServeError::Listen {
            addr,
            reason: policy::io_reason(&e),
        })?;
    let bound = listener.local_addr().unwrap_or(addr);
    let mut config = StreamableHttpServerConfig::default();
    config.cancellation_token = shutdown.child_token();
    if allow_remote {
        config.allowed_hosts.clear();
    }
    let factory = server.clone();
    let service = TowerToHyperService::new(StreamableHttpService::new(
        move || Ok(factory.clone()),
        LocalSessionManager::default().into(),
        config,
    ));
    on_listening(bound);
    loop {
        let io = tokio::select! {
            () = shutdown.cancelled() => break,
            accept = listener.accept() => match accept {
                Ok((stream, _)) => TokioIo::new(stream),
                Err(_) => continue,
            },
        };
        let service = service.clone();
        tokio::spawn(async move {
            let _ = Builder::new(TokioExecutor::default())
                .serve_connection(io, service)
                .await;
        });
    }
    server.drain().await;
    Ok(())
}
