#!/usr/bin/env python3
"""Checks the workspace's dependency rules (DESIGN.md, "Dependency rule"). Python 3.11+ stdlib.

    scripts/check-deps.py              # run cargo metadata / cargo tree here and check
    scripts/check-deps.py --self-test  # prove that each rule catches a violation

Rules:
  1. nuvira-api (the contract) depends on serde, serde_json, thiserror and async-trait only,
     and on no other workspace crate.
  2. A crate under modules/ or strategies/ never depends on the root crate `nuvira` nor on
     `nuvira-engine`; a third-party module must be writable against nuvira-api alone.
  3. Crates under modules/ and strategies/ depend on one another only along the edges in ALLOWED
     below (each with its reason). Any crate may dev-depend on nuvira-test-support.
  4. The bare facade (`cargo tree -p nuvira --no-default-features -e normal,build`) holds no
     tree-sitter, bollard, reqwest or git2 (libgit2): `default-features = false` must stay cheap to
     build.
  5. Every entry of [workspace.dependencies] is used by some member (cargo-machete checks the
     members' own lists, not this one).

Rules 1-3 read the dependencies each manifest declares (optional ones and every kind included),
so a violation behind a feature is caught too. Exit status: 0 all rules hold, 1 a rule is
broken (each violation on its own line), 2 the input could not be read.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

API = "nuvira-api"
ROOT = "nuvira"
ENGINE = "nuvira-engine"
TEST_SUPPORT = "nuvira-test-support"
API_ALLOWED = {"serde", "serde_json", "thiserror", "async-trait"}
# Optional dependencies of nuvira-api, off by default, so the contract a module author builds
# against still has the four above: `schemars` derives the JSON Schemas (`nuvira schema`).
API_OPTIONAL = {"schemars"}
FACADE_FORBIDDEN = ("tree-sitter", "bollard", "reqwest", "git2", "libgit2-sys")

# (from, to, kind): why. kind is "normal", "dev" or "build"; an optional dependency is "normal".
# Edges to nuvira-api, and dev edges to nuvira-test-support, need no line here.
ALLOWED = {
    ("nuvira-edit", "nuvira-workspace", "normal"):
        "edits are applied through the safe file layer: confinement, atomic writes, journal",
    ("nuvira-edit", "nuvira-secrets", "normal"):
        "a batch that adds a credential warns or is refused, with the one scanner",
    ("nuvira-edit", "nuvira-syntax", "normal"):
        "`standard` wires the tree-sitter checker (optional, behind that feature)",
    ("nuvira-edit", "nuvira-syntax", "dev"):
        "the tests check edits with every grammar",
    ("nuvira-edit", "nuvira-edit-strategies", "normal"):
        "`standard` wires the built-in strategies (optional, behind that feature)",
    ("nuvira-edit-strategies", "nuvira-syntax", "normal"):
        "ast-replace finds symbols with the tree-sitter grammars",
    ("nuvira-plan", "nuvira-llm", "normal"):
        "LlmPlanner guards its prompt with nuvira-llm (optional, behind the `llm` feature)",
    ("nuvira-recover", "nuvira-llm", "normal"):
        "a repair prompt is fitted to a token budget and guarded with nuvira-llm's context and guard",
    ("nuvira-recover", "nuvira-edit", "normal"):
        "a model's fix is parsed and applied by the edit module's Editor, validated like any edit",
    ("nuvira-recover", "nuvira-repair-strategies", "normal"):
        "the recover stage runs the built-in repair strategies",
    ("nuvira-repair-strategies", "nuvira-secrets", "normal"):
        "a failure's text is redacted before a strategy rephrases it for a model",
    ("nuvira-report", "nuvira-secrets", "normal"):
        "every finding of the one scanner is masked in every rendered report",
    ("nuvira-runner", "nuvira-sandbox", "normal"):
        "test and execute steps run their command in a sandbox",
    ("nuvira-verify", "nuvira-secrets", "normal"):
        "the `security` check scans a diff with the one scanner",
    ("nuvira-verify", "nuvira-syntax", "normal"):
        "the syntax check uses the tree-sitter checker (optional, behind `tree-sitter`)",
    ("nuvira-verify", "nuvira-runner", "dev"):
        "the tests feed checks the results of real runner output",
    ("nuvira-verify", "nuvira-sandbox", "normal"):
        "lint commands run in a sandbox (the run's, else a local copy), never in the repository",
    # These four come with the branches i10-llm, i10-syntax and i10-workspace of issue 10.
    ("nuvira-recover", "nuvira-secrets", "normal"):
        "error text is redacted before it goes into a prompt",
    ("nuvira-inspect", "nuvira-syntax", "normal"):
        "symbol outlines and the language table live in nuvira-syntax",
    ("nuvira-inspect", "nuvira-workspace", "normal"):
        "inspection walks the user's files with the one walker",
    ("nuvira-sandbox", "nuvira-workspace", "normal"):
        "a sandbox copies the files the one walker yields",
    # nuvira-mcp (issue 15): the MCP server's tools call the library code the CLI calls.
    ("nuvira-mcp", "nuvira-edit", "normal"):
        "preview_edits and apply_edits run the edit module's Editor, as `nuvira apply` does",
    ("nuvira-mcp", "nuvira-workspace", "normal"):
        "apply_edits holds the repository lock; rollback undoes journal transactions",
    ("nuvira-mcp", "nuvira-runner", "normal"):
        "run_tests runs the test module; the sandbox policy checks configs with its parser",
    ("nuvira-mcp", "nuvira-sandbox", "normal"):
        "run_tests removes stale sandboxes before it runs, as `nuvira test` does",
    ("nuvira-mcp", "nuvira-inspect", "normal"):
        "the inspect tool is `nuvira inspect`",
    ("nuvira-mcp", "nuvira-report", "normal"):
        "the report tool and the report resources render event files",
}


class InputError(Exception):
    """The metadata, the tree or the manifest could not be read."""


def run(cmd: list[str], cwd: Path) -> str:
    try:
        out = subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, text=True)
    except FileNotFoundError as e:
        raise InputError(f"cannot run {cmd[0]}: {e}") from e
    except subprocess.CalledProcessError as e:
        raise InputError(f"`{' '.join(cmd)}` failed:\n{e.stderr.strip()}") from e
    return out.stdout


def kind_of(dep: dict) -> str:
    return dep.get("kind") or "normal"


def crate_rules(meta: dict) -> list[str]:
    """Rules 1-3 on the declared dependencies of every workspace member."""
    root = Path(meta["workspace_root"])
    members = set(meta["workspace_members"])
    packages = [p for p in meta["packages"] if p["id"] in members]
    internal = {p["name"] for p in packages}
    problems = []
    for pkg in sorted(packages, key=lambda p: p["name"]):
        name = pkg["name"]
        folder = Path(pkg["manifest_path"]).parent.relative_to(root).parts
        is_module = bool(folder) and folder[0] in ("modules", "strategies")
        for dep in pkg["dependencies"]:
            to, kind = dep["name"], kind_of(dep)
            edge = f"{name} -> {to} ({kind})"
            if to == TEST_SUPPORT and kind == "dev":
                continue
            if name == API:
                if to in internal:
                    problems.append(f"{edge}: nuvira-api depends on no other workspace crate")
                elif (
                    kind != "dev"
                    and to not in API_ALLOWED
                    and not (dep.get("optional") and to in API_OPTIONAL)
                ):
                    allowed = ", ".join(sorted(API_ALLOWED))
                    problems.append(f"{edge}: nuvira-api depends only on {allowed}")
                continue
            if not is_module or to not in internal or to == API:
                continue
            if to == ROOT:
                problems.append(
                    f"{edge}: a crate under modules/ or strategies/ never depends on the root crate "
                    "nuvira (DESIGN.md, \"Dependency rule\"); depend on nuvira-api instead"
                )
            elif to == ENGINE:
                problems.append(
                    f"{edge}: a crate under modules/ or strategies/ never depends on nuvira-engine: "
                    "the engine runs modules and they see it only through nuvira-api's traits"
                )
            elif (name, to, kind) not in ALLOWED:
                problems.append(
                    f"{edge}: not in scripts/check-deps.py's ALLOWED; remove the dependency, "
                    "or add the edge there with one line saying why it is needed"
                )
    return problems


def stale_allowed(meta: dict) -> list[str]:
    """ALLOWED entries no manifest declares (reported, not an error)."""
    declared = {
        (p["name"], d["name"], kind_of(d))
        for p in meta["packages"]
        if p["id"] in set(meta["workspace_members"])
        for d in p["dependencies"]
    }
    return [f"{a} -> {b} ({k})" for (a, b, k) in sorted(ALLOWED) if (a, b, k) not in declared]


def facade_rule(tree: str) -> list[str]:
    """Rule 4 on `cargo tree --prefix depth --format {p}` of the bare facade: the first path to
    each forbidden family of crates."""
    problems, path, seen = [], [], set()
    for line in tree.splitlines():
        digits = len(line) - len(line.lstrip("0123456789"))
        if digits == 0:
            continue
        depth, crate = int(line[:digits]), line[digits:].split(" ")[0]
        del path[depth:]
        path.append(crate)
        family = next((f for f in FACADE_FORBIDDEN if crate.startswith(f)), None)
        if family and family not in seen:
            seen.add(family)
            problems.append(
                f"the bare facade (nuvira with --no-default-features) pulls in {crate}: "
                f"{' -> '.join(path)}; put the dependency behind a feature"
            )
    return problems


def workspace_deps_rule(manifest: str, meta: dict) -> list[str]:
    """Rule 5: every [workspace.dependencies] entry is used by some member."""
    import tomllib

    try:
        table = tomllib.loads(manifest).get("workspace", {}).get("dependencies", {})
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"the root Cargo.toml is not valid TOML: {e}") from e
    members = set(meta["workspace_members"])
    deps = [d for p in meta["packages"] if p["id"] in members for d in p["dependencies"]]
    # A member's key is its `rename` when it differs from the package name.
    keys = {d.get("rename") or d["name"] for d in deps}
    names = {d["name"] for d in deps}

    def used(key: str, spec: object) -> bool:
        package = spec.get("package", key) if isinstance(spec, dict) else key
        return key in keys or package in names

    return [
        f"[workspace.dependencies] lists {key}, which no member uses; remove it from the root "
        "Cargo.toml"
        for key, spec in table.items()
        if not used(key, spec)
    ]


def check(meta: dict, tree: str, manifest: str) -> list[str]:
    return crate_rules(meta) + facade_rule(tree) + workspace_deps_rule(manifest, meta)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--self-test", action="store_true", help="check that each rule catches a violation")
    ap.add_argument("--metadata", type=Path, help="`cargo metadata --format-version 1` output to read")
    ap.add_argument("--tree", type=Path, help="the bare facade's `cargo tree` output to read")
    ap.add_argument("--manifest", type=Path, help="the root Cargo.toml to read")
    args = ap.parse_args(argv)
    if args.self_test:
        return self_test()
    here = Path(__file__).resolve().parent.parent
    try:
        meta = json.loads(
            args.metadata.read_text()
            if args.metadata
            else run(["cargo", "metadata", "--format-version", "1", "--no-deps"], here)
        )
        tree = (
            args.tree.read_text()
            if args.tree
            else run(
                ["cargo", "tree", "-p", ROOT, "--no-default-features", "-e", "normal,build",
                 "--target", "all", "--prefix", "depth", "--format", "{p}"],
                here,
            )
        )
        manifest = (args.manifest or Path(meta["workspace_root"]) / "Cargo.toml").read_text()
        problems = check(meta, tree, manifest)
    except (OSError, json.JSONDecodeError, KeyError, InputError) as e:
        print(f"check-deps: error: cannot read the dependency graph: {e}", file=sys.stderr)
        return 2
    for edge in stale_allowed(meta):
        print(f"check-deps: note: ALLOWED has {edge}, which no manifest declares", file=sys.stderr)
    for p in problems:
        print(f"check-deps: {p}", file=sys.stderr)
    if problems:
        print(f"check-deps: {len(problems)} rule(s) broken (rules: scripts/check-deps.py)", file=sys.stderr)
        return 1
    print("check-deps: the dependency rules hold")
    return 0


# ---- self-test ---------------------------------------------------------------------------------

def fixture() -> tuple[dict, str, str]:
    """A small workspace that keeps every rule."""
    root = "/ws"

    def pkg(name: str, folder: str, deps: list[tuple[str, str | None]]) -> dict:
        return {
            "name": name,
            "id": f"path+file://{root}/{folder}#{name}@0.1.0",
            "manifest_path": f"{root}/{folder}/Cargo.toml".replace("//", "/"),
            "dependencies": [{"name": n, "kind": k, "optional": False, "rename": None} for n, k in deps],
        }

    packages = [
        pkg("nuvira", "", [("nuvira-api", None), ("nuvira-engine", None), ("nuvira-runner", None),
                           ("tokio", None), ("nuvira-test-support", "dev")]),
        pkg("nuvira-api", "modules/api", [("serde", None), ("serde_json", None), ("thiserror", None),
                                          ("async-trait", None), ("proptest", "dev")]),
        pkg("nuvira-engine", "modules/engine", [("nuvira-api", None), ("tokio", None)]),
        pkg("nuvira-sandbox", "modules/sandbox", [("nuvira-api", None), ("bollard", None)]),
        pkg("nuvira-runner", "modules/runner", [("nuvira-api", None), ("nuvira-sandbox", None),
                                                ("nuvira-test-support", "dev")]),
        pkg("nuvira-test-support", "modules/test-support", [("nuvira-api", None)]),
    ]
    packages.append({"name": "tokio", "id": "registry+tokio@1", "manifest_path": "/reg/tokio/Cargo.toml",
                     "dependencies": [{"name": "nuvira", "kind": None}]})
    meta = {
        "workspace_root": root,
        "workspace_members": [p["id"] for p in packages if p["name"].startswith("nuvira")],
        "packages": packages,
    }
    tree = "0nuvira v0.1.0 (/ws)\n1nuvira-api v0.1.0\n2serde v1\n1nuvira-engine v0.1.0\n2tokio v1\n"
    manifest = ('[workspace]\nmembers = ["modules/*"]\n[workspace.dependencies]\n'
                'serde = "1"\ntokio = { version = "1" }\nbollard = "0.19"\nproptest = "1"\n'
                'serde_json = "1"\nthiserror = "2"\nasync-trait = "0.1"\n'
                'api = { package = "nuvira-api", path = "modules/api" }\n')
    return meta, tree, manifest


def self_test() -> int:
    """Runs this script on the fixture and on one violation of each rule, as CI runs it."""
    def find(meta: dict, name: str) -> dict:
        return next(p for p in meta["packages"] if p["name"] == name)

    def add_dep(name: str, to: str, kind: str | None = None):
        return lambda m, t, s: (find(m, name)["dependencies"].append({"name": to, "kind": kind}), m, t, s)[1:]

    cases = [
        ("the fixture", lambda m, t, s: (m, t, s), 0, "the dependency rules hold"),
        ("nuvira-api -> tokio", add_dep("nuvira-api", "tokio"), 1,
         "nuvira-api -> tokio (normal): nuvira-api depends only on"),
        ("nuvira-api -> nuvira-engine (dev)", add_dep("nuvira-api", "nuvira-engine", "dev"), 1,
         "nuvira-api -> nuvira-engine (dev): nuvira-api depends on no other workspace crate"),
        ("module -> nuvira", add_dep("nuvira-sandbox", "nuvira", "dev"), 1,
         "nuvira-sandbox -> nuvira (dev): a crate under modules/ or strategies/ never depends on the root"),
        ("module -> nuvira-engine", add_dep("nuvira-runner", "nuvira-engine"), 1,
         "nuvira-runner -> nuvira-engine (normal): a crate under modules/ or strategies/ never depends on nuvira-engine:"),
        ("module -> module not allowed", add_dep("nuvira-sandbox", "nuvira-runner"), 1,
         "nuvira-sandbox -> nuvira-runner (normal): not in scripts/check-deps.py's ALLOWED"),
        ("an allowed edge with another kind", add_dep("nuvira-runner", "nuvira-sandbox", "build"), 1,
         "nuvira-runner -> nuvira-sandbox (build): not in"),
        ("test-support as a normal dependency", add_dep("nuvira-runner", "nuvira-test-support"), 1,
         "nuvira-runner -> nuvira-test-support (normal): not in"),
        ("bollard in the bare facade",
         lambda m, t, s: (m, t + "1nuvira-sandbox v0.1.0\n2bollard v0.19.4\n3bollard-stubs v1\n", s), 1,
         "pulls in bollard: nuvira -> nuvira-sandbox -> bollard;"),
        ("tree-sitter in the bare facade",
         lambda m, t, s: (m, t + "2tree-sitter-rust v0.24.2\n", s), 1,
         "pulls in tree-sitter-rust: nuvira -> nuvira-engine -> tree-sitter-rust;"),
        ("libgit2 in the bare facade",
         lambda m, t, s: (m, t + "1nuvira-git v0.1.0\n2git2 v0.20.4\n3libgit2-sys v0.18.8\n", s), 1,
         "pulls in git2: nuvira -> nuvira-git -> git2;"),
        ("an unused workspace dependency", lambda m, t, s: (m, t, s + 'walkdir = "2"\n'), 1,
         "[workspace.dependencies] lists walkdir, which no member uses"),
    ]
    script = Path(__file__).resolve()
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for title, mutate, want_code, want_text in cases:
            meta, tree, manifest = mutate(*fixture())
            files = {"meta.json": json.dumps(meta), "tree.txt": tree, "Cargo.toml": manifest}
            for name, text in files.items():
                Path(tmp, name).write_text(text)
            out = subprocess.run(
                [sys.executable, str(script), "--metadata", os.path.join(tmp, "meta.json"),
                 "--tree", os.path.join(tmp, "tree.txt"), "--manifest", os.path.join(tmp, "Cargo.toml")],
                capture_output=True, text=True,
            )
            text = out.stdout + out.stderr
            if out.returncode != want_code or want_text not in text:
                failed += 1
                print(f"self-test: FAILED {title}: exit {out.returncode} (want {want_code}), "
                      f"output without {want_text!r}:\n{text}", file=sys.stderr)
    if failed:
        print(f"self-test: {failed} of {len(cases)} cases failed", file=sys.stderr)
        return 1
    print(f"self-test: {len(cases)} cases passed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
