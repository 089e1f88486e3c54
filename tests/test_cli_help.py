"""The command lines explain themselves: every flag of cbfsim and cbfc says what it does (more
than its own name) and shows its default; docs/cli.md is the parsers' own text; every cbfsim /
cbfc command the docs show parses; number lists take every documented form."""
from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from cbfsim.docs_cli import DOC, flag_rows, parse_command, parsers, render
from compiler.cli_errors import OneLineParser

ROOT = Path(__file__).resolve().parent.parent
FILLER = {"a", "an", "the", "of", "to", "for", "in", "on", "and", "or", "is", "it", "its", "this", "with", "by",
          "default", "none", "off", "on", "required"}


def help_problems(parser: argparse.ArgumentParser) -> list[str]:
    """Flags whose help repeats only the flag's name, or (options) shows no default."""
    problems = []
    formatter = parser.formatter_class(prog=parser.prog)
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or isinstance(action, argparse._SubParsersAction):
            continue
        label = "/".join(action.option_strings) or action.dest
        text = formatter._expand_help(action) if action.help else ""
        name_words = {w for s in action.option_strings + [action.dest, str(action.metavar or "")]
                      for w in re.findall(r"[a-z0-9]+", s.lower())}
        body = re.sub(r"\(default[^)]*\)|\(required\)", "", text.lower())
        words = set(re.findall(r"[a-z0-9]+", body)) - name_words - FILLER
        if len(words) < 3:
            problems.append(f"{parser.prog} {label}: help {action.help!r} only repeats the name")
        if action.option_strings and not re.search(r"default|required", text, re.I):
            problems.append(f"{parser.prog} {label}: --help shows no default")
    return problems


@pytest.mark.parametrize("command", [name for name, _ in parsers()])
def test_every_flag_says_what_it_does_and_shows_its_default(command):
    assert help_problems(dict(parsers())[command]) == []


def test_the_help_check_fails_on_a_flag_that_repeats_its_name_or_hides_its_default():
    parser = OneLineParser(prog="bad")
    parser.add_argument("--safe-fraction", type=float, default=None, help="safe fraction")
    parser.add_argument("--label-lost", action="store_true", help="label lost")
    parser.add_argument("--lr", type=float, help="the learning rate of Adam; lower it when the loss jumps")
    problems = help_problems(parser)
    assert any("--safe-fraction: help" in p for p in problems)
    assert any("--label-lost: help" in p for p in problems)
    assert any("--lr: --help shows no default" in p for p in problems)
    assert not any("--label-lost: --help" in p for p in problems)     # a switch shows "(default: off)"


def test_help_prints_the_defaults():
    text = dict(parsers())["cbfsim simulate"].format_help()
    assert "(default: 10.0)" in " ".join(text.split()) and "else osqp; none for" in " ".join(text.split())
    assert "(default: the certificate's period, else 0.01)" in " ".join(text.split())


def test_docs_cli_md_is_generated_from_the_parsers():
    assert DOC.read_text() == render(), "docs/cli.md is stale: python -m cbfsim.docs_cli > docs/cli.md"


def test_the_docs_comparison_notices_a_changed_flag():
    """The comparison above can fail: a changed help text changes the page."""
    before = render()
    import training.flag_help as flag_help
    saved = flag_help.FIELD_HELP["lr"]
    flag_help.FIELD_HELP["lr"] = "something else entirely, turn it up"
    try:
        assert render() != before
    finally:
        flag_help.FIELD_HELP["lr"] = saved


def test_every_flag_appears_in_docs_cli_md():
    text = DOC.read_text()
    for command, parser in parsers():
        assert f"## {command}" in text
        for names, _ in flag_rows(parser):
            assert names in text, f"{command} {names} missing from docs/cli.md"


def test_cbfsim_compile_help_has_card_and_optional_inputs():
    """cbfsim compile --help agrees with what the command does: --inputs defaults from the card."""
    parser = dict(parsers())["cbfsim compile"]
    text = " ".join(parser.format_help().split())
    assert "--card CARD" in text and "default: the plant's m" in text
    assert parser.parse_args(["model.onnx", "-o", "out"]).inputs is None       # not required


# ------------------------------------------------------------------ docs code blocks parse
def _bash_commands(text: str) -> list[list[str]]:
    """Every cbfsim / cbfc / python -m cbfsim.device command of the ```bash blocks of a page."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            command: list[str] = []
            for word in words + ["&&"]:
                if word in ("&&", "||", ";", "|"):
                    if command[:1] in (["cbfsim"], ["cbfc"]) or command[:3] == ["python", "-m", "cbfsim.device"]:
                        commands.append(command)
                    command = []
                else:
                    command.append(word)
    return commands


PAGES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md", ROOT / "examples" / "own_plant" / "README.md"]


def test_every_cbfsim_and_cbfc_command_in_the_docs_parses():
    found = 0
    for page in PAGES:
        if not page.is_file():
            continue
        for words in _bash_commands(page.read_text()):
            found += 1
            if "--help" in words or "-h" in words:
                continue
            try:
                parse_command(words)
            except SystemExit as exc:
                pytest.fail(f"{page.name}: `{shlex.join(words)}` does not parse (exit {exc.code})")
    assert found >= 10, f"only {found} commands found in the docs' bash blocks: is the extraction broken?"


def test_the_docs_parse_check_fails_on_a_command_that_does_not_parse():
    page = "```bash\ncbfsim train --system van_der_pol --bogus 3 --out run\n```\n"
    (words,) = _bash_commands(page)
    with pytest.raises(SystemExit):
        parse_command(words)


# ------------------------------------------------------------------ number lists
TRAIN = ["cbfsim", "train", "--system", "van_der_pol", "--out", "run"]


@pytest.mark.parametrize("form", [["--domain-lo=-2,-2"], ["--domain-lo", "-2", "-2"], ["--domain-lo", "-2,-2"],
                                  ["--domain-lo", "-2, -2"], ["--domain-lo", "-2e0,-.2e1"],
                                  ["--domain-lo=-2", "-2"], ["--domain-lo", "-2,-2,"]])
def test_a_negative_list_parses_in_every_form(form):
    args = parse_command(TRAIN + form + ["--domain-hi", "2", "2"])
    assert args.domain_lo == [-2.0, -2.0] and args.domain_hi == [2.0, 2.0]


def test_the_top_level_cbfsim_parser_passes_negative_lists_to_train():
    from training.cli import build_parser
    args = build_parser("cbfsim").parse_args(["train", "--system", "x", "--domain-lo", "-2,-2,-3.14",
                                              "--widths", "16", "16", "--out", "run"])
    assert args.domain_lo == [-2.0, -2.0, -3.14] and args.widths == [16, 16]


def test_several_starts_parse():
    args = parse_command(["cbfsim", "simulate", "card.json", "--x0", "-1.8,0.05,0", "--x0", "-1", "0", "0.5"])
    assert args.x0 == [[-1.8, 0.05, 0.0], [-1.0, 0.0, 0.5]] and args.card == Path("card.json")


@pytest.mark.parametrize("argv,words", [(["--domain-lo", "-2,abc"], ("--domain-lo",)),
                                        (["--domain-lo", "nan,1"], ("--domain-lo", "finite")),
                                        (["--widths", "3.5"], ("--widths", "integers"))])
def test_a_bad_list_is_one_usage_line_naming_the_flag(argv, words, capsys):
    with pytest.raises(SystemExit) as info:
        parse_command(TRAIN + argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and len(err.strip().splitlines()) == 1
    assert all(w in err for w in words), err


def test_train_help_names_every_built_in_plant_and_every_preset():
    """The lists are written out (importing the plants would load sympy for --help): this keeps
    them from drifting when a plant or a preset is added."""
    from systems import SYSTEM_NAMES
    from training.presets import PRESETS
    actions = {a.dest: a.help for a in dict(parsers())["cbfsim train"]._actions}
    listed = set(re.findall(r"[a-z0-9_]+", actions["system"].split(") or")[0]))
    assert set(SYSTEM_NAMES) <= listed, set(SYSTEM_NAMES) - listed
    listed = set(re.findall(r"[a-z0-9_]+", actions["preset"]))
    assert set(PRESETS) <= listed, set(PRESETS) - listed
