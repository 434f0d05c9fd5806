//! Atomic write of a 4 KiB file through `nuvira_workspace::atomic_write` against the same
//! steps done by hand with `tempfile` (temp file in the directory, write, fsync, rename,
//! directory fsync), in the same run.
//!
//! `nuvira_write_at` is what a batch does since issue 11: `Workspace::write_at`, the same steps
//! relative to a directory handle of the root (each folder of the path opened with
//! `O_NOFOLLOW`, temp file, rename and fsync in that folder's handle). Its baseline is
//! `nuvira_atomic_write`, the path-based write a batch did before. The target is one folder
//! deep (`sub/file.txt`), so the walk opens one folder per write.
//!
//! `nuvira_write_at_locked` adds the repository lock (issue 11): acquire `.nuvira/lock`
//! (`flock`), write, release, per write. A batch takes the lock once for all its files, so this
//! is the worst case, a one-file batch; its baseline is `nuvira_atomic_write` too.
//!
//! Two groups: on the disk (`/tmp` or `$TMPDIR`), where the two fsyncs dominate and a busy
//! machine adds a lot of noise, and on tmpfs (`/dev/shm`, when present), where fsync is nearly
//! free, which isolates what our code adds over the hand-written baseline.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use criterion::{Criterion, criterion_group, criterion_main};
use std::io::Write;
use std::path::Path;

fn group(c: &mut Criterion, name: &str, base: &Path) {
    let root = tempfile::tempdir_in(base).unwrap();
    std::fs::create_dir(root.path().join("sub")).unwrap();
    let dir_path = root.path().join("sub");
    let dir = &dir_path;
    let target = dir.join("file.txt");
    let content = vec![b'x'; 4096];
    std::fs::write(&target, &content).unwrap();
    let ws = nuvira_workspace::Workspace::open(root.path()).unwrap();
    let resolved = ws.resolve_for_write("sub/file.txt").unwrap();
    let mut group = c.benchmark_group(name);
    group.bench_function("baseline_tempfile_rename_fsync", |b| {
        b.iter(|| {
            let mut tmp = tempfile::NamedTempFile::new_in(dir).unwrap();
            tmp.write_all(&content).unwrap();
            tmp.as_file().sync_all().unwrap();
            tmp.persist(&target).unwrap();
            std::fs::File::open(dir).unwrap().sync_all().unwrap();
        });
    });
    group.bench_function("nuvira_atomic_write", |b| {
        b.iter(|| nuvira_workspace::atomic_write(&target, &content, None).unwrap());
    });
    group.bench_function("nuvira_write_at", |b| {
        b.iter(|| ws.write_at(&resolved, &content, None).unwrap());
    });
    group.bench_function("nuvira_write_at_locked", |b| {
        b.iter(|| {
            let lock = nuvira_workspace::RepoLock::acquire(
                &ws,
                "bench",
                nuvira_workspace::LockWait::Fail,
                |_| {},
            )
            .unwrap();
            ws.write_at(&resolved, &content, None).unwrap();
            drop(lock);
        });
    });
    group.finish();
}

fn bench(c: &mut Criterion) {
    group(c, "atomic_write_4k_disk", &std::env::temp_dir());
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        group(c, "atomic_write_4k_tmpfs", shm);
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
