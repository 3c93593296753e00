"""The examples of this client's README and of the repository's docs/ pages
run as written against a real server (their fixed address rewritten to the
test server's port)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from engram_server import EngramServer

README = Path(__file__).resolve().parents[1] / "README.md"
#: The repository's docs/ pages that hold runnable Python examples.
DOCS_WITH_PYTHON = sorted(
    page
    for page in (README.parents[2] / "docs").glob("*.md")
    if any("asyncio.run(main())" in b for b in re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S))
)
ADDRESS = '"127.0.0.1:8000"'


def _run_example(marker: str, server: EngramServer, tmp_path: Path) -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    example = next(b for b in blocks if "asyncio.run(main())" in b and marker in b)
    assert ADDRESS in example
    script = tmp_path / "example.py"
    script.write_text(example.replace(ADDRESS, f'"{server.target}"'))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=True).stdout


def test_readme_example_runs(server: EngramServer, tmp_path: Path) -> None:
    out = _run_example("EngramMemory(", server, tmp_path)
    assert "user_message What is the capital of France?" in out
    assert "User: What is the capital of France?" in out
    assert "Assistant: Paris." in out


def test_readme_long_term_memory_example_runs(server: EngramServer, tmp_path: Path) -> None:
    out = _run_example("KnowledgeGraph(", server, tmp_path)
    lines = out.splitlines()
    assert "search: Alice's sister lives in Porto" in lines
    # Recall renders the pinned memory, the relevant one and the session's turn.
    assert "Alice is vegetarian" in out and "User: Book me a trip to see my sister" in out
    # Berlin superseded Lyon: only Berlin holds now; Lyon is kept, closed.
    assert [line for line in lines if line.startswith("fact:")] == ["fact: alice lives in Berlin"]
    ever = [line for line in lines if line.startswith("ever:")]
    assert ever[0] == "ever: Berlin until None"
    assert ever[1].startswith("ever: Lyon until 20") and len(ever) == 2


#: Each Integrations snippet (in this README and in docs/mcp-and-integrations.md) and a line it prints.
INTEGRATIONS = {
    "engram_memory.adk": "adk state: [('topic', 'billing'), ('user:tier', 'gold')] 1 helpdesk",
    "engram_memory.openai_agents": "openai popped: Hi!",
    "engram_memory.langchain": "langchain: ['I am Alice', 'Hello Alice.']",
    "engram_memory.langgraph": "langgraph: sister My sister lives in Porto",
    "engram_memory.pydantic_ai": "pydantic_ai: 4 messages",
}


def test_docs_hold_the_repository_examples() -> None:
    # The repository's Python examples live on these pages; none may go missing.
    assert [page.name for page in DOCS_WITH_PYTHON] == ["mcp-and-integrations.md"]


@pytest.mark.parametrize(
    "readme", [README, *DOCS_WITH_PYTHON], ids=["client", *(f"docs/{page.name}" for page in DOCS_WITH_PYTHON)]
)
@pytest.mark.parametrize("module", sorted(INTEGRATIONS))
def test_readme_integration_snippets_run(readme: Path, module: str, server: EngramServer, tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", readme.read_text(), flags=re.S)
    example = next(b for b in blocks if f"from {module} import" in b and "asyncio.run(main())" in b)
    assert ADDRESS in example
    script = tmp_path / "example.py"
    script.write_text(example.replace(ADDRESS, f'"{server.target}"'))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=90, check=True).stdout
    assert INTEGRATIONS[module] in out.splitlines()
