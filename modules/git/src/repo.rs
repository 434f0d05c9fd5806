//! The repository: its state before a run, branches, the commit of a run's files, and what a
//! branch changed since its merge base.

use crate::GitError;
use git2::{DiffOptions, ErrorCode, Oid, Repository, Signature, Status, StatusOptions};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Nuvira's own state folder: never part of a commit, never "dirty".
pub const STATE_DIR: &str = ".nuvira";

/// A git repository with a working tree.
pub struct Repo {
    repo: Repository,
    root: PathBuf,
}

impl std::fmt::Debug for Repo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Repo").field("root", &self.root).finish()
    }
}

/// One file that differs from `HEAD` (staged, unstaged or untracked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirtyFile {
    /// Repository-relative path (`/`-separated; may hold any byte git allows, escape it before
    /// printing).
    pub path: String,
    /// What is different, in words: `modified`, `staged`, `untracked`, `deleted`, `renamed`,
    /// `conflicted`, `type changed`.
    pub state: &'static str,
}

/// Who a commit is by, and whether to sign it.
#[derive(Debug, Clone, Default)]
pub struct CommitOptions {
    /// `Name <email>` for the author; default: `user.name`/`user.email` from git config.
    pub author: Option<String>,
    /// Sign with the user's signing configuration (`gpg.format`, `user.signingkey`), through
    /// `git commit-tree -S`. `commit.gpgsign = true` in git config signs too.
    pub sign: bool,
}

/// A commit that was made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    /// The commit id (40 hex digits).
    pub sha: String,
    /// The branch `HEAD` pointed at, or `None` for a detached `HEAD`.
    pub branch: Option<String>,
    /// The files in the commit, sorted.
    pub paths: Vec<String>,
}

/// The lines a branch added to one file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ChangedFile {
    /// Repository-relative path (the new path of a rename).
    pub path: String,
    /// The file was deleted on the branch.
    pub deleted: bool,
    /// The file is binary (its diff has no lines).
    pub binary: bool,
    /// 1-based numbers of the lines added or changed, in the new file.
    pub added_lines: BTreeSet<u32>,
    /// The unified diff (`diff -u` style) from the merge base.
    pub diff: String,
    /// Lines added.
    pub additions: usize,
    /// Lines removed.
    pub deletions: usize,
}

fn git_err(what: impl Into<String>) -> impl FnOnce(git2::Error) -> GitError {
    let what = what.into();
    move |source| GitError::Git { what, source }
}

impl Repo {
    /// The repository `path` is in, or `None` when it is in none (or in a bare one).
    ///
    /// # Errors
    /// [`GitError::Git`] when a repository is there but cannot be opened.
    pub fn discover(path: &Path) -> Result<Option<Self>, GitError> {
        match Repository::discover(path) {
            Ok(repo) => {
                let Some(root) = repo.workdir().map(Path::to_owned) else {
                    return Ok(None);
                };
                Ok(Some(Self { repo, root }))
            }
            Err(e) if e.code() == ErrorCode::NotFound => Ok(None),
            Err(source) => Err(GitError::Git {
                what: format!("open the git repository at `{}`", path.display()),
                source,
            }),
        }
    }

    /// The repository `path` is in.
    ///
    /// # Errors
    /// [`GitError::NotARepository`] when there is none, [`GitError::Git`] when it cannot be
    /// opened.
    pub fn open(path: &Path) -> Result<Self, GitError> {
        Self::discover(path)?.ok_or_else(|| GitError::NotARepository(path.to_owned()))
    }

    /// The working tree's root folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The underlying libgit2 handle.
    pub fn raw(&self) -> &Repository {
        &self.repo
    }

    /// Every file that differs from `HEAD`: staged, unstaged, untracked (not ignored), in
    /// conflict; submodules with new commits or changes. `.nuvira/` (Nuvira's own state) never
    /// counts. Sorted by path.
    ///
    /// # Errors
    /// [`GitError::Git`] when the status cannot be read.
    pub fn dirty_files(&self) -> Result<Vec<DirtyFile>, GitError> {
        let mut opts = StatusOptions::new();
        opts.include_untracked(true)
            .recurse_untracked_dirs(false)
            .include_ignored(false)
            .exclude_submodules(false)
            .renames_head_to_index(true);
        let statuses = self
            .repo
            .statuses(Some(&mut opts))
            .map_err(git_err("read the status of the working tree"))?;
        let mut out = Vec::new();
        for entry in statuses.iter() {
            let path = String::from_utf8_lossy(entry.path_bytes()).into_owned();
            if path == STATE_DIR || path.starts_with(".nuvira/") {
                continue;
            }
            let s = entry.status();
            let state = if s.contains(Status::CONFLICTED) {
                "conflicted"
            } else if s.contains(Status::WT_NEW) {
                "untracked"
            } else if s.intersects(Status::WT_DELETED | Status::INDEX_DELETED) {
                "deleted"
            } else if s.intersects(Status::INDEX_RENAMED | Status::WT_RENAMED) {
                "renamed"
            } else if s.intersects(Status::WT_TYPECHANGE | Status::INDEX_TYPECHANGE) {
                "type changed"
            } else if s.contains(Status::WT_MODIFIED) {
                "modified"
            } else if s.intersects(Status::INDEX_NEW | Status::INDEX_MODIFIED) {
                "staged"
            } else {
                continue; // ignored, or current
            };
            out.push(DirtyFile { path, state });
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    /// The branch `HEAD` points at (`main`), or `None` when `HEAD` is detached.
    pub fn current_branch(&self) -> Option<String> {
        let head = self.repo.find_reference("HEAD").ok()?;
        let target = head.symbolic_target()?;
        Some(
            target
                .strip_prefix("refs/heads/")
                .unwrap_or(target)
                .to_owned(),
        )
    }

    /// The commit `HEAD` is at, or `None` before the first commit.
    pub fn head_sha(&self) -> Option<String> {
        let head = self.repo.head().ok()?;
        head.peel_to_commit().ok().map(|c| c.id().to_string())
    }

    /// Creates branch `name` at `base` (a revision such as `main`, `origin/main` or a sha;
    /// default `HEAD`) and checks it out. The working tree's changes are kept (as
    /// `git checkout -b` does); a checkout that would overwrite one fails and changes nothing.
    ///
    /// # Errors
    /// [`GitError::BranchExists`], [`GitError::BadBranchName`], [`GitError::UnknownRevision`],
    /// [`GitError::Git`] (e.g. the checkout would overwrite local changes).
    pub fn create_branch(&self, name: &str, base: Option<&str>) -> Result<(), GitError> {
        let refname = format!("refs/heads/{name}");
        if !git2::Reference::is_valid_name(&refname) || name.starts_with('-') {
            return Err(GitError::BadBranchName(name.to_owned()));
        }
        if self.repo.find_reference(&refname).is_ok() {
            return Err(GitError::BranchExists(name.to_owned()));
        }
        let rev = base.unwrap_or("HEAD");
        let commit = self.peel_commit(rev)?;
        let head_tree = self
            .repo
            .head()
            .ok()
            .and_then(|h| h.peel_to_tree().ok())
            .map(|t| t.id());
        // Moving to another tree first: a safe checkout keeps local changes and refuses to
        // overwrite them.
        if head_tree != Some(commit.tree_id()) {
            let mut co = git2::build::CheckoutBuilder::new();
            co.safe();
            self.repo
                .checkout_tree(commit.as_object(), Some(&mut co))
                .map_err(git_err(format!(
                    "check out `{rev}` for the new branch `{name}` (commit or stash your changes, or choose another --base)"
                )))?;
        }
        self.repo
            .branch(name, &commit, false)
            .map_err(git_err(format!("create the branch `{name}`")))?;
        self.repo
            .set_head(&refname)
            .map_err(git_err(format!("switch to the branch `{name}`")))?;
        Ok(())
    }

    fn peel_commit(&self, rev: &str) -> Result<git2::Commit<'_>, GitError> {
        self.repo
            .revparse_single(rev)
            .and_then(|o| o.peel_to_commit())
            .map_err(|source| GitError::UnknownRevision {
                rev: rev.to_owned(),
                source,
            })
    }

    /// Commits exactly `paths` (repository-relative) as they are in the working tree on top of
    /// `HEAD`: a path missing from the working tree is removed. Nothing else goes in — not
    /// other changes, not what is staged: the tree is built in a separate in-memory index from
    /// `HEAD`'s tree. Afterwards the index entries of `paths` are updated to the commit (as
    /// `git commit -- PATHS` does) and every other entry is left as it was. Returns `None` when
    /// `paths` hold no change against `HEAD`.
    ///
    /// # Errors
    /// [`GitError::OutsideRepository`] for a path that leaves the working tree or goes through
    /// `.git`/`.nuvira`, [`GitError::NoIdentity`] without an author, [`GitError::Sign`] when
    /// `git commit-tree -S` fails, [`GitError::Git`] / [`GitError::Io`] otherwise.
    pub fn commit_paths(
        &self,
        paths: &[String],
        message: &str,
        options: &CommitOptions,
    ) -> Result<Option<Committed>, GitError> {
        let mut paths: Vec<String> = paths.iter().map(|p| p.replace('\\', "/")).collect();
        paths.sort();
        paths.dedup();
        for p in &paths {
            check_rel(p)?;
        }
        let parent = match self.repo.head() {
            Ok(h) => Some(
                h.peel_to_commit()
                    .map_err(git_err("read the HEAD commit"))?,
            ),
            Err(e) if matches!(e.code(), ErrorCode::UnbornBranch | ErrorCode::NotFound) => None,
            Err(source) => {
                return Err(GitError::Git {
                    what: "read HEAD".into(),
                    source,
                });
            }
        };
        let mut index = git2::Index::new().map_err(git_err("create an in-memory index"))?;
        if let Some(p) = &parent {
            let tree = p.tree().map_err(git_err("read the HEAD tree"))?;
            index
                .read_tree(&tree)
                .map_err(git_err("read the HEAD tree"))?;
        }
        for rel in &paths {
            self.stage_into(&mut index, rel)?;
        }
        let tree_id = index
            .write_tree_to(&self.repo)
            .map_err(git_err("write the commit's tree"))?;
        if parent.as_ref().map(git2::Commit::tree_id) == Some(tree_id) {
            return Ok(None);
        }
        let tree = self
            .repo
            .find_tree(tree_id)
            .map_err(git_err("read the commit's tree"))?;
        let committer = self.repo.signature().ok();
        let author = match &options.author {
            Some(a) => parse_identity(a)?,
            None => committer.clone().ok_or(GitError::NoIdentity)?,
        };
        let committer = committer.unwrap_or_else(|| author.clone());
        let branch = self.current_branch();
        let parents: Vec<&git2::Commit<'_>> = parent.iter().collect();
        // `commit.gpgsign` asks for signed commits as `--sign` does.
        let sign = options.sign
            || self
                .repo
                .config()
                .and_then(|c| c.get_bool("commit.gpgsign"))
                .unwrap_or(false);
        let sha = if sign {
            let sha = self.commit_tree_signed(tree_id, parent.as_ref(), &author, message)?;
            self.move_head(sha, parent.as_ref().map(git2::Commit::id), message)?;
            sha
        } else {
            // libgit2 refuses when HEAD moved away from `parent` meanwhile.
            self.repo
                .commit(Some("HEAD"), &author, &committer, message, &tree, &parents)
                .map_err(git_err("create the commit"))?
        };
        // The real index: the committed paths now match HEAD, every other entry stays.
        let mut real = self.repo.index().map_err(git_err("open the index"))?;
        for rel in &paths {
            if self.root.join(rel).symlink_metadata().is_ok() {
                if let Some(entry) = index.get_path(Path::new(rel), 0) {
                    real.add(&entry)
                        .map_err(git_err(format!("update `{rel}` in the index")))?;
                }
            } else {
                let _ = real.remove_path(Path::new(rel));
            }
        }
        real.write().map_err(git_err("write the index"))?;
        Ok(Some(Committed {
            sha: sha.to_string(),
            branch,
            paths,
        }))
    }

    /// Adds the working tree's `rel` to `index` (or removes it when it is gone).
    fn stage_into(&self, index: &mut git2::Index, rel: &str) -> Result<(), GitError> {
        let abs = self.root.join(rel);
        let meta = match abs.symlink_metadata() {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let _ = index.remove_path(Path::new(rel));
                return Ok(());
            }
            Err(source) => {
                return Err(GitError::Io {
                    what: format!("read `{rel}`"),
                    source,
                });
            }
        };
        let (id, mode) = if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&abs).map_err(|source| GitError::Io {
                what: format!("read the link `{rel}`"),
                source,
            })?;
            let id = self
                .repo
                .blob(target.as_os_str().as_encoded_bytes())
                .map_err(git_err(format!("store `{rel}`")))?;
            (id, 0o120_000)
        } else if meta.is_file() {
            let id = self
                .repo
                .blob_path(&abs)
                .map_err(git_err(format!("store `{rel}`")))?;
            (
                id,
                if is_executable(&meta) {
                    0o100_755
                } else {
                    0o100_644
                },
            )
        } else {
            return Err(GitError::NotAFile(rel.to_owned()));
        };
        let entry = git2::IndexEntry {
            ctime: git2::IndexTime::new(0, 0),
            mtime: git2::IndexTime::new(0, 0),
            dev: 0,
            ino: 0,
            mode,
            uid: 0,
            gid: 0,
            file_size: u32::try_from(meta.len()).unwrap_or(u32::MAX),
            id,
            flags: 0,
            flags_extended: 0,
            path: rel.as_bytes().to_vec(),
        };
        index.add(&entry).map_err(git_err(format!("stage `{rel}`")))
    }

    /// `git commit-tree -S`: the git binary signs with the user's configuration (gpg, ssh or
    /// x509), which libgit2 does not read.
    fn commit_tree_signed(
        &self,
        tree: Oid,
        parent: Option<&git2::Commit<'_>>,
        author: &Signature<'_>,
        message: &str,
    ) -> Result<Oid, GitError> {
        use std::io::Write;
        let mut cmd = Command::new("git");
        cmd.current_dir(&self.root)
            .args(["commit-tree", "-S"])
            .arg(tree.to_string());
        if let Some(p) = parent {
            cmd.arg("-p").arg(p.id().to_string());
        }
        cmd.env("GIT_AUTHOR_NAME", author.name().unwrap_or(""))
            .env("GIT_AUTHOR_EMAIL", author.email().unwrap_or(""))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().map_err(|source| GitError::Io {
            what: "run `git commit-tree -S` (is git installed?)".into(),
            source,
        })?;
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(message.as_bytes());
        }
        let out = child.wait_with_output().map_err(|source| GitError::Io {
            what: "run `git commit-tree -S`".into(),
            source,
        })?;
        if !out.status.success() {
            return Err(GitError::Sign(
                String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            ));
        }
        let sha = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        Oid::from_str(&sha).map_err(|_| GitError::Sign(format!("unexpected output `{sha}`")))
    }

    /// Points `HEAD` (its branch, or `HEAD` itself when detached) at `sha`, if it is still at
    /// `old`.
    fn move_head(&self, sha: Oid, old: Option<Oid>, message: &str) -> Result<(), GitError> {
        let subject = message.lines().next().unwrap_or("");
        let log = format!("commit (nuvira): {subject}");
        let head = self
            .repo
            .find_reference("HEAD")
            .map_err(git_err("read HEAD"))?;
        match (head.symbolic_target(), old) {
            (Some(branch), Some(old)) => self
                .repo
                .reference_matching(branch, sha, true, old, &log)
                .map(|_| ()),
            (Some(branch), None) => self.repo.reference(branch, sha, false, &log).map(|_| ()),
            (None, _) => self.repo.set_head_detached(sha),
        }
        .map_err(git_err("move HEAD to the new commit"))
    }

    /// The merge base of `base` and `HEAD`.
    ///
    /// # Errors
    /// [`GitError::UnknownRevision`] for an unknown `base`, [`GitError::NoMergeBase`] when the
    /// histories share no commit (in a shallow clone: fetch more history).
    pub fn merge_base(&self, base: &str) -> Result<String, GitError> {
        let base_commit = self.peel_commit(base)?;
        let head = self.peel_commit("HEAD")?;
        match self.repo.merge_base(base_commit.id(), head.id()) {
            Ok(oid) => Ok(oid.to_string()),
            Err(e) if e.code() == ErrorCode::NotFound => {
                Err(GitError::NoMergeBase(base.to_owned()))
            }
            Err(source) => Err(GitError::Git {
                what: format!("find the merge base of `{base}` and HEAD"),
                source,
            }),
        }
    }

    /// The trees of the merge base of `base` and of `HEAD`.
    fn base_and_head_trees(
        &self,
        base: &str,
    ) -> Result<(git2::Tree<'_>, git2::Tree<'_>), GitError> {
        let mb = self.merge_base(base)?;
        let old = self
            .peel_commit(&mb)?
            .tree()
            .map_err(git_err("read a tree"))?;
        let new = self
            .peel_commit("HEAD")?
            .tree()
            .map_err(git_err("read a tree"))?;
        Ok((old, new))
    }

    /// The entries that differ between two trees, by path, in path order. A subtree whose id
    /// is the same on both sides is skipped unread, so the cost follows the change, not the
    /// repository (libgit2's tree-to-tree diff walks every entry).
    fn tree_changes(
        &self,
        old: Option<&git2::Tree<'_>>,
        new: Option<&git2::Tree<'_>>,
        prefix: &str,
        out: &mut Vec<Change>,
    ) -> Result<(), GitError> {
        let entries = |t: Option<&git2::Tree<'_>>| -> BTreeMap<Vec<u8>, (Oid, i32)> {
            t.map(|t| {
                t.iter()
                    .map(|e| (e.name_bytes().to_vec(), (e.id(), e.filemode())))
                    .collect()
            })
            .unwrap_or_default()
        };
        let (a, b) = (entries(old), entries(new));
        let names: BTreeSet<&Vec<u8>> = a.keys().chain(b.keys()).collect();
        for name in names {
            let (x, y) = (a.get(name).copied(), b.get(name).copied());
            if x == y {
                continue;
            }
            let path = format!("{prefix}{}", String::from_utf8_lossy(name));
            let is_tree = |e: Option<(Oid, i32)>| e.is_some_and(|(_, m)| m == 0o040_000);
            let tree_of = |e: Option<(Oid, i32)>| -> Result<Option<git2::Tree<'_>>, GitError> {
                match e {
                    Some((id, 0o040_000)) => self
                        .repo
                        .find_tree(id)
                        .map(Some)
                        .map_err(git_err(format!("read the tree `{path}`"))),
                    _ => Ok(None),
                }
            };
            if is_tree(x) || is_tree(y) {
                let (tx, ty) = (tree_of(x)?, tree_of(y)?);
                self.tree_changes(tx.as_ref(), ty.as_ref(), &format!("{path}/"), out)?;
            }
            let blob = |e: Option<(Oid, i32)>| e.filter(|(_, m)| *m != 0o040_000);
            let (bx, by) = (blob(x), blob(y));
            if bx.is_some() || by.is_some() {
                out.push(Change {
                    path,
                    old: bx,
                    new: by,
                });
            }
        }
        Ok(())
    }

    /// The files changed from the merge base of `base` and `HEAD` to `HEAD` (what
    /// `git diff --name-only base...HEAD` lists, without submodules; a rename is a deletion and
    /// an addition), with the lines each added. Generated files are included; filter them with
    /// [`Repo::generated`]. Subtrees the branch did not touch are never read.
    ///
    /// # Errors
    /// As [`Repo::merge_base`], and [`GitError::Git`] when the diff cannot be computed.
    pub fn changed_since(&self, base: &str) -> Result<Vec<ChangedFile>, GitError> {
        let (old, new) = self.base_and_head_trees(base)?;
        let mut changes = Vec::new();
        self.tree_changes(Some(&old), Some(&new), "", &mut changes)?;
        let mut out = Vec::new();
        for c in changes {
            let submodule = |e: Option<(Oid, i32)>| e.is_some_and(|(_, m)| m == 0o160_000);
            if submodule(c.old) || submodule(c.new) {
                continue; // a submodule's new commit: no file to check here
            }
            let find = |e: Option<(Oid, i32)>| -> Result<Option<git2::Blob<'_>>, GitError> {
                e.map(|(id, _)| {
                    self.repo
                        .find_blob(id)
                        .map_err(git_err(format!("read `{}`", c.path)))
                })
                .transpose()
            };
            let (ob, nb) = (find(c.old)?, find(c.new)?);
            let mut opts = DiffOptions::new();
            opts.context_lines(3);
            let path = Path::new(&c.path);
            let patch = git2::Patch::from_buffers(
                ob.as_ref().map_or(&[][..], git2::Blob::content),
                Some(path),
                nb.as_ref().map_or(&[][..], git2::Blob::content),
                Some(path),
                Some(&mut opts),
            )
            .map_err(git_err(format!("diff `{}`", c.path)))?;
            let mut file = ChangedFile {
                path: c.path.clone(),
                deleted: c.new.is_none(),
                binary: patch.delta().flags().is_binary(),
                ..ChangedFile::default()
            };
            let mut patch = patch;
            patch
                .print(&mut |_delta, _hunk, line| {
                    let content = String::from_utf8_lossy(line.content());
                    match line.origin() {
                        '+' => {
                            file.additions += 1;
                            if let Some(n) = line.new_lineno() {
                                file.added_lines.insert(n);
                            }
                            file.diff.push('+');
                        }
                        '-' => {
                            file.deletions += 1;
                            file.diff.push('-');
                        }
                        ' ' => file.diff.push(' '),
                        _ => {} // file and hunk headers carry their own text
                    }
                    file.diff.push_str(&content);
                    true
                })
                .map_err(git_err(format!("diff `{}`", c.path)))?;
            out.push(file);
        }
        Ok(out)
    }

    /// The names only of [`Repo::changed_since`] (submodules included): what
    /// `git diff --name-only base...HEAD` prints, without reading any file.
    ///
    /// # Errors
    /// As [`Repo::changed_since`].
    pub fn changed_names(&self, base: &str) -> Result<Vec<String>, GitError> {
        let (old, new) = self.base_and_head_trees(base)?;
        let mut changes = Vec::new();
        self.tree_changes(Some(&old), Some(&new), "", &mut changes)?;
        let mut out: Vec<String> = changes.into_iter().map(|c| c.path).collect();
        out.sort();
        out.dedup();
        Ok(out)
    }

    /// The paths among `paths` that `.gitattributes` marks generated: `linguist-generated`
    /// set (or `true`), or `-diff` (`diff` unset). Sorted. When no `.gitattributes` can apply
    /// to them (none in the working tree on their folders' path, no `.git/info/attributes`),
    /// nothing is looked up: libgit2 would load the whole index for the first lookup.
    pub fn generated(&self, paths: &[String]) -> Vec<String> {
        let flags = git2::AttrCheckFlags::FILE_THEN_INDEX;
        if !self.attributes_may_apply(paths) {
            return Vec::new();
        }
        let mut out: Vec<String> = paths
            .iter()
            .filter(|p| {
                let path = Path::new(p.as_str());
                let lg = self
                    .repo
                    .get_attr(path, "linguist-generated", flags)
                    .ok()
                    .flatten();
                let generated = matches!(git2::AttrValue::from_string(lg), git2::AttrValue::True)
                    || lg == Some("true");
                let diff = self.repo.get_attr(path, "diff", flags).ok().flatten();
                generated || matches!(git2::AttrValue::from_string(diff), git2::AttrValue::False)
            })
            .cloned()
            .collect();
        out.sort();
        out
    }

    /// Whether a `.gitattributes` in the working tree on the folders of `paths` (or
    /// `.git/info/attributes`) exists: a check proportional to the paths, not the repository.
    fn attributes_may_apply(&self, paths: &[String]) -> bool {
        if self.repo.path().join("info").join("attributes").is_file() {
            return true;
        }
        let mut folders = BTreeSet::new();
        for p in paths {
            let mut dir = Path::new(p.as_str()).parent();
            while let Some(d) = dir {
                if !folders.insert(d.to_owned()) {
                    break;
                }
                dir = d.parent();
            }
        }
        folders
            .iter()
            .any(|d| self.root.join(d).join(".gitattributes").is_file())
    }

    /// Every path in the index, `/`-separated.
    pub fn tracked_files(&self) -> Vec<String> {
        let Ok(index) = self.repo.index() else {
            return Vec::new();
        };
        index
            .iter()
            .map(|e| String::from_utf8_lossy(&e.path).into_owned())
            .collect()
    }

    /// Whether any `.gitattributes` (tracked, or `.git/info/attributes`) can mark files: when
    /// none can, [`Repo::generated`] is empty and need not be asked per file.
    pub fn has_attributes(&self) -> bool {
        if self.repo.path().join("info").join("attributes").is_file() {
            return true;
        }
        let Ok(index) = self.repo.index() else {
            return false;
        };
        index
            .iter()
            .any(|e| e.path == b".gitattributes" || e.path.ends_with(b"/.gitattributes"))
    }

    /// The branch `refs/remotes/REMOTE/HEAD` names (`main`), when the clone knows it.
    pub fn remote_head(&self, remote: &str) -> Option<String> {
        let r = self
            .repo
            .find_reference(&format!("refs/remotes/{remote}/HEAD"))
            .ok()?;
        r.symbolic_target()?
            .strip_prefix(&format!("refs/remotes/{remote}/"))
            .map(str::to_owned)
    }

    /// What a branch is compared with when no base is given: `origin/HEAD`'s branch
    /// (`origin/main`), else a local `main` or `master` that is not the current branch.
    pub fn default_base(&self) -> Option<String> {
        if let Some(b) = self.remote_head("origin") {
            return Some(format!("origin/{b}"));
        }
        let current = self.current_branch();
        ["main", "master"]
            .into_iter()
            .find(|b| {
                current.as_deref() != Some(*b)
                    && self.repo.find_branch(b, git2::BranchType::Local).is_ok()
            })
            .map(str::to_owned)
    }

    /// The URL of remote `name` (`origin`).
    pub fn remote_url(&self, name: &str) -> Option<String> {
        self.repo.find_remote(name).ok()?.url().map(str::to_owned)
    }
}

/// One path whose blob differs between two trees: `(id, mode)` on each side, `None` where it
/// is absent.
struct Change {
    path: String,
    old: Option<(Oid, i32)>,
    new: Option<(Oid, i32)>,
}

/// Rejects a path that is absolute, climbs with `..`, or goes through `.git`/`.nuvira`.
fn check_rel(rel: &str) -> Result<(), GitError> {
    let bad = rel.is_empty()
        || rel.starts_with('/')
        || Path::new(rel).is_absolute()
        || rel.split('/').any(|c| {
            c == ".."
                || c == "."
                || c.is_empty()
                || c.eq_ignore_ascii_case(".git")
                || c == STATE_DIR
        });
    if bad {
        Err(GitError::OutsideRepository(rel.to_owned()))
    } else {
        Ok(())
    }
}

#[cfg(unix)]
fn is_executable(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt;
    meta.permissions().mode() & 0o111 != 0
}

#[cfg(not(unix))]
fn is_executable(_meta: &std::fs::Metadata) -> bool {
    false
}

/// Parses `Name <email>`.
///
/// # Errors
/// [`GitError::BadAuthor`] when it is not of that shape.
pub fn parse_identity(text: &str) -> Result<Signature<'static>, GitError> {
    let bad = || GitError::BadAuthor(text.to_owned());
    let (name, rest) = text.split_once('<').ok_or_else(bad)?;
    let email = rest.strip_suffix('>').ok_or_else(bad)?;
    let name = name.trim();
    if name.is_empty() || email.is_empty() || email.contains(['<', '>']) {
        return Err(bad());
    }
    Signature::now(name, email.trim()).map_err(|_| bad())
}
