//! "Skip or fail": what a test needs from the machine.
//!
//! A test that needs Docker, pytest, Chromium or Node skips (printing why) when the machine
//! lacks it, unless its `NUVIRA_REQUIRE_*` variable is `1` (CI sets them), which makes the
//! lack a failure: a CI machine that lost its Docker engine must not pass by skipping.

use std::fmt::Display;
use std::path::PathBuf;

/// Something a test may need from the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Requirement {
    /// A Docker engine with the nuvira images (`NUVIRA_REQUIRE_DOCKER`).
    Docker,
    /// `python3` with pytest (`NUVIRA_REQUIRE_PYTEST`).
    Pytest,
    /// A Chromium on `PATH` (`NUVIRA_REQUIRE_CHROMIUM`).
    Chromium,
    /// Node with npm (`NUVIRA_REQUIRE_NODE`).
    Node,
    /// pnpm on `PATH` (`NUVIRA_REQUIRE_PNPM`).
    Pnpm,
    /// The Go toolchain, `go` on `PATH` (`NUVIRA_REQUIRE_GO`).
    Go,
    /// bubblewrap that can create its namespaces (`NUVIRA_REQUIRE_BWRAP`).
    Bwrap,
    /// Writable cgroups for the local sandbox's limits (`NUVIRA_REQUIRE_CGROUPS`).
    Cgroups,
    /// The MCP SDKs and servers the MCP tests talk to (`NUVIRA_REQUIRE_MCP`): the Python `mcp`
    /// package, and the npm packages in `$NUVIRA_MCP_NPM_DIR/node_modules`.
    Mcp,
    /// An OpenSSH server (`/usr/sbin/sshd`) and `ssh-keygen`, for a private sshd on loopback
    /// (`NUVIRA_REQUIRE_SSHD`).
    Sshd,
}

impl Requirement {
    /// The variable that makes a missing requirement a failure.
    pub fn variable(self) -> &'static str {
        match self {
            Self::Docker => "NUVIRA_REQUIRE_DOCKER",
            Self::Pytest => "NUVIRA_REQUIRE_PYTEST",
            Self::Chromium => "NUVIRA_REQUIRE_CHROMIUM",
            Self::Node => "NUVIRA_REQUIRE_NODE",
            Self::Pnpm => "NUVIRA_REQUIRE_PNPM",
            Self::Go => "NUVIRA_REQUIRE_GO",
            Self::Bwrap => "NUVIRA_REQUIRE_BWRAP",
            Self::Cgroups => "NUVIRA_REQUIRE_CGROUPS",
            Self::Mcp => "NUVIRA_REQUIRE_MCP",
            Self::Sshd => "NUVIRA_REQUIRE_SSHD",
        }
    }

    /// How to get it.
    pub fn hint(self) -> &'static str {
        match self {
            Self::Docker => "run scripts/docker-up.sh",
            Self::Pytest => "python3 -m pip install pytest",
            Self::Chromium => "apt-get install -y chromium",
            Self::Node => "install node and npm",
            Self::Pnpm => "npm install -g pnpm",
            Self::Go => "apt-get install -y golang-go",
            Self::Bwrap => "apt-get install -y bubblewrap, and allow it to create namespaces",
            Self::Cgroups => {
                "run as root with cgroup v1 memory and pids hierarchies, or with cgroup v2 delegated or systemd"
            }
            Self::Sshd => "apt-get install -y openssh-server openssh-client (.ci/run does)",
            Self::Mcp => {
                "python3 -m pip install mcp mcp-server-git; npm install --prefix DIR @modelcontextprotocol/sdk @modelcontextprotocol/server-everything @modelcontextprotocol/server-filesystem and set NUVIRA_MCP_NPM_DIR=DIR (.ci/run does both)"
            }
        }
    }

    /// Whether its variable is set to `1`.
    pub fn is_required(self) -> bool {
        std::env::var(self.variable()).as_deref() == Ok("1")
    }
}

/// `Some(value)` when the requirement is met; otherwise `None` after printing that the test
/// is skipped and why.
///
/// # Panics
/// When the requirement is not met and its variable is `1`.
pub fn require<T, E: Display>(what: Requirement, found: Result<T, E>) -> Option<T> {
    match found {
        Ok(v) => Some(v),
        Err(why) => {
            assert!(
                !what.is_required(),
                "{}=1 but {why} ({})",
                what.variable(),
                what.hint()
            );
            eprintln!(
                "SKIPPED: {why} ({}; set {}=1 to make this a failure)",
                what.hint(),
                what.variable()
            );
            None
        }
    }
}

/// Whether the Python MCP SDK (`import mcp`) is installed (see [`require`]).
///
/// # Panics
/// Without it when `NUVIRA_REQUIRE_MCP=1`.
pub fn mcp_python_ready() -> bool {
    let ok = std::process::Command::new("python3")
        .args(["-c", "import mcp"])
        .output()
        .is_ok_and(|o| o.status.success());
    require(
        Requirement::Mcp,
        if ok {
            Ok(())
        } else {
            Err("the Python MCP SDK (`mcp`) is not installed")
        },
    )
    .is_some()
}

/// The folder whose `node_modules` holds the npm MCP packages (`$NUVIRA_MCP_NPM_DIR`), when
/// it has `package` (e.g. `@modelcontextprotocol/sdk`) and `node` runs (see [`require`]).
///
/// # Panics
/// Without them when `NUVIRA_REQUIRE_MCP=1`.
pub fn mcp_npm_dir(package: &str) -> Option<PathBuf> {
    let found = match std::env::var_os("NUVIRA_MCP_NPM_DIR") {
        None => Err("NUVIRA_MCP_NPM_DIR is not set".to_owned()),
        Some(dir) => {
            let dir = PathBuf::from(dir);
            let node = std::process::Command::new("node")
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success());
            if !node {
                Err("node is not installed".to_owned())
            } else if dir.join("node_modules").join(package).is_dir() {
                Ok(dir)
            } else {
                Err(format!("{} has no node_modules/{package}", dir.display()))
            }
        }
    };
    require(Requirement::Mcp, found)
}

/// Whether pytest can run here (see [`require`]).
///
/// # Panics
/// Without pytest when `NUVIRA_REQUIRE_PYTEST=1`.
pub fn pytest_ready() -> bool {
    let ok = std::process::Command::new("python3")
        .args(["-c", "import pytest"])
        .output()
        .is_ok_and(|o| o.status.success());
    require(
        Requirement::Pytest,
        if ok {
            Ok(())
        } else {
            Err("pytest is not installed")
        },
    )
    .is_some()
}

/// A Chromium (`chromium`, `chromium-browser` or `google-chrome` on `PATH`), or `None` after
/// printing why the test is skipped (see [`require`]).
///
/// # Panics
/// Without one when `NUVIRA_REQUIRE_CHROMIUM=1`.
pub fn chromium() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|path| {
        ["chromium", "chromium-browser", "google-chrome"]
            .iter()
            .flat_map(|name| std::env::split_paths(&path).map(move |d| d.join(name)))
            .find(|p| p.is_file())
    });
    require(Requirement::Chromium, found.ok_or("no chromium on PATH"))
}

/// Whether a process is gone, or a zombie waiting to be reaped: dead either way.
fn is_dead(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// Whether a process that was sent SIGKILL is dead within 5 s. A signal is delivered
/// asynchronously: right after `kill` returns the target may not have exited yet, and there is
/// nothing to wait on for a process that is not our child, so this polls `/proc` (Linux).
pub fn process_is_dead(pid: i32) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        if is_dead(pid) {
            return true;
        }
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Whether this process runs as root (its effective uid is 0).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1).map(|e| e == "0"))
        .unwrap_or(false)
}

/// Whether `tool` is a file in one of the folders of `PATH`.
pub fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
}
