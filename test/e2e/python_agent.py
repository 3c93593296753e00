"""The Python side of the polyglot end-to-end test: an agent that writes a
conversation with tool calls through the KAOS-style EngramMemory API.

Usage: python_agent.py TARGET SESSION_ID TURNS
Prints one JSON line: {"session_id", "events": n, "seqs": [...]} once done.
Each turn is user_message, tool_call, tool_result, agent_response; the last
turn has two parallel tool calls. A short pause between events lets a live
subscriber see them arrive one by one.
"""
from __future__ import annotations

import asyncio
import json
import sys

from engram_memory import EngramMemory


async def main(target: str, session_id: str, turns: int) -> None:
    seqs: list[int] = []
    async with EngramMemory(target) as memory:
        await memory.get_or_create_session(session_id, app_name="polyglot", user_id="py-agent")

        async def add(event_type: str, content: object, metadata: dict | None = None) -> None:
            event = memory.create_event(event_type, content, metadata)
            if not await memory.add_event(session_id, event):
                raise SystemExit(f"session {session_id} vanished")
            seqs.append(event.seq)
            await asyncio.sleep(0.01)

        for turn in range(1, turns + 1):
            await add("user_message", f"question {turn}: weather in city-{turn}?")
            calls = [f"call-{turn}-a", f"call-{turn}-b"] if turn == turns else [f"call-{turn}"]
            for call in calls:
                await add("tool_call", {"tool": "weather", "arguments": {"city": f"city-{turn}"}, "tool_call_id": call})
            for call in calls:
                await add("tool_result", {"tool": "weather", "result": f"sunny ({call})", "tool_call_id": call})
            await add("agent_response", f"answer {turn}: sunny in city-{turn}", {"turn": turn})
    print(json.dumps({"session_id": session_id, "events": len(seqs), "seqs": seqs}), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
