"""``zagent skills``: the home's skills, as a session is offered them."""

from __future__ import annotations

from typing import Any

import click

from zagent_cli.context import Context
from zagent_cli.output import emit_json, say, say_problems, say_table


@click.group()
def skills() -> None:
    """The home's skills (skills/NAME/SKILL.md), which the model activates with skills_use."""


@skills.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_obj
def skills_list(obj: Context, as_json: bool) -> None:
    """Loaded skills, and the ones that did not load with the reason."""
    from zagent_core.tools.skills import load_skills

    home = obj.home
    catalog = load_skills(home)
    if as_json:
        listing: dict[str, Any] = {
            "home": str(home.root),
            "skills": [{"name": skill.name, "description": skill.description, "folder": str(skill.folder),
                        "allowed_tools": list(skill.allowed_tools)} for skill in catalog.skills.values()],
            "problems": [problem.model_dump() for problem in catalog.problems],
        }
        emit_json(listing)
        return
    if not catalog.skills:
        say(f"no skills loaded from {home.skills_dir}")
    say_table([(skill.name, skill.description, f"skills/{skill.folder.name}") for skill in catalog.skills.values()])
    if catalog.problems:
        say("\nproblems:")
        say_problems(catalog.problems)
