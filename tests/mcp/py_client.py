"""Drives `nuvira mcp` with the official Python SDK client (PyPI `mcp`).

    python3 py_client.py NUVIRA_BIN REPO SCENARIO [ARGS...]

Scenarios print one JSON object on stdout (what the Rust test checks) and exit 0; an
assertion that fails exits non-zero with the reason on stderr.
"""

import json
import os
import sys

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def structured(result):
    assert not result.is_error, f"tool error: {result.content}"
    assert result.structured_content is not None, f"no structured content: {result}"
    return result.structured_content


def text_of(result):
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


async def scenario(session, name, args):
    if name == "tools":
        tools = (await session.list_tools()).tools
        return {
            "tools": sorted(t.name for t in tools),
            "schemas": {t.name: t.input_schema for t in tools},
            "output_schemas": {t.name: t.output_schema is not None for t in tools},
            "output_schema": {t.name: t.output_schema for t in tools},
        }
    if name == "edit":
        edit = {"strategy": "search-replace", "path": "src/lib.py", "search": "return 1", "replace": "return 2"}
        preview = structured(await session.call_tool("preview_edits", {"edits": [edit]}))
        applied = structured(await session.call_tool("apply_edits", {"edits": [edit]}))
        with open(args[0]) as f:
            after_apply = f.read()
        bad = await session.call_tool(
            "apply_edits",
            {"edits": [{"strategy": "search-replace", "path": "src/lib.py", "search": "absent text", "replace": "x"}]},
        )
        outside = await session.call_tool(
            "apply_edits",
            {"edits": [{"strategy": "create", "path": "../escape.txt", "content": "x"}]},
        )
        rolled = structured(await session.call_tool("rollback", {"transaction_id": applied["transaction_id"]}))
        return {
            "preview_valid": preview["valid"],
            "diff": preview["preview"]["changes"][0]["diff"],
            "transaction_id": applied["transaction_id"],
            "after_apply": after_apply,
            "bad_is_error": bad.is_error,
            "bad_text": text_of(bad),
            "outside_is_error": outside.is_error,
            "outside_text": text_of(outside),
            "rolled_back": rolled,
        }
    if name == "tests":
        r = structured(await session.call_tool("run_tests", {"framework": "pytest", "sandbox": "local"}))
        wider = await session.call_tool("run_tests", {"sandbox": "local", "network": "host"})
        return {"run": r, "wider_is_error": wider.is_error, "wider_text": text_of(wider)}
    if name == "refuse-local":
        r = await session.call_tool("run_tests", {"sandbox": "local"})
        return {"is_error": r.is_error, "text": text_of(r)}
    if name == "cancel":
        # Starts a run whose edit lands before a long command, cancels once the edit is
        # written (a progress notification says so), then closes the session; the server
        # rolls back before it exits.
        written = anyio.Event()
        messages = []

        async def on_progress(progress, total, message):
            messages.append(message)
            if message and "wrote its edits" in message:
                written.set()

        async with anyio.create_task_group() as tg:
            async def call():
                await session.call_tool(
                    "run_plan", {"plan": args[0]}, progress_callback=on_progress
                )

            tg.start_soon(call)
            with anyio.fail_after(60):
                await written.wait()
            tg.cancel_scope.cancel()
        return {"progress": messages}
    if name == "plan":
        v = structured(await session.call_tool("validate_plan", {"plan": args[0]}))
        g = structured(await session.call_tool("graph", {"plan": args[0], "format": "json"}))
        bad = structured(await session.call_tool("validate_plan", {"plan_text": "steps:\n  - id: a\n    module: nope\n"}))
        out = await session.call_tool("validate_plan", {"plan": "../outside.yaml"})
        return {"validate": v, "graph": g, "bad": bad, "outside_is_error": out.is_error, "outside_text": text_of(out)}
    if name == "resources":
        listed = [str(r.uri) for r in (await session.list_resources()).resources]
        runs = [u for u in listed if u.startswith("nuvira://runs/")]
        reports = {}
        for uri in runs:
            contents = (await session.read_resource(uri)).contents
            reports[uri] = json.loads(contents[0].text)
        refused = {}
        for uri in ["nuvira://runs/../../etc/passwd", "nuvira://runs/run-1%2F..%2F..", "nuvira://runs/run-nope", "nuvira://elsewhere/x"]:
            try:
                await session.read_resource(uri)
                refused[uri] = None
            except Exception as e:  # McpError: the server's resource-not-found error
                refused[uri] = str(e)
        return {"listed": listed, "runs": runs, "reports": reports, "refused": refused}
    raise SystemExit(f"unknown scenario {name}")


async def over_http(nuvira, repo):
    """`nuvira mcp --http 127.0.0.1:0`: the address comes on stderr; list the tools and
    preview an edit over streamable HTTP."""
    import subprocess

    from mcp.client.streamable_http import streamable_http_client

    proc = subprocess.Popen(
        [nuvira, "mcp", "--repo", repo, "--sandbox", "local", "--http", "127.0.0.1:0"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stderr.readline()
        url = line.strip().rsplit(" ", 1)[-1]
        assert url.startswith("http://127.0.0.1:"), line
        async with streamable_http_client(url) as (read, write, *_):
            async with ClientSession(read, write) as session:
                await session.initialize()
                tools = sorted(t.name for t in (await session.list_tools()).tools)
                edit = {"strategy": "search-replace", "path": "src/lib.py", "search": "return 1", "replace": "return 9"}
                preview = structured(await session.call_tool("preview_edits", {"edits": [edit]}))
        return {"url": url, "tools": tools, "preview_valid": preview["valid"]}
    finally:
        proc.terminate()
        proc.wait()


async def main():
    nuvira, repo, name, *args = sys.argv[1:]
    if name == "http":
        print(json.dumps(await over_http(nuvira, repo)))
        return
    extra = []
    if name == "refuse-local":
        extra = ["--sandbox", "docker"]
    else:
        extra = ["--sandbox", "local"]
    params = StdioServerParameters(command=nuvira, args=["mcp", "--repo", repo, *extra], env=dict(os.environ))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            out = await scenario(session, name, args)
    print(json.dumps(out))


anyio.run(main)
