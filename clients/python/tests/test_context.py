"""build_conversation_context's options and answer fields against a real server."""

from __future__ import annotations

import pytest

from engram_memory import (
    ContentPart,
    EngramClient,
    EngramClientSync,
    EngramMemory,
    EngramMemorySync,
    InvalidArgumentError,
)
from engram_server import EngramServer


async def test_budget_tokenizer_and_sections(client: EngramClient, sid: str) -> None:
    await client.create_session("app", "u", sid)
    await client.add_event(sid, "system", "You are terse.")
    for i in range(10):
        await client.add_event(sid, "user_message", f"message {i} padded with a few more words")
    await client.add_event(sid, "document", "Paris has the Louvre.", metadata={"section": "documents"})
    await client.add_event(sid, "document", "Bees dance.", metadata={"section": "documents"})

    full = await client.build_conversation_context(sid, token_budget=100_000)
    assert (full.events_included, full.events_dropped, full.events_summarized) == (13, 0, 0)
    assert full.tokenizer == "o200k_base"
    assert full.tokens_used > 0
    assert [s.name for s in full.sections] == ["role", "messages", "documents"]

    tight = await client.build_conversation_context(sid, token_budget=40, tokenizer="chars4")
    assert tight.tokenizer == "chars4"
    assert tight.tokens_used <= 40
    assert tight.messages[0].to_dict() == {"role": "system", "content": "You are terse."}
    assert tight.sections[1].events_dropped > 0

    no_system = await client.build_conversation_context(sid, token_budget=40, tokenizer="chars4", preserve_system=False)
    assert all(m.content != "You are terse." for m in no_system.messages)

    ranked = await client.build_conversation_context(
        sid,
        query="Louvre",
        retrieval_threshold=1,
        section_budgets={"documents": 12},
        section_priority=["documents", "messages"],
        tokenizer="chars4",
    )
    assert ranked.retrieval_used
    assert [s.name for s in ranked.sections] == ["role", "documents", "messages"]
    assert ranked.sections[1].retrieval_used
    docs = [m.content for m in ranked.messages if m.content.startswith("[document]")]
    assert docs == ["[document] Paris has the Louvre."]

    # The KAOS signature: max_events positional still works.
    assert len((await client.build_conversation_context(sid, 2)).messages) == 2


async def test_summaries_and_images(client: EngramClient, sid: str) -> None:
    await client.create_session("app", "u", sid)
    await client.add_event(sid, "user_message", "hi")
    await client.add_event(sid, "agent_response", "hello")
    await client.add_event(
        sid, "summary", "Greetings were exchanged.", metadata={"covers": {"from_seq": 1, "to_seq": 2}}
    )
    url = "https://example.test/a.png"
    await client.add_event(sid, "user_message", {"text": "What is this?", "images": [{"url": url, "detail": "low"}]})
    ctx = await client.build_conversation_context(sid, token_budget=10_000)
    assert ctx.events_summarized == 2
    assert ctx.messages[0].content == "[Summary of events 1-2] Greetings were exchanged."
    assert ctx.text == "Summary: Greetings were exchanged.\nUser: What is this?"
    image = ctx.messages[1]
    assert image.content == "What is this?"
    assert image.content_parts == (
        ContentPart("text", text="What is this?"),
        ContentPart("image_url", image_url=url, detail="low"),
    )
    assert image.to_dict(vision=True)["content"] == [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": url, "detail": "low"}},
    ]
    assert image.to_dict()["content"] == "What is this?"


async def test_invalid_options_name_the_field(client: EngramClient, sid: str) -> None:
    await client.create_session("app", "u", sid)
    with pytest.raises(InvalidArgumentError, match=r"INVALID_ARGUMENT: tokenizer: "):
        await client.build_conversation_context(sid, tokenizer="nope")
    with pytest.raises(InvalidArgumentError, match=r"INVALID_ARGUMENT: section_priority\[1\]: "):
        await client.build_conversation_context(sid, section_priority=["messages", "messages"])


async def test_kaos_memory_keeps_its_signature(memory: EngramMemory, sid: str) -> None:
    await memory.create_session("app", "u", sid)
    for i in range(5):
        await memory.add_event(sid, "user_message", f"turn {i}")
    assert await memory.build_conversation_context(sid) == "\n".join(f"User: turn {i}" for i in range(5))
    assert await memory.build_conversation_context(sid, 2) == "User: turn 3\nUser: turn 4"
    budgeted = await memory.build_conversation_context(sid, 0, token_budget=(4 + 2) * 2, tokenizer="chars4")
    assert budgeted == "User: turn 3\nUser: turn 4"
    assert await memory.build_conversation_context("no-such-session", token_budget=10) == ""


def test_sync_clients(server: EngramServer, sid: str) -> None:
    with EngramClientSync(server.target, timeout=10) as c:
        c.create_session("app", "u", sid)
        c.add_event(sid, "user_message", "hello there")
        ctx = c.build_conversation_context(sid, token_budget=1000, tokenizer="cl100k_base")
        assert ctx.tokenizer == "cl100k_base" and ctx.tokens_used > 4
    with EngramMemorySync(server.target, timeout=10) as m:
        assert m.build_conversation_context(sid, 0, token_budget=1000) == "User: hello there"
