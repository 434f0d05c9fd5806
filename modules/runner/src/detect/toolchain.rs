//! The toolchain of Node, Rust and Go projects: the lockfile's package manager, the
//! `rust-toolchain.toml` channel, Go's own caches — each with the reason it was chosen.

use super::python::on_path;
use super::read_small;
use std::path::{Path, PathBuf};

/// A Node package manager, picked from the project's lockfile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PackageManager {
    Npm,
    Pnpm,
    Yarn,
    Bun,
}

impl PackageManager {
    fn name(self) -> &'static str {
        match self {
            PackageManager::Npm => "npm",
            PackageManager::Pnpm => "pnpm",
            PackageManager::Yarn => "yarn",
            PackageManager::Bun => "bun",
        }
    }

    /// The argv prefix that runs an installed package binary without installing anything.
    fn exec(self) -> &'static [&'static str] {
        match self {
            // `--no`: never install; `--`: every later flag is the runner's, not npx's.
            PackageManager::Npm => &["npx", "--no", "--"],
            PackageManager::Pnpm => &["pnpm", "exec"],
            PackageManager::Yarn => &["yarn", "exec"],
            PackageManager::Bun => &["bun", "run"],
        }
    }

    fn program(self) -> &'static str {
        match self {
            PackageManager::Npm => "npx",
            other => other.name(),
        }
    }
}

/// The project folder `dir` (at `rel` below the workspace root) and each folder above it up to
/// the root, each with the way there from `dir` (``, `../`, `../../`).
pub(super) fn up_to_root(dir: &Path, rel: &Path) -> Vec<(PathBuf, String)> {
    let depth = rel.components().count();
    let mut out = Vec::with_capacity(depth + 1);
    let mut base = dir.to_path_buf();
    let mut up = String::new();
    for level in 0..=depth {
        out.push((base.clone(), up.clone()));
        if level < depth {
            base.pop();
            up.push_str("../");
        }
    }
    out
}

/// Which package manager runs a JS project's test runner, and why: the argv prefix and the
/// reason. The lockfile and `node_modules/` may be in a folder above the project, up to the
/// workspace root (a pnpm, yarn or npm workspace).
pub(super) fn node(dir: &Path, rel: &Path) -> (Vec<String>, String) {
    let locks = [
        ("pnpm-lock.yaml", PackageManager::Pnpm),
        ("yarn.lock", PackageManager::Yarn),
        ("bun.lockb", PackageManager::Bun),
        ("bun.lock", PackageManager::Bun),
        ("package-lock.json", PackageManager::Npm),
        ("npm-shrinkwrap.json", PackageManager::Npm),
    ];
    let folders = up_to_root(dir, rel);
    let found = folders.iter().find_map(|(base, up)| {
        locks
            .iter()
            .find(|(file, _)| base.join(file).is_file())
            .map(|(file, pm)| (format!("{up}{file}"), *pm))
    });
    let modules = match folders
        .iter()
        .find(|(base, _)| base.join("node_modules").is_dir())
    {
        Some((_, up)) => format!("the existing {up}node_modules/"),
        None => "no node_modules/ yet: install the dependencies first".to_owned(),
    };
    let (pm, mut why) = match found {
        Some((file, pm)) => (pm, format!("{}, from {file}", pm.name())),
        None => (
            PackageManager::Npm,
            "npm (no pnpm, yarn or bun lockfile)".to_owned(),
        ),
    };
    let pm = if pm != PackageManager::Npm && !on_path(pm.program()) {
        why = format!("{why}, but {} is not on PATH: npx instead", pm.program());
        PackageManager::Npm
    } else {
        pm
    };
    why = format!("{why}; {modules}");
    (pm.exec().iter().map(|s| (*s).to_owned()).collect(), why)
}

/// The channel a `rust-toolchain.toml` (or legacy `rust-toolchain`) file in `dir` asks for.
pub(super) fn rust_channel(dir: &Path) -> Option<(String, &'static str)> {
    for file in ["rust-toolchain.toml", "rust-toolchain"] {
        let Some(text) = read_small(&dir.join(file)) else {
            continue;
        };
        let channel = match toml::from_str::<toml::Table>(&text) {
            Ok(doc) => doc
                .get("toolchain")
                .and_then(|t| t.get("channel"))
                .and_then(|c| c.as_str())
                .map(str::to_owned),
            // The legacy file may hold just the channel name.
            Err(_) => text
                .lines()
                .map(str::trim)
                .find(|l| !l.is_empty() && !l.starts_with('#'))
                .map(str::to_owned),
        };
        if let Some(c) = channel.filter(|c| {
            !c.is_empty()
                && c.chars()
                    .all(|ch| ch.is_ascii_alphanumeric() || matches!(ch, '.' | '-' | '_'))
        }) {
            return Some((c, file));
        }
    }
    None
}

/// `cargo` (or `cargo +CHANNEL` when a toolchain file asks for one and rustup is installed),
/// and why.
pub(super) fn rust(dir: &Path) -> (Vec<String>, String) {
    let Some((channel, file)) = rust_channel(dir) else {
        return (
            vec!["cargo".to_owned()],
            "cargo from PATH (no rust-toolchain.toml)".to_owned(),
        );
    };
    if !on_path("rustup") {
        return (
            vec!["cargo".to_owned()],
            format!(
                "{file} asks for channel {channel}, NOT honoured: rustup is not installed, so cargo from PATH runs (install rustup to use the project's toolchain)"
            ),
        );
    }
    let installed = rustup_home()
        .and_then(|home| std::fs::read_dir(home.join("toolchains")).ok())
        .is_some_and(|entries| {
            entries.filter_map(Result::ok).any(|e| {
                e.file_name()
                    .to_str()
                    .is_some_and(|n| n == channel || n.starts_with(&format!("{channel}-")))
            })
        });
    let state = if installed {
        "installed"
    } else {
        "not installed: rustup will try to download it, which needs the network (`rustup toolchain install` it first)"
    };
    (
        vec!["cargo".to_owned(), format!("+{channel}")],
        format!("{file}: channel {channel}, run as `cargo +{channel}` ({state})"),
    )
}

fn rustup_home() -> Option<PathBuf> {
    std::env::var_os("RUSTUP_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".rustup")))
}

/// Go's toolchain and caches, described.
pub(super) fn go(go_mod: &str) -> String {
    let directive = |name: &str| {
        go_mod.lines().find_map(|l| {
            let rest = l.trim().strip_prefix(name)?;
            rest.starts_with(char::is_whitespace)
                .then(|| rest.trim().to_owned())
        })
    };
    let mut why = "go from PATH".to_owned();
    if let Some(v) = directive("go") {
        why.push_str(&format!(" (go.mod: go {v}"));
        if let Some(t) = directive("toolchain") {
            why.push_str(&format!(", toolchain {t}: go itself picks it"));
        }
        why.push(')');
    }
    why.push_str("; module cache: go's own GOMODCACHE; build cache: the sandbox's warm GOCACHE (go's own with --no-cache)");
    why
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toolchain_files_give_their_channel() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(rust_channel(dir.path()), None);
        std::fs::write(dir.path().join("rust-toolchain"), "nightly-2024-01-01\n").unwrap();
        assert_eq!(
            rust_channel(dir.path()),
            Some(("nightly-2024-01-01".to_owned(), "rust-toolchain"))
        );
        std::fs::write(
            dir.path().join("rust-toolchain.toml"),
            "[toolchain]\nchannel = \"1.80.0\"\ncomponents = [\"clippy\"]\n",
        )
        .unwrap();
        assert_eq!(
            rust_channel(dir.path()),
            Some(("1.80.0".to_owned(), "rust-toolchain.toml"))
        );
        // A channel that is not a plain name is never put on a command line.
        std::fs::write(
            dir.path().join("rust-toolchain.toml"),
            "[toolchain]\nchannel = \"1.80; rm -rf /\"\n",
        )
        .unwrap();
        assert_eq!(
            rust_channel(dir.path()),
            Some(("nightly-2024-01-01".to_owned(), "rust-toolchain"))
        );
    }

    #[test]
    fn go_names_its_directives_and_caches() {
        let why = go("module x\n\ngo 1.22\ntoolchain go1.22.3\n");
        assert!(why.contains("go 1.22, toolchain go1.22.3"), "{why}");
        assert!(why.contains("GOMODCACHE"), "{why}");
    }
}
