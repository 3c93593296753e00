"""The README's example runs as written against a real server (its fixed
address rewritten to the test server's port)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from engram_server import EngramServer

README = Path(__file__).resolve().parents[1] / "README.md"
ADDRESS = '"127.0.0.1:8000"'


def test_readme_example_runs(server: EngramServer, tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    example = next(b for b in blocks if "asyncio.run(main())" in b)
    assert ADDRESS in example
    script = tmp_path / "example.py"
    script.write_text(example.replace(ADDRESS, f'"{server.target}"'))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=True).stdout
    assert "user_message What is the capital of France?" in out
    assert "User: What is the capital of France?" in out
    assert "Assistant: Paris." in out
