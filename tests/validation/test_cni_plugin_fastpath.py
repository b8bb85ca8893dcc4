"""The compiled front end of ``bootstorm-cni`` (``fastpath.c``), built as
``bootstorm agent install-cni`` builds it, run through every behavioural case
of ``test_cni_plugin.py`` (re-collected here against it), then:

- the ADD cases again against a build whose Python is a stub that fails
  loudly, so each passes only if the compiled path served it;
- each fallback case (DEL, CHECK, VERSION, STATUS, GC, a pooled config, https,
  a bad config, ...) against that build: it must reach the stub with the same
  stdin bytes, environment and ``-I -S``;
- the C and the Python plugin side by side: the delegate's stdin, the error
  JSON and stderr lines, the log line's fields.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import cni_plugin_helpers
import pytest
import test_cni_plugin as base
from cni_plugin_helpers import call, cni_environ, fake_bin, log_lines, network
from conftest import thread_agent

from bootstorm.validation.cni_plugin._delegate import delegate_config
from bootstorm.validation.cni_plugin.install import (
    PLUGIN_NAME,
    InstallError,
    find_compiler,
    install,
    package_parent,
)

# The behavioural cases and their fixtures, collected again in this module
# (against the front end: the autouse fixture below).
LIMIT_1 = base.LIMIT_1
_free_port = base._free_port
_permit_free = base._permit_free
_silent_server = base._silent_server
_REUSED = (
    # fixtures
    "bin_dir",
    "fake_dir",
    "token_file",
    # cases
    "test_a_delegate_outlasting_the_lease_ttl_keeps_its_permit",
    "test_add_answers_before_its_release_is_answered",
    "test_add_delegates_and_returns_the_result_unchanged",
    "test_add_holds_the_permit_while_the_delegate_runs",
    "test_agent_down",
    "test_agent_restarted_mid_add_loses_the_lease_and_leaks_nothing",
    "test_agent_slow_is_bounded_by_timeout_s",
    "test_bad_config_is_code_7_naming_field_and_value",
    "test_bad_input_is_one_cni_error",
    "test_check_delegates",
    "test_del_never_asks_the_agent",
    "test_delegate_failure_passes_through_and_releases",
    "test_gc_gives_back_what_stale_attachments_took",
    "test_missing_token_file_is_code_7",
    "test_no_permit_within_wait_s",
    "test_pool_empty_delegates",
    "test_sigterm_mid_add_releases_the_permit_and_kills_the_delegate",
    "test_status_asks_the_agent",
    "test_version_lists_the_spec_versions",
)
for _name in _REUSED:
    globals()[_name] = getattr(base, _name)

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler (cc)")

#: What the stub "Python" answers: a front end that fell back shows it.
STUB_ERROR = b'{"cniVersion": "1.0.0", "code": 999, "msg": "fell back to python"}'
STUB_RC = 3


@pytest.fixture(scope="session")
def frontend(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The front end as installed on a node: Python fallback is the real plugin."""
    bin_dir = tmp_path_factory.mktemp("frontend")
    installed = install(bin_dir)
    assert installed.kind == "compiled", installed.detail
    return Path(installed.path)


@pytest.fixture(scope="session")
def c_only(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A front end whose "Python" is a stub recording its call: (front end, record dir)."""
    root = tmp_path_factory.mktemp("c_only")
    record = root / "record"
    record.mkdir()
    stub = root / "python-stub"
    stub.write_text(
        "#!/bin/sh\n"
        f'printf "%s\\n" "$@" > {record}/argv\n'
        f"cat > {record}/stdin\n"
        f"env > {record}/env\n"
        f"printf '%s' '{STUB_ERROR.decode()}'\n"
        f"exit {STUB_RC}\n"
    )
    stub.chmod(0o755)
    out = root / "bin"
    out.mkdir()
    installed = install(out, python=str(stub))
    assert installed.kind == "compiled"
    return installed.path, record


@pytest.fixture(autouse=True)
def _through_frontend(frontend: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cni_plugin_helpers, "PLUGIN_OVERRIDE", [str(frontend)])


class TestServedInC:
    """The ADD cases, each passing only if the compiled path served it (its
    Python is a stub that answers code 999)."""

    @pytest.fixture(autouse=True)
    def _c_only(self, c_only: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(cni_plugin_helpers, "PLUGIN_OVERRIDE", [str(c_only[0])])

    add_result = staticmethod(base.test_add_delegates_and_returns_the_result_unchanged)
    add_holds = staticmethod(base.test_add_holds_the_permit_while_the_delegate_runs)
    add_renews = staticmethod(base.test_a_delegate_outlasting_the_lease_ttl_keeps_its_permit)
    add_agent_down = staticmethod(base.test_agent_down)
    add_agent_slow = staticmethod(base.test_agent_slow_is_bounded_by_timeout_s)
    add_no_permit = staticmethod(base.test_no_permit_within_wait_s)
    add_agent_restarted = staticmethod(
        base.test_agent_restarted_mid_add_loses_the_lease_and_leaks_nothing
    )
    add_delegate_fails = staticmethod(base.test_delegate_failure_passes_through_and_releases)
    add_sigterm = staticmethod(base.test_sigterm_mid_add_releases_the_permit_and_kills_the_delegate)


def _fallback_cases(url: str, token: Path, tmp_path: Path) -> list[tuple[str, bytes, str]]:
    good = network(url=url, token_file=token)

    def with_(**changes: Any) -> bytes:
        return json.dumps({**good, **changes}).encode()

    return [
        ("DEL", json.dumps(good).encode(), "DEL"),
        ("CHECK", json.dumps(good).encode(), "CHECK"),
        ("VERSION", json.dumps(good).encode(), "VERSION"),
        ("STATUS", with_(cniVersion="1.1.0"), "STATUS"),
        ("GC", with_(cniVersion="1.1.0"), "GC"),
        ("pool", with_(pool="netns-veth"), "ADD"),
        ("pool null", with_(pool=None), "ADD"),
        ("https", with_(agent={**good["agent"], "url": "https://127.0.0.1:1"}), "ADD"),
        ("hostname", with_(agent={**good["agent"], "url": "http://localhost:1"}), "ADD"),
        ("ca_file", with_(agent={**good["agent"], "ca_file": "/etc/ca.pem"}), "ADD"),
        ("bad policy", with_(failure_policy="maybe"), "ADD"),
        ("bad stage", with_(stage="Add CNI"), "ADD"),
        ("unknown field", with_(failurePolicy="open"), "ADD"),
        ("timeout bool", with_(agent={**good["agent"], "timeout_s": True}), "ADD"),
        ("wait_s over", with_(agent={**good["agent"], "wait_s": 601}), "ADD"),
        ("no such delegate", with_(delegate={"type": "nosuch"}), "ADD"),
        ("delegate itself", with_(delegate={"type": PLUGIN_NAME}), "ADD"),
        (
            "missing token",
            with_(agent={**good["agent"], "token_file": str(tmp_path / "no")}),
            "ADD",
        ),
        ("not json", b"not json", "ADD"),
        ("NaN", json.dumps(good).replace('"wait_s": 5.0', '"wait_s": NaN').encode(), "ADD"),
        ("duplicate key", json.dumps(good)[:-1].encode() + b', "stage": "Other"}', "ADD"),
        ("escaped key", json.dumps(good).replace('"stage"', '"st\\u0061ge"').encode(), "ADD"),
        ("non-ASCII", json.dumps({**good, "name": "n\u00e9t"}, ensure_ascii=False).encode(), "ADD"),
        ("old version", with_(cniVersion="0.2.0"), "ADD"),
        ("empty stdin", b"", "ADD"),
    ]


class TestFallsBackToPython:
    """Everything outside the fast path reaches Python, before any side effect,
    with the same stdin bytes and environment, as ``python -I -S``."""

    def test_each_case_goes_to_python(
        self, c_only: tuple[Path, Path], bin_dir: Path, token_file: Path, tmp_path: Path
    ) -> None:
        frontend, record = c_only
        # An agent that would hand out permits: none may be taken.
        with thread_agent(LIMIT_1) as client:
            cases = _fallback_cases(client.base_url, token_file, tmp_path)
            for label, stdin, command in cases:
                for f in record.iterdir():
                    f.unlink()
                env = cni_environ(
                    command=command, bin_dir=bin_dir, netns="/run/netns/x", env={"MARK": label}
                )
                done = subprocess.run(
                    [str(frontend)], input=stdin, capture_output=True, env=env, timeout=30
                )
                assert done.returncode == STUB_RC, (label, done)
                assert done.stdout == STUB_ERROR, label
                assert (record / "stdin").read_bytes() == stdin, label
                argv = (record / "argv").read_text().splitlines()
                assert argv[:3] == ["-I", "-S", "-c"], (label, argv)
                assert argv[-1] == str(package_parent()), (label, argv)
                seen = dict(
                    line.split("=", 1) for line in (record / "env").read_text().splitlines()
                )
                assert all(seen.get(k) == v for k, v in env.items() if k != "PATH"), label
                assert _permit_free(client), label  # no permit taken before falling back

    def test_a_config_over_64_kib_reaches_python_whole(
        self, c_only: tuple[Path, Path], bin_dir: Path, token_file: Path
    ) -> None:
        frontend, record = c_only
        conf = network(url="http://127.0.0.1:1", token_file=token_file, pool="netns-veth")
        conf["prevResult"] = {"cniVersion": "1.0.0", "pad": "x" * 200_000}
        stdin = json.dumps(conf).encode()
        done = subprocess.run(
            [str(frontend)],
            input=stdin,
            capture_output=True,
            env=cni_environ(command="ADD", bin_dir=bin_dir, netns="/x"),
            timeout=30,
        )
        assert done.returncode == STUB_RC
        assert (record / "stdin").read_bytes() == stdin


def _python_argv() -> list[str]:
    return [
        sys.executable,
        "-c",
        "from bootstorm.validation.cni_plugin import main; raise SystemExit(main())",
    ]


def _run_both(
    frontend: Path, monkeypatch: pytest.MonkeyPatch, conf: dict[str, Any], **kwargs: Any
) -> tuple[cni_plugin_helpers.Call, cni_plugin_helpers.Call]:
    monkeypatch.setattr(cni_plugin_helpers, "PLUGIN_OVERRIDE", [str(frontend)])
    c = call(conf, **kwargs)
    monkeypatch.setattr(cni_plugin_helpers, "PLUGIN_OVERRIDE", _python_argv())
    py = call(conf, **kwargs)
    return c, py


@pytest.mark.parametrize("policy", ["open", "closed"])
@pytest.mark.parametrize("case", ["down", "slow", "408", "401"])
def test_errors_and_warnings_match_the_python_plugin(
    case: str,
    policy: str,
    c_only: tuple[Path, Path],
    bin_dir: Path,
    fake_dir: Path,
    token_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Same code, message, stderr line and exit status as the Python plugin."""
    kwargs: dict[str, Any] = {
        "command": "ADD",
        "bin_dir": bin_dir,
        "container_id": "0123456789abcdef",
        "env": {"FAKE_DIR": str(fake_dir)},
    }
    agent = {"timeout_s": 0.3, "wait_s": 0.2}

    def both(url: str, token: Path = token_file) -> tuple[Any, Any]:
        conf = network(url=url, token_file=token, failure_policy=policy, agent=agent)
        return _run_both(c_only[0], monkeypatch, conf, **kwargs)

    if case == "down":
        c, py = both(f"http://127.0.0.1:{_free_port()}")
    elif case == "slow":
        with _silent_server() as url:
            c, py = both(url)
    else:
        with thread_agent(LIMIT_1) as client:
            held = client.acquire("AddCNI", "someone-else")
            if case == "408":
                c, py = both(client.base_url)
            else:
                bad = tmp_path / "bad-token"
                bad.write_text("x" * 40 + "\n")
                c, py = both(client.base_url, bad)
            client.release(held)
            assert _permit_free(client)
    assert c.rc == py.rc, (c, py)
    assert c.stdout == py.stdout, (c, py)
    assert c.stderr == py.stderr, (c, py)
    if policy == "closed":
        assert c.json["code"] == (100 if case == "401" else 11)


def test_the_delegate_gets_the_config_python_builds(
    c_only: tuple[Path, Path], bin_dir: Path, fake_dir: Path, token_file: Path
) -> None:
    """Byte for byte ``json.dumps(delegate_config(...))``: cniVersion and name in
    place or appended, carried prevResult/args/cni.dev keys, the runtimeConfig
    of declared capabilities, escapes re-written as Python writes them."""
    with thread_agent(LIMIT_1) as client:
        conf = network(
            url=client.base_url,
            token_file=token_file,
            delegate={
                "type": "fakeplug",
                "name": "overridden",
                "nested": {"a": [1, 2.5, -3e2, True, None, {}], "b": 'q"\\/\u0001\u00e9\U0001f600'},
                "capabilities": {"portMappings": True, "bandwidth": False},
                "args": {"own": 1},
            },
        )
        conf["name"] = "net\u00e9"  # a \u escape in the input is ASCII
        conf["prevResult"] = {"cniVersion": "1.0.0", "interfaces": [{"name": "eth0"}]}
        conf["args"] = {"outer": 2}
        conf["cni.dev/valid-attachments"] = []
        conf["runtimeConfig"] = {"bandwidth": {"x": 1}, "portMappings": [{"hostPort": 80}]}
        monkeypatch_free = cni_plugin_helpers.PLUGIN_OVERRIDE
        cni_plugin_helpers.PLUGIN_OVERRIDE = [str(c_only[0])]
        try:
            got = call(conf, command="ADD", bin_dir=bin_dir, env={"FAKE_DIR": str(fake_dir)})
        finally:
            cni_plugin_helpers.PLUGIN_OVERRIDE = monkeypatch_free
        assert got.rc == 0, got
        assert _permit_free(client)
    raw = json.loads(json.dumps(conf))
    want = json.dumps(delegate_config(raw["delegate"], raw, cni_version="1.0.0")).encode()
    assert (fake_dir / "stdin-ADD").read_bytes() == want


@pytest.mark.parametrize("speaks_1_1", [True, False])
def test_a_1_1_0_network_asks_the_delegate_what_it_speaks(
    speaks_1_1: bool, c_only: tuple[Path, Path], tmp_path: Path, fake_dir: Path, token_file: Path
) -> None:
    bin_dir = fake_bin(tmp_path)
    plugin = bin_dir / "fakeplug"
    if speaks_1_1:
        text = plugin.read_text().replace(
            "#!/bin/sh\n",
            '#!/bin/sh\n[ "$CNI_COMMAND" = VERSION ] && '
            'echo \'{"supportedVersions":["1.0.0","1.1.0"]}\' && exit 0\n',
        )
        plugin.write_text(text)
    with thread_agent(LIMIT_1) as client:
        conf = network(url=client.base_url, token_file=token_file, version="1.1.0")
        cni_plugin_helpers.PLUGIN_OVERRIDE = [str(c_only[0])]
        try:
            got = call(conf, command="ADD", bin_dir=bin_dir, env={"FAKE_DIR": str(fake_dir)})
        finally:
            cni_plugin_helpers.PLUGIN_OVERRIDE = None
        assert got.rc == 0, got
        assert _permit_free(client)
    given = json.loads((fake_dir / "stdin-ADD").read_text())
    assert given["cniVersion"] == ("1.1.0" if speaks_1_1 else "1.0.0")


def test_the_log_line_has_the_python_plugins_fields(
    c_only: tuple[Path, Path],
    bin_dir: Path,
    fake_dir: Path,
    token_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    logs = {"c": tmp_path / "c.log", "py": tmp_path / "py.log"}
    records: dict[str, dict[str, Any]] = {}
    with thread_agent(LIMIT_1) as client:
        for who, argv in (("c", [str(c_only[0])]), ("py", _python_argv())):
            monkeypatch.setattr(cni_plugin_helpers, "PLUGIN_OVERRIDE", argv)
            conf = network(url=client.base_url, token_file=token_file, log_file=str(logs[who]))
            got = call(conf, command="ADD", bin_dir=bin_dir, env={"FAKE_DIR": str(fake_dir)})
            assert got.rc == 0, got
            (line,) = log_lines(logs[who])
            records[who] = json.loads(line)
    c, py = records["c"], records["py"]
    assert list(c) == list(py)
    assert list(c["delegates"][0]) == list(py["delegates"][0])
    for key in ("command", "container_id", "ifname", "stage", "policy", "outcome", "events"):
        assert c[key] == py[key], key
    assert c["lease"] and c["delegates"][0]["program"] == "fakeplug"
    assert c["start_s"] <= c["delegates"][0]["start_s"] <= c["delegates"][0]["end_s"] <= c["end_s"]


def test_install_is_atomic_and_refuses_a_bad_dir(tmp_path: Path) -> None:
    target = tmp_path / "bin"
    target.mkdir()
    first = install(target)
    assert first.kind == "compiled"
    assert (first.path.stat().st_mode & 0o777) == 0o755
    assert sorted(p.name for p in target.iterdir()) == [PLUGIN_NAME]  # no temp left
    with pytest.raises(InstallError, match=r"^bin_dir: does not exist \(got '"):
        install(tmp_path / "nope")
    afile = tmp_path / "file"
    afile.write_text("")
    with pytest.raises(InstallError, match=r"^bin_dir: is not a directory"):
        install(afile)


def test_the_launcher_is_python_with_dash_i_s(tmp_path: Path, bin_dir: Path) -> None:
    out = tmp_path / "launch"
    out.mkdir()
    installed = install(out, launcher=True)
    assert installed.kind == "launcher"
    assert installed.path.read_text().startswith(f"#!{sys.executable} -IS\n")
    got = subprocess.run(
        [str(installed.path)],
        input=b'{"cniVersion": "1.0.0"}',
        capture_output=True,
        env={"CNI_COMMAND": "VERSION"},
        check=False,
    )
    assert got.returncode == 0 and json.loads(got.stdout)["cniVersion"] == "1.0.0"


def test_the_cli_installs_and_refuses_a_bad_dir_in_one_line(tmp_path: Path) -> None:
    bootstorm = Path(sys.executable).parent / "bootstorm"
    argv = [str(bootstorm)] if bootstorm.exists() else [sys.executable, "-m", "bootstorm.cli"]
    done = subprocess.run(
        [*argv, "agent", "install-cni", "--cni-bin-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert os.access(tmp_path / PLUGIN_NAME, os.X_OK)
    bad = subprocess.run(
        [*argv, "agent", "install-cni", "--cni-bin-dir", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        f"error: bin_dir: does not exist (got '{tmp_path / 'nope'}')"
    ]
