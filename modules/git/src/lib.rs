//! # nuvira-git — a run's result as a branch, a commit and a pull request
//!
//! What a coding run needs from git, and nothing the bare engine needs: the repository's
//! state before a run ([`Repo::dirty_files`]), a branch to work on ([`Repo::create_branch`]),
//! a commit of exactly the files the run wrote ([`Repo::commit_paths`], with the message of
//! [`commit_message`]), the files and lines a branch changed since its merge base
//! ([`Repo::changed_since`], for review mode and inspect's ranking), `.gitattributes`'
//! generated files ([`Repo::generated`]), a pull-request description ([`pr_body`]) and the
//! GitHub REST client that opens the pull request ([`github`]).
//!
//! Why it is shaped so:
//! - **libgit2 (`git2`, vendored) for everything it does well**: status, branches, merge
//!   bases, diffs, attributes, trees and commits. It builds from C sources in about half a
//!   minute on two cores, once, and reads repositories in-process (no `git` parsing). gitoxide
//!   (`gix`) was weighed: it is pure Rust, but writing a tree from a separate index and
//!   creating commits needed more of its surface (and crates) than this crate uses of libgit2.
//! - **The `git` binary only where libgit2 lacks the feature**: signing (`git commit-tree -S`
//!   reads the user's `gpg.format`, `user.signingkey`, ssh and x509 signing, which libgit2 does
//!   not) and pushing (`git push` uses the user's credential helpers and ssh agent).
//! - **Exactly the run's files**: a commit's tree is built in an in-memory index from `HEAD`'s
//!   tree plus the paths given, so unrelated changes, even staged ones, never go in.
//! - **`.nuvira/` is Nuvira's own state**: it is never dirty and never committed.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod github;
mod message;
mod repo;

pub use message::{PR_BODY_LIMIT, commit_message, files_written, pr_body};
pub use repo::{ChangedFile, CommitOptions, Committed, DirtyFile, Repo, STATE_DIR, parse_identity};

use std::path::PathBuf;

/// What went wrong with git.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GitError {
    /// The folder is in no git repository.
    #[error("`{}` is not in a git repository; run `git init` there, or pass the repository with --repo", .0.display())]
    NotARepository(PathBuf),
    /// A libgit2 operation failed.
    #[error("failed to {what}: {}", .source.message())]
    Git {
        /// What was being done.
        what: String,
        /// libgit2's error.
        #[source]
        source: git2::Error,
    },
    /// A file operation failed.
    #[error("failed to {what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// `--branch NAME` names a branch that exists.
    #[error(
        "branch `{0}` already exists; choose another --branch name, or switch to it yourself with `git switch`"
    )]
    BranchExists(String),
    /// Not a valid branch name.
    #[error("`{0}` is not a valid branch name (see `git check-ref-format --branch`)")]
    BadBranchName(String),
    /// A revision that does not resolve to a commit.
    #[error("`{rev}` is not a known commit, branch or tag ({}); fetch it first (`git fetch origin {rev}`) or name another", .source.message())]
    UnknownRevision {
        /// The revision as given.
        rev: String,
        /// libgit2's error.
        #[source]
        source: git2::Error,
    },
    /// The histories share no commit.
    #[error(
        "`{0}` and HEAD have no common commit; in a shallow clone fetch more history (`git fetch --deepen 100` or `--unshallow`)"
    )]
    NoMergeBase(String),
    /// A path that is not inside the working tree.
    #[error(
        "`{0}` is not a path inside the repository's working tree (absolute, `..`, `.git` or `.nuvira`)"
    )]
    OutsideRepository(String),
    /// A path that is a folder or special file.
    #[error("`{0}` is not a file or symbolic link, so it cannot be committed")]
    NotAFile(String),
    /// No author is configured.
    #[error(
        "no author for the commit: set `git config user.name` and `user.email`, or pass --author 'Name <email>'"
    )]
    NoIdentity,
    /// `--author` is not `Name <email>`.
    #[error("author `{0}` is not of the form `Name <email>`")]
    BadAuthor(String),
    /// `git commit-tree -S` failed.
    #[error(
        "failed to sign the commit with `git commit-tree -S`: {0}; check `git config user.signingkey` and `gpg.format`, or commit without --sign"
    )]
    Sign(String),
}
