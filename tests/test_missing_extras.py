"""A feature whose optional extra is not installed says so with the pip command that installs it, for the
baf being run (a clone: ``pip install -e "DIR[web]"``; from an index: ``pip install "baf[web]"``), and
every such message comes from ``MissingExtraError``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from baf_test_helpers import baf

import baf as baf_package
from baf import errors
from baf.errors import ConfigurationError, MissingExtraError

CLONE = Path(baf_package.__file__).resolve().parent.parent
#: The folder of the Python running the tests (a virtual environment's ``bin``), which holds its ``pip``.
PYTHON_FOLDER = str(Path(os.path.abspath(sys.executable)).parent)


@pytest.fixture(autouse=True)
def _pip_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """As in an activated virtual environment: the shell's ``pip`` is this Python's (the commands then
    start with plain ``pip``); the subprocesses inherit it."""
    monkeypatch.setenv("PATH", f"{PYTHON_FOLDER}{os.pathsep}{os.environ.get('PATH', '')}")


# Each feature, the third-party modules hidden from it (as if its extra were not installed), and the extra.
FEATURES = {
    "web": (["websockets"], "from baf.platforms.websocket import WebSocketPlatform"),
    "telegram": (["aiogram"], "from baf.platforms.telegram import TelegramPlatform"),
    "a2a platform": (["a2a", "uvicorn"], "import baf; baf.Agent('a').use_a2a_platform()"),
    "a2a tool": (["a2a"], "import baf; baf.Agent('a').add_a2a_agent('http://127.0.0.1:9/', 'peer')"),
    "postgres": (["asyncpg"], "from baf.log.postgres import _import_asyncpg; _import_asyncpg()"),
    "mcp": (["mcp"], "import baf; baf.Agent('a').add_mcp_server('calc', command=['python', 'server.py'])"),
    "otel hooks": (["opentelemetry"], "from baf.telemetry import OpenTelemetryHooks; OpenTelemetryHooks()"),
    "otel export": (["opentelemetry", "google.protobuf"], "from baf.replay.export import otlp_json; otlp_json([])"),
    "yaml": (["jinja2"], "from baf.declarative.templates import compile_template as c; c('{{ x }}', 'reply')"),
}
EXTRA = {"a2a platform": "a2a", "a2a tool": "a2a", "otel hooks": "otel", "otel export": "otel"}

PROBE = """
import json, sys
hidden, code = json.loads(sys.argv[1])
for name in hidden:
    sys.modules[name] = None  # what an environment without the package gives: ImportError on import
try:
    exec(code)
except Exception as exc:
    print(json.dumps({"type": type(exc).__name__, "message": str(exc),
                      "import_error": isinstance(exc, ImportError)}))
else:
    print(json.dumps(None))
"""


def _probe(hidden: list[str], code: str, cwd: Path) -> Any:
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps([hidden, code])], cwd=cwd,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.slow
@pytest.mark.parametrize("feature", list(FEATURES))
def test_each_missing_extra_names_itself_and_the_command_for_this_clone(feature: str, tmp_path: Path) -> None:
    hidden, code = FEATURES[feature]
    extra = EXTRA.get(feature, feature)
    failure = _probe(hidden, code, cwd=tmp_path)
    assert failure is not None, f"{feature}: nothing was raised"
    assert failure["type"] == "MissingExtraError" and failure["import_error"], failure
    # Run from elsewhere, the command names the clone this baf runs from (an editable install here).
    assert (
        f"needs the '{extra}' extra, which is not installed: pip install -e \"{CLONE}[{extra}]\""
        in (failure["message"])
    ), failure
    assert "baf[" not in failure["message"]  # never the index name, which is not this clone


def test_in_the_clone_the_command_is_the_readmes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(CLONE)
    error = MissingExtraError("WebSocketPlatform (websockets)", "web")
    assert str(error) == (
        "WebSocketPlatform (websockets) needs the 'web' extra, which is not installed: pip install -e \".[web]\""
    )
    assert (error.extra, error.command) == ("web", 'pip install -e ".[web]"')
    assert isinstance(error, ConfigurationError) and isinstance(error, ImportError)


def test_without_this_pythons_pip_on_path_the_command_names_the_python(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A virtual environment's ``baf`` run by its path, the environment not activated: the shell's ``pip``
    is another Python's (or refused by PEP 668), so the command runs this Python's pip by its path."""
    elsewhere = tmp_path / "bin"
    elsewhere.mkdir()
    (elsewhere / "pip").write_text("#!/bin/sh\n")
    (elsewhere / "pip").chmod(0o755)
    monkeypatch.setenv("PATH", str(elsewhere))
    monkeypatch.chdir(tmp_path)
    python = os.path.abspath(sys.executable)
    assert MissingExtraError("x", "web").command == f'{python} -m pip install -e "{CLONE}[web]"'
    monkeypatch.chdir(CLONE)  # inside the clone, a venv of it is named from there
    shown = os.path.relpath(python) if Path(python).is_relative_to(CLONE) else python
    assert MissingExtraError("x", "web").command == f'{shown} -m pip install -e ".[web]"'
    monkeypatch.setenv("PATH", PYTHON_FOLDER)
    assert MissingExtraError("x", "web").command == 'pip install -e ".[web]"'


class _Installed:
    """An installed distribution of baf, as importlib.metadata shows it, with its ``direct_url.json``."""

    def __init__(self, direct_url: dict[str, Any] | None) -> None:
        self.direct_url = direct_url

    def read_text(self, name: str) -> str | None:
        assert name == "direct_url.json"
        return None if self.direct_url is None else json.dumps(self.direct_url)


@pytest.mark.parametrize(
    ("direct_url", "command"),
    [
        (None, 'pip install "baf[postgres]"'),  # from an index
        ({"url": "https://files.example/baf-0.1.0.whl", "archive_info": {}}, 'pip install "baf[postgres]"'),
        ({"url": "file:///home/me/baf", "dir_info": {}}, 'pip install "/home/me/baf[postgres]"'),
        ({"url": "file:///home/me/dist/baf-0.1.0-py3-none-any.whl", "archive_info": {}},
         'pip install "/home/me/dist/baf-0.1.0-py3-none-any.whl[postgres]"'),
    ],
)  # fmt: skip
def test_an_install_outside_a_clone_gets_the_command_for_where_it_came_from(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, direct_url: dict[str, Any] | None, command: str
) -> None:
    # This baf as if installed into site-packages: its folder holds no pyproject.toml.
    monkeypatch.setattr(errors, "__file__", str(tmp_path / "site-packages" / "baf" / "errors.py"))
    monkeypatch.setattr(errors.metadata, "distribution", lambda name: _Installed(direct_url))
    assert MissingExtraError("a postgresql:// log (asyncpg)", "postgres").command == command


@pytest.mark.slow
def test_baf_run_says_which_extra_and_how_in_one_line(tmp_path: Path) -> None:
    # websockets hidden the way a missing package is: the import fails.
    (tmp_path / "hidden" / "websockets").mkdir(parents=True)
    (tmp_path / "hidden" / "websockets" / "__init__.py").write_text("raise ImportError('hidden by the test')\n")
    (tmp_path / "web_agent.py").write_text(
        "from baf import Agent\nagent = Agent('web', log='memory://')\nagent.use_websocket_platform(port=0)\n"
    )
    done = baf("run", "web_agent.py", cwd=tmp_path, env={"PYTHONPATH": str(tmp_path / "hidden")})
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip() == (
        f"baf run: WebSocketPlatform (websockets) needs the 'web' extra, which is not installed: "
        f'pip install -e "{CLONE}[web]"'
    )


EXAMPLES = CLONE / "examples"
# Each example that needs an extra, the modules hidden from it, the extra, and what its message names.
EXAMPLE_EXTRAS = {
    "websocket_agent.py": (["websockets"], "web", "WebSocketPlatform (websockets)"),
    "telegram_bot.py": (["aiogram"], "telegram", "TelegramPlatform (aiogram)"),
    "a2a_agents.py": (["a2a", "uvicorn"], "a2a", "A2APlatform (a2a-sdk, uvicorn)"),
    "opentelemetry_agent.py": (["opentelemetry"], "otel", "Printing the spans (opentelemetry-sdk)"),
    "mcp/calculator_agent.py": (["mcp"], "mcp", "MCP server 'calc': MCP tools"),
    "mcp/calculator_server.py": (["mcp"], "mcp", "The calculator's MCP server (the mcp SDK)"),
}


@pytest.mark.slow
@pytest.mark.parametrize("example", list(EXAMPLE_EXTRAS))
def test_an_example_run_without_its_extra_says_so_in_one_line(example: str, tmp_path: Path) -> None:
    """``python examples/X.py`` without the extra: the line ``baf run`` would print, not a traceback."""
    hidden, extra, what = EXAMPLE_EXTRAS[example]
    # A sitecustomize hides the modules as an environment without the package does: their import fails.
    (tmp_path / "shim").mkdir()
    (tmp_path / "shim" / "sitecustomize.py").write_text(
        "import sys\n" + "".join(f"sys.modules[{name!r}] = None\n" for name in hidden)
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "shim"), "PORT": "0", "TELEGRAM_BOT_TOKEN": "123456:ABCDEF"}
    done = subprocess.run([sys.executable, str(EXAMPLES / example)], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert done.stderr == (
        f"{Path(example).name}: {what} needs the '{extra}' extra, which is not installed: "
        f'pip install -e "{CLONE}[{extra}]"\n'
    )


def test_only_a_missing_extra_is_shortened_other_uncaught_errors_keep_their_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[BaseException] = []
    monkeypatch.setattr(sys, "excepthook", lambda kind, error, frames: seen.append(error))
    monkeypatch.setattr(sys, "argv", ["agent.py"])
    missing = MissingExtraError("WebSocketPlatform (websockets)", "web")
    other = ValueError("a bug of the script's own")
    sys.excepthook(ValueError, other, None)
    sys.excepthook(MissingExtraError, missing, None)
    assert seen == [other]  # the hook it wrapped shows everything else
    assert capsys.readouterr().err == f"agent.py: {missing}\n"
