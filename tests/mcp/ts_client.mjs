// Drives `nuvira mcp` with the official TypeScript SDK client (npm @modelcontextprotocol/sdk).
//
//     NUVIRA_MCP_NPM_DIR=DIR node ts_client.mjs NUVIRA_BIN REPO
//
// DIR/node_modules holds the SDK. Prints one JSON object (what the Rust test checks).
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";
import path from "node:path";

const [nuvira, repo] = process.argv.slice(2);
const require = createRequire(path.join(process.env.NUVIRA_MCP_NPM_DIR, "package.json"));
const load = (spec) => import(pathToFileURL(require.resolve(spec)).href);
const { Client } = await load("@modelcontextprotocol/sdk/client/index.js");
const { StdioClientTransport } = await load("@modelcontextprotocol/sdk/client/stdio.js");

const transport = new StdioClientTransport({
  command: nuvira,
  args: ["mcp", "--repo", repo, "--sandbox", "local"],
  stderr: "inherit",
});
const client = new Client({ name: "nuvira-ts-test", version: "0" });
await client.connect(transport);

const tools = (await client.listTools()).tools.map((t) => t.name).sort();
const edit = { strategy: "search-replace", path: "src/lib.py", search: "return 1", replace: "return 2" };
const preview = await client.callTool({ name: "preview_edits", arguments: { edits: [edit] } });
const applied = await client.callTool({ name: "apply_edits", arguments: { edits: [edit] } });
const tests = await client.callTool({ name: "run_tests", arguments: { framework: "pytest" } });
let malformed = "";
try {
  const r = await client.callTool({ name: "preview_edits", arguments: { edits: 7 } });
  malformed = `no protocol error: ${JSON.stringify(r)}`;
} catch (e) {
  malformed = String(e.message);
}
await client.close();

const fail = (what, r) => {
  if (r.isError) throw new Error(`${what}: ${JSON.stringify(r.content)}`);
  return r.structuredContent;
};
const p = fail("preview_edits", preview);
const a = fail("apply_edits", applied);
const t = fail("run_tests", tests);
console.log(
  JSON.stringify({
    tools,
    preview_valid: p.valid,
    applied: a.applied_count,
    tests_failed: t.failed,
    failure_name: t.failures[0]?.name,
    malformed_error: malformed,
  }),
);
