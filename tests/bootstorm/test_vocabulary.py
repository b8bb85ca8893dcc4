"""One vocabulary (issue 37): every command's options against the declared
table, :data:`bootstorm._vocabulary.CONCEPTS`.

The walk loads every command as ``bootstorm`` does (its old spellings
installed), then checks that a concept's option has its canonical name, kind
and repetition wherever it appears; that an old spelling is hidden and still
parses; that every command that writes a file takes ``-o/--output``; and that
every default is shown, in one form (``[default: X]``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args, get_origin

import pytest
import typer
from cli_runner import run_main
from typer import _click as click
from typer.core import TyperArgument, TyperGroup, TyperOption

from bootstorm._params import ConfigError, parse_seeds
from bootstorm._vocabulary import CONCEPTS, UNIT_SUFFIXES, WRITES_FILE, Concept, Kind
from bootstorm.cli import app

Commands = dict[str, tuple[click.Command, click.Context]]


def _walk(command: click.Command, path: str, parent: click.Context | None) -> Iterator[Any]:
    ctx = click.Context(command, info_name=path.rsplit(" ", 1)[-1] or "bootstorm", parent=parent)
    if isinstance(command, TyperGroup):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            assert sub is not None
            yield from _walk(sub, f"{path} {name}".strip(), ctx)
    else:
        yield path, command, ctx


@pytest.fixture(scope="module")
def commands() -> Commands:
    root = typer.main.get_group(app)
    return {path: (command, ctx) for path, command, ctx in _walk(root, "", None)}


def _options(command: click.Command) -> list[TyperOption]:
    return [p for p in command.params if isinstance(p, TyperOption)]


def _kind(param: click.Parameter) -> Kind:
    if isinstance(param, TyperArgument):
        return "positional"
    assert isinstance(param, TyperOption)
    if param.is_flag:
        return "flag"
    annotation = param.type_descriptor.annotation
    if get_origin(annotation) is list:
        (annotation,) = get_args(annotation)
    if param.type_descriptor.is_choice:
        return "choice"
    names: dict[Any, Kind] = {int: "int", float: "float", str: "str", Path: "path"}
    return names[annotation]


def _find(command: click.Command, concept: Concept) -> click.Parameter | None:
    for param in command.params:
        if concept.option == "SCENARIO":
            if isinstance(param, TyperArgument):
                return param
        elif concept.option in param.opts and not getattr(param, "hidden", False):
            return param
    return None


def test_the_table_names_only_commands_that_exist(commands: Commands) -> None:
    for concept in CONCEPTS:
        unknown = set(concept.commands) - set(commands)
        assert not unknown, f"{concept.name}: no such command {unknown}"
        assert len(set(concept.commands)) == len(concept.commands), concept.name
        for alias in concept.aliases:
            assert set(alias.commands) <= set(concept.commands), (concept.name, alias.old)


def test_every_concept_has_its_canonical_name_and_form(commands: Commands) -> None:
    wrong = []
    for concept in CONCEPTS:
        for form in concept.forms:
            for path in form.commands:
                command, _ = commands[path]
                param = _find(command, concept)
                if param is None:
                    wrong.append(f"{path}: no {concept.option} ({concept.name})")
                    continue
                kind = _kind(param)
                if kind != form.kind:
                    wrong.append(f"{path} {concept.option}: {kind}, declared {form.kind}")
                if isinstance(param, TyperOption) and param.multiple != form.repeatable:
                    wrong.append(f"{path} {concept.option}: repeatable is {param.multiple}")
                if concept.short is not None and concept.short not in param.opts:
                    wrong.append(f"{path} {concept.option}: no {concept.short}")
    assert not wrong, "\n".join(wrong)


def test_a_canonical_name_means_its_concept_everywhere(commands: Commands) -> None:
    """An option spelled as a concept's name, in a command the table does not
    list for it, is that name used for something else (or a table gap)."""
    by_option = {c.option: c for c in CONCEPTS}
    wrong = []
    for path, (command, _) in commands.items():
        for param in _options(command):
            if param.hidden:
                continue
            for opt in [*param.opts, *param.secondary_opts]:
                concept = by_option.get(opt)
                if concept is not None and path not in concept.commands:
                    wrong.append(f"{path} {opt}: not declared for {concept.name}")
    assert not wrong, "\n".join(wrong)


def test_old_spellings_are_hidden_aliases(commands: Commands) -> None:
    wrong = []
    for concept in CONCEPTS:
        for alias in concept.aliases:
            for path in alias.commands:
                command, _ = commands[path]
                found = [p for p in _options(command) if alias.old in p.opts + p.secondary_opts]
                if not found:
                    wrong.append(
                        f"{path}: {alias.old} no longer parses (alias of {concept.option})"
                    )
                elif not all(p.hidden for p in found):
                    wrong.append(f"{path}: {alias.old} is shown (now {concept.option})")
    assert not wrong, "\n".join(wrong)


def test_every_command_that_writes_a_file_takes_dash_o(commands: Commands) -> None:
    missing = [
        path
        for path in WRITES_FILE
        if not any({"-o", "--output"} <= set(p.opts) for p in _options(commands[path][0]))
    ]
    assert not missing, missing
    # And no command outside the list takes -o for something else.
    others = [
        path
        for path, (command, _) in commands.items()
        if path not in WRITES_FILE and any("-o" in p.opts for p in _options(command))
    ]
    assert not others, others


def test_a_unit_in_the_name_means_a_bare_number(commands: Commands) -> None:
    """``--lifetime-s 5``, ``--memory-mib 2048``: a number in the name's unit
    (a comma-separated list of them where the table declares a list form)."""
    lists = {
        (p, c.option) for c in CONCEPTS for f in c.forms if "," in f.syntax for p in f.commands
    }
    wrong = []
    for path, (command, _) in commands.items():
        for param in _options(command):
            name = next(o for o in param.opts if o.startswith("--"))
            if not name.endswith(UNIT_SUFFIXES) or (path, name) in lists:
                continue
            if _kind(param) not in ("int", "float"):
                wrong.append(f"{path} {name}: {_kind(param)}, not a number")
    assert not wrong, "\n".join(wrong)


_SHOWN = re.compile(r"\[default: [^\]]*\]")


def test_every_default_is_shown_in_one_form(commands: Commands) -> None:
    """A default is ``[default: X]`` in the help, wherever it comes from: the
    option's value, the scenario's, or the command's own rule; never only in
    the text ("(default: 3)", "Default: fixed")."""
    wrong = []
    optional = {(p, c.option) for c in CONCEPTS if c.optional for p in c.commands}
    declared = {(p, c.option) for c in CONCEPTS for p in c.commands}
    for path, (command, ctx) in commands.items():
        for param in _options(command):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            name = param.opts[-1]
            help_text = record[1]
            shown = _SHOWN.search(help_text) is not None
            if re.search(r"(?i)\bdefault", _SHOWN.sub("", help_text)):
                wrong.append(f"{path} {name}: a default outside [default: ...]")
            plain_flag = param.is_flag and not param.secondary_opts
            if plain_flag:
                continue
            if param.default is not None and not shown:
                wrong.append(f"{path} {name}: default {param.default!r} not shown")
            key = (path, next((o for o in param.opts if o.startswith("--")), name))
            if key in declared and key not in optional and not shown:
                wrong.append(f"{path} {name}: its default is not shown")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize(
    ("text", "seeds"),
    [
        ("1001-1010", tuple(range(1001, 1011))),
        ("0,1,2", (0, 1, 2)),
        ("1-3,7", (1, 2, 3, 7)),
        (" 4 , 2-3 ,5", (4, 2, 3, 5)),
    ],
)
def test_one_seed_syntax(text: str, seeds: tuple[int, ...]) -> None:
    assert parse_seeds(text) == seeds


@pytest.mark.parametrize("text", ["", "a", "3-1", "1-", "-1", "0-100000", "0-999,1000", "1,,2"])
def test_bad_seeds_name_the_option(text: str) -> None:
    with pytest.raises(ConfigError, match=r"^seeds: "):
        parse_seeds(text)


@pytest.mark.parametrize(("text", "twice"), [("1,1", 1), (" 4 , 2-3 ,4", 4), ("1-3,2", 2)])
def test_a_seed_twice_is_refused(text: str, twice: int) -> None:
    # It was kept once, silently: ``--seeds 1,1`` ran one storm where two were typed.
    with pytest.raises(ConfigError, match=rf"^seeds: seed {twice} given twice \(got "):
        parse_seeds(text)


#: (command, canonical spelling, old spelling, the rest): each fails its
#: check before any work, the same way under both names.
OLD_AND_NEW = [
    (["tune"], ["--trials", "0"], ["--budget", "0"]),
    (["validate"], ["--repeats", "0"], ["--repeat", "0"]),
    (["calibrate", "--plan"], ["--plan-runs", "1000000000"], ["--runs", "1000000000"]),
    (["optimize", "--storage", "memory"], ["--limit-stage", "Boot"], ["--stages", "Boot"]),
    (["optimize", "--storage", "memory"], ["--pool-kind", "veth"], ["--pools", "veth"]),
    (["optimize", "--storage", "memory"], ["--sandboxes", "200,x"], ["--sizes", "200,x"]),
    (["optimize", "--storage", "memory"], ["--slo-p99", "-3s"], ["--p99-slo", "-3s"]),
    (["optimize", "--storage", "memory"], ["no-such.yaml"], ["--scenario", "no-such.yaml"]),
    (["sweep"], ["no-such.yaml"], ["--scenario", "no-such.yaml"]),
    (["agent", "install-cni"], ["--cni-bin-dir", "no/such/dir"], ["--bin-dir", "no/such/dir"]),
    (["agent", "serve"], ["--cni-plugin", "nope"], ["--cni", "nope"]),
]


@pytest.mark.parametrize(("command", "new", "old"), OLD_AND_NEW, ids=lambda v: " ".join(v))
def test_an_old_spelling_parses_as_the_new_one(
    command: list[str], new: list[str], old: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code_new, out_new, err_new = run_main([*command, *new], capsys)
    code_old, out_old, err_old = run_main([*command, *old], capsys)
    assert code_new == 2, err_new
    assert (code_old, out_old) == (code_new, out_new)
    notice, *rest = err_old.splitlines()
    assert notice.startswith(f"{old[0]} is now ") and "next release" in notice, notice
    assert rest == err_new.splitlines()


def test_old_and_new_spelling_together_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_main(["tune", "--trials", "5", "--budget", "5"], capsys)
    assert code == 2
    assert err.splitlines()[-1] == "error: --budget and --trials are one option: give --trials only"


@pytest.mark.slow
def test_an_old_spelling_searches_as_the_new_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same study, under the old names and the new: the same tuned config."""
    common = ["optimize", "--storage", "memory", "--trials", "3", "--executor", "python"]
    runs = {
        "new": ["--sandboxes", "12", "--pool-kind", "netns", "--seeds", "0-1", "-o"],
        "old": ["--sandboxes", "12", "--pools", "netns", "--seeds", "0,1", "--output"],
    }
    written = {}
    for name, args in runs.items():
        out = tmp_path / f"{name}.yaml"
        code, _, err = run_main([*common, *args, str(out)], capsys)
        assert code == 0, err
        # The same config, but for the moment it was written.
        written[name] = re.sub(r"created_at: .*", "", out.read_text())
    assert written["new"] == written["old"]


def test_the_reference_lists_every_old_spelling() -> None:
    """docs/reference/cli.md's table of old spellings is the declared one."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "reference" / "cli.md").read_text()
    rows = {
        line.split("|")[1].strip().strip("`").split()[0]
        for line in page.splitlines()
        if line.startswith("| `")
    }
    declared = {a.old for c in CONCEPTS for a in c.aliases}
    assert declared <= rows, declared - rows


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["optimize", "--limit-stage", "Boot"], "error: limit_stage: unknown name 'Boot'"),
        (["optimize", "--pool-kind", "veth"], "error: pool_kind: unknown name 'veth'"),
        (["optimize", "--sandboxes", "0,5"], "error: sandboxes[0]: must be"),
        (["calibrate", "--plan", "--dry-run", "--limit-stage", "Boot"], "error: limit_stage: "),
        (["calibrate", "--plan", "--dry-run", "--pool-kind", "veth"], "error: pool_kind: "),
    ],
)
def test_a_bad_value_names_the_option_it_was_given_as(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The workflows name their parameters (stages, pool_kinds, sizes); the
    line names the option the user typed."""
    if argv[0] == "optimize":
        argv = [*argv, "--storage", "memory"]
    code, _, err = run_main(argv, capsys)
    assert code == 2
    assert err.startswith(line) and len(err.splitlines()) == 1, err


def test_chrome_takes_its_old_output_argument(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``testbed chrome TRACE OUT`` (before -o) writes what ``-o OUT`` does."""
    data = Path(__file__).resolve().parents[2] / "traces" / "data"
    recorded = str(sorted(data.glob("*-25.jsonl.gz"))[0])
    new, old = tmp_path / "new.json", tmp_path / "old.json"
    code, _, err = run_main(["testbed", "chrome", recorded, "-o", str(new)], capsys)
    assert code == 0, err
    code, _, err = run_main(["testbed", "chrome", recorded, str(old)], capsys)
    assert code == 0, err
    assert err.startswith("OUTPUT after the trace is now -o/--output;"), err
    assert old.read_bytes() == new.read_bytes()
    code, _, err = run_main(["testbed", "chrome", recorded, str(old), "-o", str(new)], capsys)
    assert code == 2 and err.splitlines()[-1].startswith("error: output: give -o "), err
