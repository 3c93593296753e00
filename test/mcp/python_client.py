"""Drives Engram's /mcp with the official Python MCP client (the `mcp` package).

Run by test/mcp/python-client.test.ts with the server's URL, an app and two
keys bound to users alice and bob of that app in the environment. It prints
one JSON object of what it observed; the test file holds the expectations.
"""

import asyncio
import json
import os
import sys
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

URL = os.environ["ENGRAM_MCP_URL"]
APP = os.environ["ENGRAM_APP"]
SESSION = os.environ["ENGRAM_SESSION"]


def http_client(key: str | None) -> httpx2.AsyncClient:
    """An HTTP client presenting `key` as a bearer token (none when None)."""
    headers = {} if key is None else {"authorization": f"Bearer {key}"}
    return httpx2.AsyncClient(headers=headers, timeout=60)


def client(http: httpx2.AsyncClient) -> Client:
    """An MCP client over streamable HTTP through `http`."""
    return Client(streamable_http_client(URL, http_client=http))


def text_of(result: Any) -> str:
    return result.content[0].text


async def as_alice(seen: dict[str, Any]) -> None:
    async with http_client(os.environ["ENGRAM_KEY_ALICE"]) as http, client(http) as c:
        seen["tools"] = sorted(t.name for t in (await c.list_tools()).tools)
        created = await c.call_tool("create_session", {"session_id": SESSION, "metadata": {"via": "python"}})
        seen["created"] = created.structured_content
        appended = await c.call_tool(
            "append_events",
            {
                "session_id": SESSION,
                "events": [
                    {"event_type": "user_message", "content": "I only drink oat milk."},
                    {"event_type": "agent_response", "content": "Oat milk it is."},
                ],
            },
        )
        seen["appended_seqs"] = [e["seq"] for e in appended.structured_content["events"]]
        await c.call_tool("update_session", {"session_id": SESSION, "expected_version": 0, "state_delta": {"user:milk": "oat", "temp:x": 1}})
        seen["state"] = (await c.call_tool("get_state", {"session_id": SESSION})).structured_content
        read = await c.call_tool("read_events", {"session_id": SESSION})
        seen["read_contents"] = [e["content"] for e in read.structured_content["events"]]
        context = await c.call_tool("build_context", {"session_id": SESSION, "token_budget": 500})
        seen["context_roles"] = [m["role"] for m in context.structured_content["messages"]]
        remembered = await c.call_tool("remember", {"app_name": APP, "text": "Alice drinks oat milk.", "topics": ["diet"]})
        seen["remembered_user"] = remembered.structured_content["memories"][0].get("user_id")
        recalled = await c.call_tool("recall", {"session_id": SESSION, "query": "milk"})
        seen["recall_text"] = recalled.structured_content["text"]
        found = await c.call_tool("search_memories", {"app_name": APP, "query": "oat"})
        seen["found_texts"] = [r["memory"]["text"] for r in found.structured_content["results"]]
        uri = f"engram://sessions/{SESSION}/transcript"
        transcript = await c.read_resource(uri)
        seen["transcript"] = transcript.contents[0].text
        seen["listed_uris"] = [str(r.uri) for r in (await c.list_resources()).resources]
        bad = {}
        for name, tool, args in [
            ("missing_session_id", "get_session", {}),
            ("limit_not_a_number", "read_events", {"session_id": SESSION, "limit": "ten"}),
            ("bad_event_type", "append_events", {"session_id": SESSION, "events": [{"event_type": "not a type!"}]}),
            ("stale_expected_seq", "append_events", {"session_id": SESSION, "expected_seq": 99, "events": [{"event_type": "user_message"}]}),
        ]:
            result = await c.call_tool(tool, args)
            bad[name] = {"is_error": result.is_error, "text": text_of(result)}
        seen["bad_input"] = bad
        seen["still_serving_head_seq"] = (await c.call_tool("get_session", {"session_id": SESSION})).structured_content["session"]["head_seq"]


async def as_bob(seen: dict[str, Any]) -> None:
    async with http_client(os.environ["ENGRAM_KEY_BOB"]) as http, client(http) as c:
        result = await c.call_tool("read_events", {"session_id": SESSION})
        seen["bob_read"] = {"is_error": result.is_error, "text": text_of(result)}
        try:
            await c.read_resource(f"engram://sessions/{SESSION}/transcript")
            seen["bob_transcript"] = "read"
        except MCPError as err:
            seen["bob_transcript"] = {"code": err.code, "message": err.message}
        found = await c.call_tool("search_memories", {"app_name": APP, "query": "oat"})
        seen["bob_found"] = found.structured_content["results"]


async def without_key(seen: dict[str, Any]) -> None:
    statuses: list[int] = []

    async def record(response: Any) -> None:
        statuses.append(response.status_code)

    http = http_client(None)
    # The client reports a refused connection as a generic error: the HTTP status is what says why.
    http.event_hooks["response"].append(record)
    try:
        async with http, client(http) as c:
            await c.list_tools()
        seen["unauthenticated"] = {"connected": True}
    except BaseException as err:  # an exception group around the client's error
        seen["unauthenticated"] = {"connected": False, "statuses": statuses, "error": repr(err)}


async def main() -> None:
    seen: dict[str, Any] = {}
    await as_alice(seen)
    await as_bob(seen)
    await without_key(seen)
    json.dump(seen, sys.stdout)


asyncio.run(main())
