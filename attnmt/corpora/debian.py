"""Getting corpus sources from the Debian archive and PyPI with their ordinary clients.

Nothing here changes the system unless the user asked for it (``--install``): without it, a
missing tool is a one-line error that lists the Debian packages to install. With it, tools (the
SWORD reader, groff) are installed with ``apt-get install`` as root, after ``apt-get update`` if the
package lists are stale. Data packages for the domain corpora are fetched with ``apt-get download``
and unpacked privately with ``dpkg-deb -x`` (no system install, no maintainer scripts, and it works
on slim images whose dpkg config drops /usr/share/man and /usr/share/doc); apt keeps its sandbox:
downloads run as the unprivileged ``_apt`` user into a folder it may write. Python packages are
fetched with ``pip download --only-binary=:all:`` (wheels only: no build code of a source package
runs). Every failure a user can fix is a :class:`UserError`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from attnmt.errors import UserError

_ENV = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
_APT_OPTS = ["-q"]  # apt's own privilege drop (APT::Sandbox::User=_apt) stays on
_SANDBOX_USER = "_apt"


def _run(cmd: Sequence[str], cwd: str | Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), check=False, cwd=cwd, env=_ENV, capture_output=True, text=True)


def _last_line(proc: subprocess.CompletedProcess) -> str:
    lines = [x for x in (proc.stderr or proc.stdout or "").splitlines() if x.strip()]
    errs = [x for x in lines if x.startswith("E:")]
    return (errs or lines or ["no output"])[-1].strip()


def _need_tool(name: str, package: str) -> str:
    exe = shutil.which(name)
    if exe is None:
        raise UserError(f"{name} not found (Debian package {package}); this needs a Debian system")
    return exe


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def _with_update(cmd: list[str], what: str, cwd: str | Path | None = None, update: bool = False) -> None:
    """Run an apt command; if it fails (often: empty or stale package lists) and ``update`` (the
    user passed --install), run ``apt-get update`` once as root and retry."""
    proc = _run(cmd, cwd)
    if proc.returncode == 0:
        return
    if update and is_root():
        _run([_need_tool("apt-get", "apt"), *_APT_OPTS, "update"])
        proc = _run(cmd, cwd)
        if proc.returncode == 0:
            return
    stale = "" if update else " (if the package lists are stale: apt-get update, or pass --install)"
    raise UserError(f"{what} failed: {_last_line(proc)}{stale}")


def install_packages(packages: Sequence[str], why: str, install: bool = False) -> None:
    """``apt-get install`` the packages if the user asked for it (``install``, as root);
    otherwise a one-line error that lists them."""
    pkgs = sorted(set(packages))
    if not pkgs:
        return
    hint = "apt-get install " + " ".join(pkgs)
    if not install:
        raise UserError(f"{why} needs the Debian packages {', '.join(pkgs)}; install them "
                        f"(as root: {hint}) or pass --install")
    if not is_root():
        raise UserError(f"{why} needs Debian packages {', '.join(pkgs)}; as root run: {hint}")
    apt = _need_tool("apt-get", "apt")
    print(f"attnmt: installing {' '.join(pkgs)} (apt-get)", file=sys.stderr)
    _with_update([apt, *_APT_OPTS, "install", "-y", "--no-install-recommends", *pkgs], hint,
                 update=True)


def _download_dir(dest: Path) -> Path:
    """A fresh folder under ``dest`` that apt's unprivileged download user may write (so apt
    need not fall back to downloading as root)."""
    tmp = Path(tempfile.mkdtemp(prefix=".apt-download-", dir=dest))
    if is_root():
        try:
            shutil.chown(tmp, user=_SANDBOX_USER)
        except (LookupError, OSError):  # no _apt user (not Debian's apt): apt says so itself
            pass
    return tmp


def download_debs(packages: Sequence[str], dest: str | Path, update: bool = False) -> list[Path]:
    """``apt-get download`` the packages' .deb files into ``dest`` (kept as a cache: a package
    whose .deb is already there is not fetched again). Returns the .deb paths, in order.
    ``update``: the user passed --install, so stale package lists may be refreshed."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    missing = [p for p in packages if not list(dest.glob(f"{p}_*.deb"))]
    if missing:
        apt = _need_tool("apt-get", "apt")
        tmp = _download_dir(dest)
        try:
            _with_update([apt, *_APT_OPTS, "download", *missing], "apt-get download " + " ".join(missing),
                         tmp, update)
            for deb in tmp.glob("*.deb"):
                os.replace(deb, dest / deb.name)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    out = []
    for p in packages:
        debs = sorted(dest.glob(f"{p}_*.deb"))
        if not debs:
            raise UserError(f"apt-get download {p} gave no .deb", str(dest))
        out.append(debs[-1])
    return out


def extract_deb(deb: str | Path, root: str | Path) -> None:
    """Unpack a .deb's files under ``root`` (``dpkg-deb -x``; no scripts run)."""
    proc = _run([_need_tool("dpkg-deb", "dpkg"), "-x", str(deb), str(root)])
    if proc.returncode != 0:
        raise UserError(f"dpkg-deb -x failed: {_last_line(proc)}", str(deb))


def deb_version(deb: str | Path) -> str:
    """``pkg_1.2-3_all.deb`` -> ``1.2-3`` (apt-get download names files this way; %3a = ':')."""
    parts = Path(deb).name.split("_")
    return parts[1].replace("%3a", ":") if len(parts) >= 3 else "?"


def python_doc_package() -> str:
    """The versioned Python documentation package of this Debian release (python3.N-doc), as
    python3-doc depends on it; falls back to the running interpreter's version."""
    cache = shutil.which("apt-cache")
    if cache:
        proc = _run([cache, "depends", "python3-doc"])
        m = re.search(r"Depends: (python3\.\d+-doc)\b", proc.stdout or "")
        if m:
            return m[1]
    return f"python3.{sys.version_info[1]}-doc"


def pip_download(requirement: str, dest: str | Path) -> Path:
    """``pip download --no-deps --only-binary=:all:`` one wheel into ``dest`` (cached; a source
    package is refused, so none of its build code runs); returns the wheel path."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    name = re.split(r"[=<>!~\[ ]", requirement, maxsplit=1)[0].replace("-", "_").lower()
    version = requirement.split("==", 1)[1] if "==" in requirement else ""

    def found() -> list[Path]:
        return sorted(
            p for p in dest.glob("*.whl")
            if p.name.lower().startswith(f"{name}-{version}")
        )

    if not found():
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
               "-d", str(dest), requirement]
        proc = _run(cmd)
        if proc.returncode != 0:
            raise UserError(f"pip download {requirement} failed: {_last_line(proc)}")
    wheels = found()
    if not wheels:
        raise UserError(f"pip download {requirement} gave no wheel", str(dest))
    return wheels[-1]
