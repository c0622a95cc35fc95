"""Code in the docs that readers copy: it must run as written."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"


def python_block(doc: str, containing: str) -> str:
    """The ```python block of ``docs/doc`` that contains ``containing``."""
    blocks = re.findall(r"```python\n(.*?)```", (DOCS / doc).read_text(encoding="utf-8"), re.S)
    return next(block for block in blocks if containing in block)


@pytest.mark.slow
def test_the_reasoning_state_testing_example_passes_as_written(tmp_path: Path) -> None:
    # Copied into a project of its own, whose pytest-asyncio runs in its default (strict) mode, not
    # in this repository's asyncio_mode = "auto".
    (tmp_path / "test_example.py").write_text(python_block("reasoning_state.md", "async def test_"))
    (tmp_path / "pytest.ini").write_text("[pytest]\nasyncio_mode = strict\n")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", "pytest.ini", "test_example.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


async def test_the_intents_page_example_routes_as_described(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from baf.testing import RecordingPlatform

    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    exec(compile(python_block("intents.md", "set_global"), "intents.md", "exec"), namespace)
    agent = namespace["agent"]
    platform = RecordingPlatform()
    agent.add_platform(platform)  # type: ignore[attr-defined]
    async with agent:  # type: ignore[attr-defined]
        for text in ("hi", "do you deliver to Porto", "what can you do", "blue"):
            await agent.receive_message("u", text, platform)  # type: ignore[attr-defined]
    assert platform.replies["u"] == ["Hello!", "Yes, we deliver to Porto.", "I know about greetings and deliveries.",
                                     "Sorry, say 'help' to see what I can do."]  # fmt: skip


README = DOCS.parent / "README.md"


def readme_block(language: str, containing: str) -> str:
    blocks = re.findall(rf"```{language}\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    return next(block for block in blocks if containing in block)


async def test_the_readme_reasoning_example_runs_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "docs").mkdir()
    namespace: dict[str, object] = {}
    exec(compile(readme_block("python", "FunctionLLM(model)"), "README.md", "exec"), namespace)
    agent = namespace["agent"]
    async with agent:  # type: ignore[attr-defined]
        session = await agent.receive_message("s", "What is 2 + 3?")  # type: ignore[attr-defined]
    assert session.chat_history()[-1].text == "The sum is 5.0."


async def test_the_readme_reasoning_state_fits_into_the_greeter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The quick start's greeter, plus the reasoning state as the README says to add it to an agent
    that has its own initial state."""
    from baf.testing import ScriptedLLM

    monkeypatch.chdir(tmp_path)
    quick_start = readme_block("python", "agent.use_terminal_platform()")
    quick_start = quick_start.split("agent.use_terminal_platform()")[0].replace("greeted.go_to(idle)", "")
    from baf.library.state.reasoning_state_library import new_reasoning_state  # imported by the example above

    namespace: dict[str, object] = {"llm": ScriptedLLM(["Reasoned."]), "new_reasoning_state": new_reasoning_state}
    exec(compile(quick_start + readme_block("python", "initial=False"), "README.md", "exec"), namespace)
    agent = namespace["agent"]
    async with agent:  # type: ignore[attr-defined]
        await agent.receive_message("s", "hi")  # type: ignore[attr-defined]
        session = await agent.receive_message("s", "think")  # type: ignore[attr-defined]
    assert [e.text for e in session.chat_history()][-1] == "Reasoned."


def test_the_readme_quick_start_runs_with_python_and_with_baf_run(tmp_path: Path) -> None:
    """Saved as a file, the quick start's greeter runs both ways the README says: ``python greeter.py``
    and ``baf run greeter.py`` (which refuses a file that runs its agent as it is imported)."""
    (tmp_path / "greeter.py").write_text(readme_block("python", "agent.use_terminal_platform()"))
    baf = Path(sys.executable).with_name("baf")
    for command, visit in (([sys.executable, "greeter.py"], 1), ([str(baf), "run", "greeter.py"], 2)):
        result = subprocess.run(command, cwd=tmp_path, input="hi\n", capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        assert f"This is visit {visit}." in result.stdout, result.stdout  # the second shows the first's too


def test_ci_runs_the_readmes_test_command() -> None:
    """The README's install-and-test command is what .ci/run runs (a venv: PEP 668 systems refuse pip
    outside one)."""
    command = readme_block("bash", "pytest").strip()
    assert command == 'python3 -m venv .venv && .venv/bin/pip install -e ".[dev]" && .venv/bin/python -m pytest -n 2'
    ci = (DOCS.parent / ".ci" / "run").read_text(encoding="utf-8")
    for part in command.split(" && "):
        assert part in ci, part
    demo = readme_block("bash", "baf demo").strip()
    assert demo == "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/baf demo"


async def test_the_platform_page_runs_a_custom_platform_until_its_input_ends() -> None:
    from baf import Agent, Session
    from baf.log import MemoryLog

    doc = (DOCS / "writing_a_platform.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", doc, re.S)
    platform_code = next(block for block in blocks if "class LinesPlatform" in block)
    main_code = next(block for block in blocks if "async def main" in block)
    agent = Agent("echo", log=MemoryLog())
    state = agent.new_state("echo", initial=True)

    def echo(session: Session) -> None:
        if session.event is not None:
            session.reply(f"echo: {session.event.text}")

    state.set_body(echo)
    state.when_event().go_to(state)
    namespace: dict[str, object] = {"agent": agent}
    exec(compile(platform_code + main_code, "writing_a_platform.md", "exec"), namespace)
    await asyncio.wait_for(namespace["main"](), 10)  # type: ignore[operator]
    platform = agent.find_platform("lines")
    assert platform is not None and platform.replies == ["echo: hello", "echo: how are you?"]  # type: ignore[attr-defined]
    assert not agent.running


def test_every_install_command_in_the_docs_installs_an_extra_of_this_checkout() -> None:
    """A reader runs these from a clone, in the README's venv: `pip install 'baf[x]'` would ask the package
    index for a package named baf, and `python3 -m pip` is refused by PEP 668 systems' own Python."""
    import tomllib

    pyproject = tomllib.loads((DOCS.parent / "pyproject.toml").read_text(encoding="utf-8"))
    extras = set(pyproject["project"]["optional-dependencies"])
    pages = [DOCS.parent / "README.md", *sorted(DOCS.glob("*.md"))]
    commands = [(page.name, m) for page in pages for m in re.findall(r"[\w./-]*pip install [^`\n#]+", page.read_text())]
    assert len(commands) >= 8
    for page, command in commands:
        if command.startswith(".venv/bin/pip install"):  # the README's two first commands
            continue
        match = re.fullmatch(r'pip install -e "\.\[([a-z0-9]+(?:,[a-z0-9]+)*)\]"\s*', command)
        assert match, f"{page}: {command!r}"
        assert set(match.group(1).split(",")) <= extras, f"{page}: {command!r}"


def test_the_working_memory_example_prints_what_its_comments_say() -> None:
    block = python_block("reasoning_patterns.md", "MemoryManager()")
    result = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "notes on tides",
        "llm_text: notes on notes on tides",
        "notes on notes on tides",
    ]


def conflict_marker_lines(text: str) -> list[int]:
    """The numbers of the lines a merge conflict left in ``text``. ``=======`` alone is a Markdown or
    reStructuredText underline too, so it counts only in a text that has an opening or closing marker."""
    lines = text.splitlines()
    ends = [n for n, line in enumerate(lines, 1) if re.match(r"(<{7}|>{7}) ", line)]
    middles = [n for n, line in enumerate(lines, 1) if line == "=" * 7] if ends else []
    return sorted(ends + middles)


def tracked_text_files() -> list[Path]:
    root = DOCS.parent
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=False)
    if listed.returncode == 0:
        return [root / name for name in listed.stdout.decode().split("\0") if name]
    # Not a git checkout (an unpacked source archive): the project's own folders.
    folders = ("baf", "docs", "examples", "tests", "bench", ".ci")
    return [README, root / "pyproject.toml", *(p for f in folders for p in sorted((root / f).rglob("*")))]


def test_conflict_markers_are_found_and_underlines_are_not() -> None:
    conflicted = f"a = 1\n{'<' * 7} HEAD\nb = 2\n{'=' * 7}\nb = 3\n{'>' * 7} other\n"
    assert conflict_marker_lines(conflicted) == [2, 4, 6]
    assert conflict_marker_lines(f"Title\n{'=' * 7}\n\ntext\n") == []


def test_no_tracked_file_carries_merge_conflict_markers() -> None:
    # A merge once left its markers in scaling_out.md, and a reader got both sides of the conflict.
    marked = []
    for path in tracked_text_files():
        if not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # not text
        marked += [f"{path.relative_to(DOCS.parent)}:{n}" for n in conflict_marker_lines(text)]
    assert marked == []


def test_the_yaml_page_shows_the_problems_its_broken_file_has(tmp_path: Path) -> None:
    from baf import load_agent
    from baf.errors import AgentFileError

    page = (DOCS / "yaml_agents.md").read_text(encoding="utf-8")
    broken = next(b for b in re.findall(r"```yaml\n(.*?)```", page, re.S) if "nowhere" in b)
    start = page.index("agent.yaml: 2 problems")
    shown = page[start : page.index("```", start)]
    (tmp_path / "agent.yaml").write_text(broken, encoding="utf-8")
    with pytest.raises(AgentFileError) as raised:
        load_agent(tmp_path / "agent.yaml")
    assert str(raised.value).replace(str(tmp_path / "agent.yaml"), "agent.yaml") == shown.rstrip("\n")
