"""The docs/ pages build as a site (``mkdocs build --strict``: a broken link
or anchor, or a page left out of the nav, fails), with the CLI reference
rendered from the code and the API reference from the docstrings; the
README is the user's guide that opens with the two commands and links only
to pages that exist; the experiments' index names every experiment."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from bootstorm.models._yaml import parse_yaml

ROOT = Path(__file__).resolve().parents[1]
README_MAX_BYTES = 25_000  # issue 20: a guide, not the whole manual


def _build(cwd: Path, site: Path, config: Path | None = None) -> subprocess.CompletedProcess[str]:
    # No -q: mkdocs 1.6 counts --strict's warnings only at the levels it
    # logs, so `-q --strict` passes a broken link.
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)]
    if config is not None:
        command += ["-f", str(config)]
    return subprocess.run(
        command,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
    )


@pytest.mark.slow
def test_the_docs_build_strictly(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    pytest.importorskip("mkdocstrings_handlers.python")
    out = _build(ROOT, tmp_path / "site")
    assert out.returncode == 0, out.stderr
    pages = sorted(p.relative_to(ROOT / "docs") for p in (ROOT / "docs").rglob("*.md"))
    for page in pages:
        stem = page.with_suffix("")
        built = tmp_path / "site" / ("index.html" if str(stem) == "index" else f"{stem}/index.html")
        assert built.is_file(), page
    # The references are the code's: a command's help, a class's docstring.
    cli = (tmp_path / "site/reference/cli/index.html").read_text()
    assert "Simulate one boot storm" in cli and 'id="bootstorm-testbed-run"' in cli
    api = (tmp_path / "site/reference/api/index.html").read_text()
    assert "One boot storm on one node" in api
    # The docstrings' Sphinx roles render as code linked to their entries
    # (":class:~bootstorm.models.Scenario" was printed raw, 40 times).
    assert not re.search(r":(class|func|meth|attr|data|mod):<code>", api)
    assert '<a href="#bootstorm.models.Scenario"><code>Scenario</code></a>' in api
    # The model's catalog is the registry's: every CNI, with its family's stages.
    model = (tmp_path / "site/model/index.html").read_text()
    from bootstorm.models import CNI_NAMES, cni_family

    for cni in CNI_NAMES:
        row = rf"<code>{re.escape(cni)}</code></td>\s*<td>{cni_family(cni).name}</td>"
        assert re.search(row, model), cni
    # The experiments' index is included whole, not copied.
    experiments = (tmp_path / "site/experiments/index.html").read_text()
    assert "bench_netprio.py" in experiments


def test_a_broken_link_or_anchor_fails_the_build(tmp_path: Path) -> None:
    """The repository's `validation:` settings, on two pages: a link to a page
    that does not exist, or to an anchor that does not, fails `--strict`."""
    pytest.importorskip("mkdocs")
    validation = parse_yaml((ROOT / "mkdocs.yml").read_text())["validation"]
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "other.md").write_text("# Other\n\n## A section\n")
    config = tmp_path / "mkdocs.yml"
    import yaml

    config.write_text(
        yaml.safe_dump(
            {"site_name": "t", "validation": validation, "nav": ["index.md", "other.md"]}
        )
    )
    for body, why in (
        ("[fine](other.md#a-section)", None),
        ("[gone](missing.md)", "missing.md"),
        ("[no anchor](other.md#no-such-section)", "no-such-section"),
    ):
        (docs / "index.md").write_text(f"# Home\n\n{body}\n")
        out = _build(tmp_path, tmp_path / "site", config)
        if why is None:
            assert out.returncode == 0, out.stderr
        else:
            assert out.returncode != 0 and why in out.stderr, (body, out.stderr)


def test_the_readme_opens_with_the_two_commands_and_stays_a_guide() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.encode()) <= README_MAX_BYTES
    first_block = re.search(r"```bash\n(.*?)```", readme, re.S)
    assert first_block is not None
    assert readme.index(first_block.group(0)) < readme.index("\n## ")
    commands = [ln for ln in first_block.group(1).splitlines() if ln and not ln.startswith("#")]
    assert commands[0].endswith("pip install . && bootstorm demo")
    assert commands[1].endswith("pip install -e '.[test]' && python -m pytest -n 2")
    # The three workflows, and where the optimizer keeps its study.
    for heading in ("published profile", "your own node", "to a fleet"):
        assert re.search(rf"^### .*{heading}", readme, re.M | re.I), heading
    assert "~/.local/state/bootstorm/studies.log" in readme
    assert "study.log`" not in readme.replace("studies.log`", "")


def test_the_readme_links_only_to_pages_that_exist() -> None:
    readme = (ROOT / "README.md").read_text()
    linked = re.findall(r"\]\((docs/[^)#]+)", readme)
    assert linked
    missing = [p for p in linked if not (ROOT / p).is_file()]
    assert missing == []


def test_every_experiment_is_in_the_index() -> None:
    index = (ROOT / "experiments" / "README.md").read_text()
    scripts = sorted(p.name for p in (ROOT / "experiments").glob("*.py"))
    assert scripts
    assert [s for s in scripts if f"`{s}`" not in index] == []
    # Kernel measurements are not speed benchmarks: none left behind there.
    kernel = {s for s in scripts if s.startswith("bench_")}
    assert not kernel & {p.name for p in (ROOT / "benchmarks").glob("*.py")}
