"""Regenerates tests/scenarios/ from real fixture files.

Expected trees are computed here with plain string operations on the inputs (an oracle
independent of the Rust code under test). Run: python3 strategies/edit/tests/gen_scenarios.py
"""
import os, shutil, json, subprocess, tempfile
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "scenarios")
FIX = os.path.join(HERE, "..", "..", "..", "modules", "syntax", "tests", "fixtures")
shutil.rmtree(ROOT, ignore_errors=True)
os.makedirs(ROOT)
def fx(n): return open(os.path.join(FIX, n)).read()

def yq(s):
    # YAML literal block scalar with explicit indentation indicator, keeps text exactly.
    if "\n" not in s:
        return json.dumps(s)
    keep = "+" if s.endswith("\n\n") else ("" if s.endswith("\n") else "-")
    body = "".join("    " + l if l else "" for l in s.splitlines(True))
    if not body.endswith("\n"): body += "\n"
    return "|2" + keep + "\n" + body

def scenario(name, inp, edits, expected=None, error=None):
    d = os.path.join(ROOT, name)
    for base, files in (("input", inp), ("expected", expected)):
        if files is None: continue
        os.makedirs(os.path.join(d, base), exist_ok=True)
        for p, c in files.items():
            fp = os.path.join(d, base, p)
            os.makedirs(os.path.dirname(fp), exist_ok=True)
            open(fp, "w").write(c)
        if not files:
            open(os.path.join(d, base, ".gitkeep"), "w").write("")
    lines = ["edits:"]
    for e in edits:
        first = True
        for k, v in e.items():
            prefix = "  - " if first else "    "
            first = False
            if isinstance(v, bool):
                lines.append(f"{prefix}{k}: {'true' if v else 'false'}")
            elif "\n" in v:
                lines.append(f"{prefix}{k}: " + yq(v).replace("\n    ", "\n      ").rstrip("\n").replace("|2", "|2", 1))
            else:
                lines.append(f"{prefix}{k}: {json.dumps(v)}")
    open(os.path.join(d, "request.yaml"), "w").write("\n".join(lines) + "\n")
    if error:
        open(os.path.join(d, "expected_error.txt"), "w").write("\n".join(error) + "\n")

chan = fx("rust_tokio_mpsc_chan.rs")
query = fx("ts_query_core_query.ts")
hyd = fx("tsx_react_query_HydrationBoundary.tsx")
de = fx("rust_serde_json_de.rs")

# ---- search-replace
old = "        self.inner.semaphore.close();\n        self.inner.notify_rx_closed.notify_waiters();\n"
new = "        self.inner.semaphore.close();\n        // Wake every task waiting for the channel to close.\n        self.inner.notify_rx_closed.notify_waiters();\n"
assert chan.count(old) == 1
scenario("001_search_replace_once", {"src/chan.rs": chan},
    [{"strategy": "search-replace", "path": "src/chan.rs", "search": old, "replace": new}],
    {"src/chan.rs": chan.replace(old, new)})
assert chan.count("rx_fields_ptr") > 2
scenario("002_search_replace_all", {"src/chan.rs": chan},
    [{"strategy": "search-replace", "path": "src/chan.rs", "search": "rx_fields_ptr", "replace": "fields_ptr", "all": True}],
    {"src/chan.rs": chan.replace("rx_fields_ptr", "fields_ptr")})
bad = old.replace("        ", "    ")  # indentation differs
line = chan[:chan.index(old)].count("\n") + 1
scenario("003_search_replace_near_miss_whitespace", {"src/chan.rs": chan},
    [{"strategy": "search-replace", "path": "src/chan.rs", "search": bad, "replace": new}],
    error=["src/chan.rs:%d:" % line, "was not found", "line %d differs only in whitespace/indentation" % line,
           "closest match:         self.inner.semaphore.close();"])
lines = [i + 1 for i, l in enumerate(chan.splitlines()) if "self.inner.semaphore.is_closed()" in l]
assert len(lines) == 3, lines
scenario("004_search_replace_ambiguous", {"src/chan.rs": chan},
    [{"strategy": "search-replace", "path": "src/chan.rs", "search": "self.inner.semaphore.is_closed()", "replace": "self.closed()"}],
    error=["src/chan.rs:%d:" % lines[0], "occurs 3 times (lines %d, %d, %d)" % tuple(lines), "set `all: true`"])
scenario("005_search_replace_missing_file", {"src/chan.rs": chan},
    [{"strategy": "search-replace", "path": "src/chen.rs", "search": "a", "replace": "b"}],
    error=["src/chen.rs:", "the file does not exist"])
near = "    isStale(): bool {\n"
scenario("006_search_replace_near_miss_text", {"src/query.ts": query},
    [{"strategy": "search-replace", "path": "src/query.ts", "search": near, "replace": "x"}],
    error=["src/query.ts:%d:" % (query[:query.index("  isStale(): boolean {")].count("\n") + 1), "is the most similar text", "closest match:   isStale(): boolean {"])

# ---- unified-diff
q_lines = query.splitlines(True)
i = query[:query.index("  isStale(): boolean {")].count("\n")  # 0-based
ctx_before = q_lines[i:i+3]
removed = q_lines[i+3]
added = "    // observers know best: their result accounts for `enabled`\n"
assert removed.startswith("    if (this.getObserversCount() > 0) {")
hunk = "@@ -%d,7 +%d,8 @@ export class Query<\n" % (i + 1, i + 1)
body = "".join(" " + l for l in ctx_before) + " " + removed + "+" + added.replace("observers", "Observers") [0:0]
body = "".join(" " + l for l in ctx_before) + "+" + added + "".join(" " + l for l in q_lines[i+3:i+7])
patch = "--- a/src/query.ts\n+++ b/src/query.ts\n" + hunk + body
exp = "".join(q_lines[:i+3]) + added + "".join(q_lines[i+3:])
scenario("010_unified_diff_single_file", {"src/query.ts": query},
    [{"strategy": "unified-diff", "path": "src/query.ts", "patch": patch}], {"src/query.ts": exp})
# offset: header line numbers wrong by 40, no a/ b/ prefixes, no path field
patch_off = "--- src/query.ts\n+++ src/query.ts\n" + hunk.replace("-%d,7 +%d,8" % (i+1, i+1), "-%d,7 +%d,8" % (i-39, i-39)) + body
scenario("011_unified_diff_offset_applies_exactly", {"src/query.ts": query},
    [{"strategy": "unified-diff", "patch": patch_off}], {"src/query.ts": exp})
# multi-file git patch: modify chan.rs, create new file, delete old file
c_lines = chan.splitlines(True)
j = chan[:chan.index("    pub(crate) fn close(&mut self) {")].count("\n")
git = ("diff --git a/src/chan.rs b/src/chan.rs\nindex 1111111..2222222 100644\n--- a/src/chan.rs\n+++ b/src/chan.rs\n"
       "@@ -%d,3 +%d,4 @@\n" % (j + 1, j + 1) +
       " " + c_lines[j] + "+        // Closing twice is a no-op.\n" + " " + c_lines[j+1] + " " + c_lines[j+2] +
       "diff --git a/NOTES.md b/NOTES.md\nnew file mode 100644\nindex 0000000..3333333\n--- /dev/null\n+++ b/NOTES.md\n@@ -0,0 +1,2 @@\n+# Notes\n+The channel closes once.\n"
       "diff --git a/old.txt b/old.txt\ndeleted file mode 100644\nindex 4444444..0000000\n--- a/old.txt\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-obsolete\n-file\n")
exp_chan = "".join(c_lines[:j+1]) + "        // Closing twice is a no-op.\n" + "".join(c_lines[j+1:])
scenario("012_unified_diff_multi_file_git", {"src/chan.rs": chan, "old.txt": "obsolete\nfile\n"},
    [{"strategy": "unified-diff", "patch": git}], {"src/chan.rs": exp_chan, "NOTES.md": "# Notes\nThe channel closes once.\n"})
# context mismatch
bad_patch = patch.replace(" " + ctx_before[1], " " + ctx_before[1].replace("check observers first", "check observers later"))
scenario("013_unified_diff_context_mismatch", {"src/query.ts": query},
    [{"strategy": "unified-diff", "patch": bad_patch}],
    error=["src/query.ts:%d:" % (i + 2), "apply hunk `@@ -%d,7 +%d,8 @@ export class Query<`" % (i+1, i+1), "no fuzz", "check observers later", "regenerate the patch"])
scenario("014_unified_diff_create_existing", {"NOTES.md": "x\n"},
    [{"strategy": "unified-diff", "patch": "--- /dev/null\n+++ b/NOTES.md\n@@ -0,0 +1 @@\n+y\n"}],
    error=["NOTES.md:", "already exists"])
scenario("015_unified_diff_no_newline_at_eof", {"a.txt": "one\ntwo"},
    [{"strategy": "unified-diff", "path": "a.txt", "patch": "@@ -1,2 +1,2 @@\n one\n-two\n\\ No newline at end of file\n+three\n"}],
    {"a.txt": "one\nthree\n"})
scenario("016_unified_diff_delete_with_leftover", {"old.txt": "a\nb\nc\n"},
    [{"strategy": "unified-diff", "patch": "--- a/old.txt\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-a\n-b\n"}],
    error=["old.txt:", "does not remove all of its lines"])

# ---- regex
src = "fn area(w: u32, h: u32) -> u32 {\n    w * h\n}\n\nfn main() {\n    let a = area(3, 4);\n    let b = area(5, 6);\n    println!(\"{a} {b}\");\n}\n"
scenario("020_regex_captures_all", {"src/main.rs": src},
    [{"strategy": "regex", "path": "src/main.rs", "pattern": r"area\((?P<w>\d+), (\d+)\)", "replace": "area(${2}, $w)", "all": True}],
    {"src/main.rs": src.replace("area(3, 4)", "area(4, 3)").replace("area(5, 6)", "area(6, 5)")})
scenario("021_regex_once_multiline_anchor", {"src/main.rs": src},
    [{"strategy": "regex", "path": "src/main.rs", "pattern": r"^fn main\(\) \{$", "replace": "pub fn main() {"}],
    {"src/main.rs": src.replace("fn main() {", "pub fn main() {")})
scenario("022_regex_no_match", {"src/main.rs": src},
    [{"strategy": "regex", "path": "src/main.rs", "pattern": r"volume\(", "replace": "x"}],
    error=["src/main.rs:", "matches nothing"])
scenario("023_regex_multiple_without_all", {"src/main.rs": src},
    [{"strategy": "regex", "path": "src/main.rs", "pattern": r"area\(\d", "replace": "x"}],
    error=["src/main.rs:6:", "matches 2 times (lines 6, 7)", "`all: true`"])
scenario("024_regex_unknown_group", {"src/main.rs": src},
    [{"strategy": "regex", "path": "src/main.rs", "pattern": r"area\((\d+)", "replace": "area($2", "all": True}],
    error=["src/main.rs:", "refers to `$2` but the pattern has 1 group(s)"])
scenario("025_regex_invalid_pattern", {"src/main.rs": src},
    [{"strategy": "regex", "path": "src/main.rs", "pattern": r"area\((\d+", "replace": "x"}],
    error=["src/main.rs:", "compile `pattern`", "unclosed group"])

# ---- whole-file / delete / rename
scenario("030_whole_file_create_nested", {"README.md": "hi\n"},
    [{"strategy": "whole-file", "path": "src/deep/new.rs", "content": "pub fn new() {}\n"}],
    {"README.md": "hi\n", "src/deep/new.rs": "pub fn new() {}\n"})
scenario("031_whole_file_replace", {"src/lib.rs": chan},
    [{"strategy": "whole-file", "path": "src/lib.rs", "content": "//! Empty.\n"}],
    {"src/lib.rs": "//! Empty.\n"})
scenario("032_whole_file_missing_content", {"a.txt": "x\n"},
    [{"strategy": "whole-file", "path": "a.txt"}],
    error=["a.txt:", "`whole-file` edit needs a `content` field"])
scenario("033_delete_file", {"a.txt": "x\n", "b.txt": "y\n"},
    [{"strategy": "delete-file", "path": "a.txt"}], {"b.txt": "y\n"})
scenario("034_delete_file_missing", {"a.txt": "x\n"},
    [{"strategy": "delete-file", "path": "c.txt"}], error=["c.txt:", "the file does not exist"])
scenario("035_rename_file", {"src/old.rs": chan},
    [{"strategy": "rename-file", "path": "src/old.rs", "to": "src/chan.rs"}], {"src/chan.rs": chan})
scenario("036_rename_file_target_exists", {"a.txt": "x\n", "b.txt": "y\n"},
    [{"strategy": "rename-file", "path": "a.txt", "to": "b.txt"}], error=["b.txt:", "the target already exists"])
scenario("037_unknown_strategy", {"a.txt": "x\n"},
    [{"strategy": "sed", "path": "a.txt"}], error=["unknown strategy `sed`"])

# ---- ast-replace
close_start = chan.index("    pub(crate) fn close(&mut self) {")
close_end = chan.index("    pub(crate) fn is_closed(&self) -> bool {\n        // There two")
old_close = chan[close_start:close_end].rstrip("\n")
new_close_col0 = "pub(crate) fn close(&mut self) {\n    self.inner.close_rx();\n}\n"
new_close = "    pub(crate) fn close(&mut self) {\n        self.inner.close_rx();\n    }"
scenario("040_ast_replace_rust_method", {"src/chan.rs": chan},
    [{"strategy": "ast-replace", "path": "src/chan.rs", "symbol": "Rx::close", "content": new_close_col0}],
    {"src/chan.rs": chan.replace(old_close, new_close, 1)})
# struct + free fn with doc comment in serde_json de.rs
assert de.count("pub fn from_str<'a, T>(s: &'a str) -> Result<T>") == 1
fs = de.index("pub fn from_str<'a, T>(s: &'a str) -> Result<T>")
doc_start = de.rindex("\n\n", 0, fs) + 2  # doc comment + attrs start after blank line
fe = de.index("\n}\n", fs) + 2
new_fn = "/// Parses a string.\n#[inline]\npub fn from_str<'a, T>(s: &'a str) -> Result<T>\nwhere\n    T: de::Deserialize<'a>,\n{\n    from_trait(read::StrRead::new(s))\n}"
scenario("041_ast_replace_rust_fn_with_docs", {"src/de.rs": de},
    [{"strategy": "ast-replace", "path": "src/de.rs", "symbol": "from_str", "content": new_fn + "\n"}],
    {"src/de.rs": de[:doc_start] + new_fn + de[fe:]})
amb = "struct A;\n\n#[cfg(unix)]\nimpl A {\n    fn new() -> A { A }\n}\n\n#[cfg(windows)]\nimpl A {\n    fn new() -> A { A }\n}\n"
scenario("042_ast_replace_ambiguous", {"src/a.rs": amb},
    [{"strategy": "ast-replace", "path": "src/a.rs", "symbol": "A::new", "content": "fn new() -> A { A }"}],
    error=["src/a.rs:5:", "`A::new` is ambiguous, it matches 2", "method `A::new` at line 5", "method `A::new` at line 10"])
scenario("043_ast_replace_not_found_lists_symbols", {"src/a.rs": amb},
    [{"strategy": "ast-replace", "path": "src/a.rs", "symbol": "new", "content": "fn new() {}"}],
    error=["src/a.rs:", "symbol `new` not found", "available symbols: A, A::new"])
# TS class method
ms = query.index("  isStale(): boolean {")
me = query.index("\n  }\n", ms) + 4
new_method = "isStale(): boolean {\n  return this.isStaleByTime(0)\n}\n"
scenario("044_ast_replace_ts_class_method", {"src/query.ts": query},
    [{"strategy": "ast-replace", "path": "src/query.ts", "symbol": "Query.isStale", "content": new_method}],
    {"src/query.ts": query[:ms] + "  isStale(): boolean {\n    return this.isStaleByTime(0)\n  }" + query[me:]})
# TS exported interface, content with export
is_ = query.index("export interface FetchMeta {")
ie = query.index("\n}\n", is_) + 2
new_iface = "export interface FetchMeta {\n  fetchMore?: { direction: 'forward' | 'backward' }\n  reason?: string\n}"
scenario("045_ast_replace_ts_exported_interface", {"src/query.ts": query},
    [{"strategy": "ast-replace", "path": "src/query.ts", "symbol": "FetchMeta", "content": new_iface}],
    {"src/query.ts": query[:is_] + new_iface + query[ie:]})
# TSX function component
hs = hyd.index("export const HydrationBoundary = ")
he = hyd.index("\n}\n", hs) + 2
new_comp = "export const HydrationBoundary = ({ children }: HydrationBoundaryProps) => {\n  return <>{children}</>\n}"
scenario("047_ast_replace_tsx_arrow_component", {"src/HydrationBoundary.tsx": hyd},
    [{"strategy": "ast-replace", "path": "src/HydrationBoundary.tsx", "symbol": "HydrationBoundary", "content": new_comp}],
    {"src/HydrationBoundary.tsx": hyd[:hs] + new_comp + hyd[he:]})
scenario("046_ast_replace_unsupported_language", {"notes.md": "# x\n"},
    [{"strategy": "ast-replace", "path": "notes.md", "symbol": "x", "content": "y"}],
    error=["notes.md:", "no grammar for this file type"])
# several entries on one file apply in order
scenario("050_batch_in_order", {"src/main.rs": src},
    [{"strategy": "search-replace", "path": "src/main.rs", "search": "fn area(", "replace": "fn surface("},
     {"strategy": "regex", "path": "src/main.rs", "pattern": r"\barea\(", "replace": "surface(", "all": True},
     {"strategy": "rename-file", "path": "src/main.rs", "to": "src/bin/geo.rs"}],
    {"src/bin/geo.rs": src.replace("area(", "surface(")})
print("ok", len(os.listdir(ROOT)))

# more ast-replace: Rust trait-impl method + struct with its doc comment, two edits in order
ds = chan.index("    fn drop(&mut self) {\n        use super::block::Read::Value;")
de_ = chan.index("\n    }\n}\n", ds) + 6
ss = chan.index("/// Fields only accessed by `Rx` handle.\nstruct RxFields<T> {")
se = chan.index("\n}\n", ss) + 2
new_drop = "    fn drop(&mut self) {\n        self.close();\n    }"
new_struct = "/// Receiver-side fields.\nstruct RxFields<T> {\n    list: list::Rx<T>,\n    rx_closed: bool,\n}"
exp = chan[:ss] + new_struct + chan[se:ds] + new_drop + chan[de_:]
scenario("048_ast_replace_rust_trait_impl_method_and_documented_struct", {"src/chan.rs": chan},
    [{"strategy": "ast-replace", "path": "src/chan.rs", "symbol": "Rx::drop", "content": "fn drop(&mut self) {\n    self.close();\n}\n"},
     {"strategy": "ast-replace", "path": "src/chan.rs", "symbol": "RxFields", "content": new_struct + "\n"}],
    {"src/chan.rs": exp})
py = 'import functools\n\n\nclass Cache:\n    """A cache."""\n\n    @functools.lru_cache\n    def get(self, key):\n        return key\n\n    def put(self, key, value):\n        pass\n'
scenario("049_ast_replace_python_decorated_method", {"cache.py": py},
    [{"strategy": "ast-replace", "path": "cache.py", "symbol": "Cache.get", "content": "@functools.cache\ndef get(self, key):\n    return key * 2\n"}],
    {"cache.py": py.replace("    @functools.lru_cache\n    def get(self, key):\n        return key\n", "    @functools.cache\n    def get(self, key):\n        return key * 2\n")})
print("ok2", len(os.listdir(ROOT)))

# unified-diff: bare @@ hunks placed by unique context; removed `-- x` lines that read like headers
bare = "--- a/src/main.rs\n+++ b/src/main.rs\n@@\n fn main() {\n-    let a = area(3, 4);\n+    let a = area(4, 3);\n"
scenario("017_unified_diff_bare_hunk_by_unique_context", {"src/main.rs": src},
    [{"strategy": "unified-diff", "patch": bare}], {"src/main.rs": src.replace("area(3, 4)", "area(4, 3)")})
scenario("018_unified_diff_bare_hunk_ambiguous", {"src/main.rs": src},
    [{"strategy": "unified-diff", "patch": "--- a/src/main.rs\n+++ b/src/main.rs\n@@\n }\n+// end\n"}],
    error=["src/main.rs:3:", "has no line numbers and its context matches 2 places (lines 3, 9)"])
sql = "-- schema v1\nCREATE TABLE t (id INT);\n"
sql_patch = "--- a/schema.sql\n+++ b/schema.sql\n@@ -1,2 +1,2 @@\n--- schema v1\n+++ schema v2\n CREATE TABLE t (id INT);\n"
scenario("019_unified_diff_removed_line_reads_like_a_header", {"schema.sql": sql},
    [{"strategy": "unified-diff", "patch": sql_patch}], {"schema.sql": "++ schema v2\nCREATE TABLE t (id INT);\n"})
# TypeScript overloads: the implementation is replaced, the signatures stay
zod = open(os.path.join(FIX, "ts_zod_v3_types.ts")).read()
impl_start = zod.index("function createZodEnum(values: [string, ...string[]], params?: RawCreateParams) {")
impl_end = zod.index("\n}\n", impl_start) + 2
new_impl = "function createZodEnum(values: [string, ...string[]], params?: RawCreateParams) {\n  return new ZodEnum({ values, typeName: ZodFirstPartyTypeKind.ZodEnum, ...processCreateParams(params) });\n}"
scenario("051_ast_replace_ts_overloaded_function", {"src/types.ts": zod},
    [{"strategy": "ast-replace", "path": "src/types.ts", "symbol": "createZodEnum", "content": new_impl}],
    {"src/types.ts": zod[:impl_start] + new_impl + zod[impl_end:]})

# Real `diff -u` and `git diff` output (several hunks, several files), applied exactly.
def real_patch(tool, pairs):
    with tempfile.TemporaryDirectory() as t:
        for rel, (a, b) in pairs.items():
            for side, text in (("a", a), ("b", b)):
                if text is None: continue
                fp = os.path.join(t, side, rel)
                os.makedirs(os.path.dirname(fp), exist_ok=True)
                open(fp, "w").write(text)
                os.utime(fp, (1767225600, 1767225600))  # stable `diff -u` timestamps
        os.makedirs(os.path.join(t, "a"), exist_ok=True); os.makedirs(os.path.join(t, "b"), exist_ok=True)
        # Folders named a/ and b/ give the usual `a/…` `b/…` paths.
        cmd = ["diff", "-ruN", "a", "b"] if tool == "diff" else [
            "git", "diff", "--no-index", "--no-color", "--src-prefix=", "--dst-prefix=", "a", "b"]
        return subprocess.run(cmd, cwd=t, capture_output=True, text=True).stdout
chan2 = chan.replace("    fn new(chan: Arc<Chan<T, S>>) -> Tx<T, S> {", "    fn new(chan: Arc<Chan<T, S>>) -> Tx<T, S> {\n        // One more sender.", 1)
chan2 = chan2.replace("        self.inner.semaphore.close();\n", "", 1)
chan2 = chan2.replace("impl<T, S> Drop for Chan<T, S> {", "// Dropping the channel frees the blocks.\nimpl<T, S> Drop for Chan<T, S> {", 1)
assert chan2 != chan
p1 = real_patch("diff", {"src/chan.rs": (chan, chan2)})
assert p1.count("\n@@ ") >= 3, p1
scenario("008_unified_diff_real_diff_u_three_hunks", {"src/chan.rs": chan},
    [{"strategy": "unified-diff", "path": "src/chan.rs", "patch": p1}], {"src/chan.rs": chan2})
query2 = query.replace("  isStale(): boolean {", "  isStale(): boolean {\n    // stale check", 1)
p2 = real_patch("git", {"src/chan.rs": (chan, chan2), "src/query.ts": (query, query2), "docs/new.md": (None, "# New\nno newline at end"), "old.txt": ("gone\n", None)})
assert "new file mode" in p2 and "deleted file mode" in p2 and "No newline at end of file" in p2, p2
scenario("009_unified_diff_real_git_diff_multi_file", {"src/chan.rs": chan, "src/query.ts": query, "old.txt": "gone\n"},
    [{"strategy": "unified-diff", "patch": p2}],
    {"src/chan.rs": chan2, "src/query.ts": query2, "docs/new.md": "# New\nno newline at end"})

# ---- CRLF files keep their line endings (tests/.gitattributes keeps git from converting them)
crlf = src.replace("\n", "\r\n")
scenario("060_search_replace_crlf_keeps_endings", {"src/main.rs": crlf},
    [{"strategy": "search-replace", "path": "src/main.rs", "search": "let b = area(5, 6);", "replace": "let b = area(5, 6);\n    let c = a + b;"}],
    {"src/main.rs": crlf.replace("let b = area(5, 6);", "let b = area(5, 6);\r\n    let c = a + b;")})
scenario("061_regex_crlf_line_anchors", {"src/main.rs": crlf},
    [{"strategy": "regex", "path": "src/main.rs", "pattern": r"^fn main\(\) \{$", "replace": "pub fn main() {"},
     {"strategy": "regex", "path": "src/main.rs", "pattern": r"^    let a = (.*);$", "replace": "    let a = $1;\n    let z = a;"}],
    {"src/main.rs": crlf.replace("fn main() {", "pub fn main() {").replace("    let a = area(3, 4);", "    let a = area(3, 4);\r\n    let z = a;")})
area = "fn area(w: u32, h: u32) -> u32 {\n    // width times height\n    w * h\n}\n"
scenario("062_ast_replace_crlf_keeps_endings", {"src/main.rs": crlf},
    [{"strategy": "ast-replace", "path": "src/main.rs", "symbol": "area", "content": area}],
    {"src/main.rs": crlf.replace("fn area(w: u32, h: u32) -> u32 {\r\n    w * h\r\n}", area.rstrip("\n").replace("\n", "\r\n"), 1)})
print("ok3", len(os.listdir(ROOT)))
