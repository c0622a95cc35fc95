"""Skill: front matter, folders, prompt rendering."""

from pathlib import Path

import pytest

from baf.errors import ConfigurationError
from baf.reasoning import Skill


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_from_file_with_front_matter(tmp_path: Path) -> None:
    file = write(
        tmp_path / "refunds.md",
        "---\nname: refund-policy\ndescription: How to handle a refund.\nlicense: MIT\n---\n\n# Refunds\n\n1. Ask.\n",
    )
    skill = Skill.from_file(file)
    assert skill.name == "refund-policy"
    assert skill.description == "How to handle a refund."
    assert skill.content == "# Refunds\n\n1. Ask."
    assert dict(skill.metadata) == {"license": "MIT"}
    assert skill.source == file


def test_from_file_without_front_matter_uses_the_stem(tmp_path: Path) -> None:
    skill = Skill.from_file(write(tmp_path / "tone.md", "Be brief.\n\n---\n\nA rule later is not front matter.\n"))
    assert skill == Skill("tone", "Be brief.\n\n---\n\nA rule later is not front matter.", source=tmp_path / "tone.md")
    assert skill.description is None


def test_front_matter_without_name_and_with_crlf(tmp_path: Path) -> None:
    skill = Skill.from_file(write(tmp_path / "x.md", "---\r\ndescription: Windows file\r\n---\r\nBody\r\n"))
    assert (skill.name, skill.description, skill.content) == ("x", "Windows file", "Body")


def test_skill_md_is_named_after_its_folder(tmp_path: Path) -> None:
    skill = Skill.from_file(write(tmp_path / "pdf-forms" / "SKILL.md", "Fill in forms."))
    assert skill.name == "pdf-forms"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("---\nname: x\nBody without a closing line\n", "never closed"),
        ("---\nname: [unclosed\n---\nBody\n", "not valid YAML"),
        ("---\n- a\n- b\n---\nBody\n", "must be a mapping"),
        ("---\nname: 42\n---\nBody\n", "'name' must be text"),
        ("---\ndescription: [a, b]\n---\nBody\n", "'description' must be text"),
        ("---\nname: empty\n---\n\n   \n", "no instructions"),
    ],
)
def test_malformed_files_name_the_file(tmp_path: Path, text: str, message: str) -> None:
    file = write(tmp_path / "bad.md", text)
    with pytest.raises(ConfigurationError, match=message) as info:
        Skill.from_file(file)
    assert str(file) in str(info.value)


def test_from_folder_loads_files_and_packages_in_order(tmp_path: Path) -> None:
    write(tmp_path / "b.md", "B body")
    write(tmp_path / "a.md", "---\ndescription: first\n---\nA body")
    write(tmp_path / "notes.txt", "not markdown")
    write(tmp_path / ".hidden.md", "skipped")
    write(tmp_path / "pdf" / "SKILL.md", "---\nname: pdf\n---\nPDF body")
    write(tmp_path / "pdf" / "reference.md", "a resource of the pdf skill, not a skill")
    write(tmp_path / "billing" / "invoices.md", "Invoices body")
    write(tmp_path / "billing" / "deep" / "SKILL.md", "Deep body")
    skills = Skill.from_folder(tmp_path)
    assert [skill.name for skill in skills] == ["a", "b", "invoices", "deep", "pdf"]
    assert skills[0].description == "first"


def test_from_folder_that_is_a_package(tmp_path: Path) -> None:
    write(tmp_path / "SKILL.md", "One skill")
    write(tmp_path / "other.md", "resource")
    assert [skill.content for skill in Skill.from_folder(tmp_path)] == ["One skill"]


def test_from_folder_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="does not exist"):
        Skill.from_folder(tmp_path / "missing")
    write(tmp_path / "one.md", "---\nname: same\n---\nx")
    write(tmp_path / "two.md", "---\nname: same\n---\ny")
    with pytest.raises(ConfigurationError, match="two skills are named 'same'"):
        Skill.from_folder(tmp_path)


def test_empty_folder_has_no_skills(tmp_path: Path) -> None:
    assert Skill.from_folder(tmp_path) == []


def test_to_prompt() -> None:
    assert Skill("refunds", "1. Ask.\n", "A refund request.").to_prompt() == (
        "## Skill: refunds\nUse when: A refund request.\n\n1. Ask."
    )
    assert Skill("tone", "Be brief.").to_prompt() == "## Skill: tone\n\nBe brief."


def test_constructor_checks_and_frozen_metadata() -> None:
    with pytest.raises(ConfigurationError):
        Skill("", "x")
    metadata = {"k": "v"}
    skill = Skill("s", "x", metadata=metadata)
    metadata["k"] = "changed"
    assert skill.metadata["k"] == "v"
