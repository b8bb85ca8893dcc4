"""Installing ``bootstorm-cni`` on a node (``bootstorm agent install-cni``).

What goes into the node's CNI bin directory is a front end whose ADD, the
call on every sandbox's critical path, is compiled (``fastpath.c``: a few
hundred microseconds of CPU instead of a Python interpreter's start); every
other command, and any config it does not fully understand, is handed to
this package run by ``python -I -S`` (no ``site``, no editable-install
hooks), the one full implementation. Without a C compiler it writes that
Python launcher alone.

Not imported by the plugin itself (its start imports the standard library only).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = [
    "CFLAGS",
    "FRONTEND_SOURCE",
    "PLUGIN_NAME",
    "BuildError",
    "InstallError",
    "Installed",
    "install",
    "package_parent",
]

PLUGIN_NAME = "bootstorm-cni"
#: The C front end, shipped beside this module.
FRONTEND_SOURCE = Path(__file__).with_name("fastpath.c")
CFLAGS = ("-O2", "-Wall", "-Wextra", "-Werror")
#: Longest ``#!`` line Linux reads in full (since 5.1; 127 bytes before).
_SHEBANG_MAX = 127


class InstallError(ValueError):
    """Bad input (the bin directory, the interpreter): one line naming the field and value."""


class BuildError(RuntimeError):
    """The compiler was there but failed: one line with its first error."""


class Installed:
    """What :func:`install` wrote: its path, ``compiled`` or ``launcher``, and how."""

    __slots__ = ("detail", "kind", "path")
    path: Path
    kind: str
    detail: str

    def __init__(self, *, path: Path, kind: str, detail: str) -> None:
        self.path = path
        self.kind = kind
        self.detail = detail

    def __repr__(self) -> str:
        return f"Installed(path={self.path!r}, kind={self.kind!r})"


def package_parent() -> Path:
    """The directory holding the ``cni_plugin`` package: on ``sys.path`` of the
    ``-I -S`` interpreter, the package imports as ``cni_plugin`` (its modules
    import each other relatively and the standard library only)."""
    return Path(__file__).resolve().parent.parent


def _c_string(text: str) -> str:
    """``text`` as a C string literal (for a ``-D`` define; no shell involved)."""
    out = ['"']
    for byte in text.encode():
        ch = chr(byte)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 0x20 <= byte < 0x7F:
            out.append(ch)
        else:
            out.append(f"\\{byte:03o}")
    out.append('"')
    return "".join(out)


def find_compiler() -> str | None:
    """The system C compiler (``cc`` on PATH, else /usr/bin/cc), or None."""
    found = shutil.which("cc")
    if found is None and os.access("/usr/bin/cc", os.X_OK):
        found = "/usr/bin/cc"
    return found


def _check_bin_dir(bin_dir: Path) -> Path:
    if not str(bin_dir) or "\x00" in str(bin_dir):
        raise InstallError(f"bin_dir: must be a directory (got {str(bin_dir)!r})")
    if not bin_dir.is_dir():
        rule = "is not a directory" if bin_dir.exists() else "does not exist"
        raise InstallError(f"bin_dir: {rule} (got {str(bin_dir)!r})")
    if not os.access(bin_dir, os.W_OK | os.X_OK):
        raise InstallError(f"bin_dir: is not writable by this user (got {str(bin_dir)!r})")
    return bin_dir


def _check_python(python: str) -> str:
    if not python or not os.path.isabs(python) or not os.access(python, os.X_OK):
        raise InstallError(f"python: must be an absolute path to an interpreter (got {python!r})")
    return python


def _launcher_text(python: str, pypath: Path) -> str:
    """The Python launcher: ``python -I -S`` with the package's directory on sys.path."""
    body = (
        "# bootstorm-cni (bootstorm agent install-cni): the Python plugin, started\n"
        "# with -I -S (no site, no editable-install hooks); stdlib imports only.\n"
        "import sys\n"
        f"sys.path.append({str(pypath)!r})\n"
        "from cni_plugin import main\n"
        "sys.exit(main())\n"
    )
    shebang = f"#!{python} -IS"
    if len(shebang) <= _SHEBANG_MAX and not any(c.isspace() for c in python):
        return f"{shebang}\n{body}"
    # A long or spaced interpreter path cannot be a #! line: sh execs it.
    quoted = "'" + python.replace("'", "'\\''") + "'"
    code = (
        f"import sys; sys.path.append({str(pypath)!r}); "
        "from cni_plugin import main; sys.exit(main())"
    )
    code_q = "'" + code.replace("'", "'\\''") + "'"
    return f"#!/bin/sh\nexec {quoted} -I -S -c {code_q}\n"


def _write_atomically(target: Path, fill: Callable[[Path], object]) -> None:
    """Create a temp file beside ``target``, let ``fill(path)`` write it, make it
    0755 and rename it over ``target`` (a node's runtime never execs half a file)."""
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        fill(tmp)
        tmp.chmod(0o755)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def install(
    bin_dir: Path,
    *,
    python: str | None = None,
    launcher: bool = False,
    compiler: str | None = None,
) -> Installed:
    """Write ``bin_dir/bootstorm-cni``: the compiled front end, or (``launcher``,
    or no compiler) the ``-I -S`` Python launcher. :class:`InstallError` for a
    bad ``bin_dir``/``python``; :class:`BuildError` if the compiler fails."""
    bin_dir = _check_bin_dir(Path(bin_dir))
    python = _check_python(python if python is not None else sys.executable)
    pypath = package_parent()
    target = bin_dir / PLUGIN_NAME
    cc = None if launcher else (compiler or find_compiler())
    if cc is None:
        text = _launcher_text(python, pypath)
        _write_atomically(target, lambda tmp: tmp.write_text(text))
        why = "asked for" if launcher else "no C compiler found"
        return Installed(path=target, kind="launcher", detail=f"Python launcher ({why})")

    def build(tmp: Path) -> None:
        argv = [
            cc,
            *CFLAGS,
            f"-DBOOTSTORM_PYTHON={_c_string(python)}",
            f"-DBOOTSTORM_PYPATH={_c_string(str(pypath))}",
            "-o",
            str(tmp),
            str(FRONTEND_SOURCE),
        ]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
        except OSError as exc:
            raise BuildError(f"compiler: cannot run {cc} ({exc.strerror})") from None
        if done.returncode != 0:
            lines = [ln for ln in done.stderr.splitlines() if "error" in ln] or [
                ln for ln in done.stderr.splitlines() if ln.strip()
            ]
            first = lines[0].strip() if lines else f"exit {done.returncode}"
            raise BuildError(f"compiler: {cc} failed on {FRONTEND_SOURCE.name}: {first}")

    _write_atomically(target, build)
    return Installed(
        path=target,
        kind="compiled",
        detail=f"ADD compiled by {cc}; other commands: {python} -I -S ({pypath}/cni_plugin)",
    )
