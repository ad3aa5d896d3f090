"""Finish another architecture's Debian root filesystem on the host, without running any of its programs.

`debootstrap --foreign` (the first stage) needs nothing of the target architecture: it downloads every package
and unpacks the essential ones. Its second stage runs the target's own dpkg and maintainer scripts inside the
root filesystem, which on an x86 host means all of them under QEMU: the arm64 Python base (minbase + python3,
python3-venv, ca-certificates) took 188 s that way, against 31 s finished here (both cold, downloads
included). What those scripts leave behind for such a system is small and does not depend on the
architecture: the remaining packages unpacked, all of them recorded in dpkg's database (so dpkg and apt in the
image, and every image built on it, see a normally installed system and can install more), and the files the
postinst scripts create: accounts, /bin/sh, alternatives, /etc/shells, PAM's common-* files, the CA bundle,
/usr/local, the byte-compiled standard library. `finish_second_stage` does that with the host's tools (tar,
dpkg-deb, update-alternatives, pam-auth-update, openssl), writing only inside the root filesystem; the one
program of the image it runs, emulated, is the static `ldconfig` (the host's skips foreign libraries).

Compared file by file with the emulated second stage's result, what differs is what needs an init system or
only records history: systemd units and the hwclock init script are not enabled (nothing starts them in a
container), dpkg's `available` is empty and its *-old backups and locks are absent.

Pure parts (reading control data, parsing scripts) are separate functions; the writes are at the edges.
"""

from __future__ import annotations

import compileall
import hashlib
import io
import os
import py_compile
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from builder.engine.base import EngineUnavailable

#: The files dpkg keeps for each installed package beside its file list (all control members but `control`).
INFO_MEMBERS = ("conffiles", "config", "md5sums", "postinst", "postrm", "preinst", "prerm", "shlibs",
                "symbols", "templates", "triggers")
#: Packages whose maintainer scripts' first-install effects `finish_second_stage` repeats, each script read
#: (Debian bookworm's minbase with python3, python3-venv, ca-certificates). Scripts of any other package are
#: not guessed at: `not_repeated` names it, and the second stage then runs as debootstrap runs it.
SCRIPTS_REPEATED = frozenset({
    "adduser", "apt", "base-files", "base-passwd", "bash", "ca-certificates", "coreutils", "dash", "debconf",
    "debian-archive-keyring", "debianutils", "dpkg", "e2fsprogs", "init-system-helpers", "libc-bin", "libc6",
    "libgcrypt20", "libgssapi-krb5-2", "libpam-modules", "libpam-runtime", "libpam0g", "libpython3.11-minimal",
    "login", "mawk", "openssl", "passwd", "perl-base", "python3", "python3-distutils", "python3-lib2to3",
    "python3-minimal", "python3.11", "python3.11-minimal", "python3.11-venv", "readline-common", "tar", "tzdata",
    "usr-is-merged", "util-linux", "util-linux-extra",
})
#: The order dpkg writes a status paragraph's fields in (lib/dpkg/parse.c); other fields follow, as shipped.
STATUS_ORDER = ("Package", "Essential", "Protected", "Status", "Priority", "Section", "Installed-Size", "Origin",
                "Maintainer", "Bugs", "Architecture", "Multi-Arch", "Source", "Version", "Config-Version",
                "Replaces", "Provides", "Depends", "Pre-Depends", "Recommends", "Suggests", "Breaks", "Conflicts",
                "Enhances", "Conffiles", "Description")
#: The time zone debootstrap and tzdata's postinst give a non-interactive install.
TIMEZONE = "Etc/UTC"


@dataclass(frozen=True)
class Package:
    """One downloaded .deb: its control paragraph and the name dpkg files its database entries under."""

    name: str
    deb: Path
    control: str  # the control file as shipped, fields in order, no trailing blank line
    members: dict[str, bytes]  # the other control members (md5sums, conffiles, postinst, ...)

    @property
    def info_name(self) -> str:
        """`libc6:arm64` for Multi-Arch: same packages (several architectures can be installed), else `bash`."""
        fields = control_fields(self.control)
        if fields.get("Multi-Arch") == "same":
            return f"{self.name}:{fields['Architecture']}"
        return self.name


def control_fields(control: str) -> dict[str, str]:
    """The first line of each field of a control paragraph (`Package`, `Version`, ...)."""
    fields: dict[str, str] = {}
    for line in control.splitlines():
        if line and not line[0].isspace() and ":" in line:
            name, _, value = line.partition(":")
            fields[name] = value.strip()
    return fields


def status_entry(control: str, conffiles: Sequence[tuple[str, str]]) -> str:
    """dpkg's status paragraph of an installed package: its control fields plus `Status: install ok installed`
    and the conffiles with the md5sum of each file as installed (how dpkg later tells a conffile the user
    edited from one it may replace), in the order dpkg writes fields (others after, as shipped)."""
    fields: list[tuple[str, str]] = []
    for line in control.rstrip("\n").splitlines():
        if line[:1].isspace() and fields:
            fields[-1] = (fields[-1][0], f"{fields[-1][1]}\n{line}")
        else:
            fields.append((line.partition(":")[0], line))
    fields.append(("Status", "Status: install ok installed"))
    if conffiles:
        fields.append(("Conffiles", "\n".join(["Conffiles:", *(f" {path} {md5}" for path, md5 in conffiles)])))
    rank = {name: i for i, name in enumerate(STATUS_ORDER)}
    fields.sort(key=lambda field: rank.get(field[0], len(rank)))  # stable: unknown fields keep their order
    return "".join(f"{text}\n" for _, text in fields)


def conffile_paths(conffiles: str) -> list[str]:
    """The paths a `conffiles` member lists, less those flagged `remove-on-upgrade` (never installed)."""
    paths = []
    for line in conffiles.splitlines():
        words = line.split()
        if words and "remove-on-upgrade" not in words[:-1]:
            paths.append(words[-1])
    return paths


def list_entry(member: str) -> str:
    """A tar member (`./usr/bin/`, `./usr/bin/bash`) as dpkg lists it (`/usr/bin`, `/usr/bin/bash`; `/.`)."""
    path = member.removeprefix(".").rstrip("/")
    return path or "/."


def alternatives(postinst: str) -> list[list[str]]:
    """The arguments of each `update-alternatives --install` in a postinst (continued lines joined), for the
    host's update-alternatives to repeat with `--root`. Only literal words are taken: a line with a shell
    expansion is an error, so a script this does not understand is never half-applied."""
    joined = re.sub(r"\\\n", " ", postinst)
    found = []
    for line in joined.splitlines():
        words = line.split("||")[0].split("&&")[0]
        if "update-alternatives --install" not in words:
            continue
        if "$" in words or "`" in words:
            raise EngineUnavailable(f"cannot repeat on the host: {words.strip()}")
        argv = shlex.split(words)
        found.append(argv[argv.index("--install"):])
    return found


def trigger_interests(triggers: str) -> list[tuple[str, bool]]:
    """(trigger, no-await) for each `interest` line of a package's `triggers` member."""
    interests = []
    for line in triggers.splitlines():
        words = line.split("#")[0].split()
        if len(words) == 2 and words[0] in ("interest", "interest-await", "interest-noawait"):
            interests.append((words[1], words[0] == "interest-noawait"))
    return interests


def shadow_line(passwd_line: str, days: int) -> str:
    """The /etc/shadow line pwconv writes for a new account (login.defs: 0/99999/7 days), password locked."""
    name, password = passwd_line.split(":")[:2]
    return f"{name}:{password if password not in ('', 'x') else '*'}:{days}:0:99999:7:::"


def read_package(deb: Path) -> Package:
    """Control paragraph and members of one .deb, through `dpkg-deb --ctrl-tarfile`."""
    raw = _run(["dpkg-deb", "--ctrl-tarfile", str(deb)], f"dpkg-deb --ctrl-tarfile {deb.name}").stdout
    members: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        for info in tar:
            handle = tar.extractfile(info) if info.isfile() else None
            if handle is not None:
                members[info.name.removeprefix("./")] = handle.read()
    control = members.pop("control").decode("utf-8")
    return Package(control_fields(control)["Package"], deb, control, members)


def not_repeated(packages: Iterable[Package]) -> list[str]:
    """The packages with maintainer scripts `finish_second_stage` does not repeat (see SCRIPTS_REPEATED)."""
    return [package.name for package in packages if package.name not in SCRIPTS_REPEATED
            and any(script in package.members for script in ("preinst", "postinst"))]


def first_stage_packages(rootfs: Path) -> list[Package]:
    """Every package a `debootstrap --foreign` first stage downloaded into `rootfs`, required ones first."""
    stage = rootfs / "debootstrap"
    paths = dict(line.split(" ", 1) for line in (stage / "debpaths").read_text().splitlines() if line)
    required = (stage / "required").read_text().split()
    base = (stage / "base").read_text().split()
    return [read_package(rootfs / paths[name].lstrip("/")) for name in dict.fromkeys(required + base)]


def finish_second_stage(rootfs: Path, packages: Sequence[Package]) -> None:
    """Do on the host what `debootstrap --second-stage` does in `rootfs` (a `debootstrap --foreign` first
    stage of a minbase Debian whose `packages` are all in SCRIPTS_REPEATED or have no scripts): unpack the
    rest, write dpkg's database, create what the postinst scripts create, byte-compile Python when the host's
    Python is the image's version, then drop /debootstrap."""
    unknown = not_repeated(packages)
    if unknown:
        raise EngineUnavailable(f"maintainer scripts of {', '.join(unknown)} are not repeated on the host")
    stage = rootfs / "debootstrap"
    files: dict[str, list[str]] = {}
    for package in packages:
        # the first stage unpacked `required` already; unpacking again lists every package's files alike
        files[package.name] = _unpack(package.deb, rootfs)
    _write_database(rootfs, packages, files)
    _configure(rootfs, packages)
    _byte_compile(rootfs)
    shutil.rmtree(stage)


def _unpack(deb: Path, rootfs: Path) -> list[str]:
    """Unpack one .deb as debootstrap's first stage does (bin, lib, sbin stay links into /usr) and return
    its members, in order, as dpkg lists them."""
    with subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE) as data:
        untar = subprocess.run(["tar", "-C", str(rootfs), "--keep-directory-symlink", "-xvf", "-"],
                               stdin=data.stdout, capture_output=True, text=True, check=False)
    if data.returncode != 0 or untar.returncode != 0:
        raise EngineUnavailable(f"unpacking {deb.name} failed: {untar.stderr.strip()[-300:]}")
    return [list_entry(member) for member in untar.stdout.splitlines() if member]


def _write_database(rootfs: Path, packages: Sequence[Package], files: dict[str, list[str]]) -> None:
    """/var/lib/dpkg as dpkg leaves it after installing `packages`: status, info/<package>.{list,md5sums,
    conffiles,postinst,...}, and the trigger interests (which package a later ldconfig or CA trigger runs)."""
    admin = rootfs / "var/lib/dpkg"
    info = admin / "info"
    (admin / "triggers").mkdir(parents=True, exist_ok=True)
    info.mkdir(parents=True, exist_ok=True)
    for directory in ("updates", "alternatives", "parts"):
        (admin / directory).mkdir(exist_ok=True)
    entries: list[tuple[str, str]] = []
    file_triggers: list[str] = []
    named_triggers: dict[str, list[str]] = {}
    for package in packages:
        conffiles = [(path, _md5(rootfs / path.lstrip("/")))
                     for path in conffile_paths(package.members.get("conffiles", b"").decode())]
        entries.append((package.info_name, status_entry(package.control, conffiles)))
        (info / f"{package.info_name}.list").write_text("".join(f"{path}\n" for path in files[package.name]))
        for member, data in package.members.items():
            if member in INFO_MEMBERS:
                target = info / f"{package.info_name}.{member}"
                target.write_bytes(data)
                target.chmod(0o755 if member in ("config", "postinst", "postrm", "preinst", "prerm") else 0o644)
        for trigger, noawait in trigger_interests(package.members.get("triggers", b"").decode()):
            who = package.info_name + ("/noawait" if noawait else "")
            if trigger.startswith("/"):
                file_triggers.append(f"{trigger} {who}\n")
            else:
                named_triggers.setdefault(trigger, []).append(f"{who}\n")
    (admin / "status").write_text("\n".join(entry for _, entry in sorted(entries)))
    (admin / "triggers" / "File").write_text("".join(file_triggers))
    (admin / "triggers" / "Unincorp").write_text("")
    for trigger, interested in named_triggers.items():
        (admin / "triggers" / trigger).write_text("".join(interested))
    for name in ("available", "diversions"):
        (admin / name).touch()
    (admin / "cmethopt").write_text("apt apt\n")
    (info / "format").write_text("1\n")


def _configure(rootfs: Path, packages: Sequence[Package]) -> None:
    """What the postinst scripts of a minbase system with Python create, in Python or with the host's own
    arch-independent tools pointed at `rootfs`."""
    names = {package.name for package in packages}
    _accounts(rootfs)
    _base_files(rootfs)
    _shells(rootfs)
    for package in packages:
        for argv in alternatives(package.members.get("postinst", b"").decode()):
            _run(["update-alternatives", "--quiet", "--root", str(rootfs), *argv],
                 f"update-alternatives for {package.name}")
    _bin_sh(rootfs)
    _copy_default(rootfs, "usr/share/libc-bin/nsswitch.conf", "etc/nsswitch.conf")
    _copy_default(rootfs, "usr/share/readline/inputrc", "etc/inputrc")
    for path, mode in (("etc/security/opasswd", 0o600), ("etc/environment", 0o644), ("var/log/faillog", 0o644),
                       ("etc/subuid", 0o644), ("etc/subgid", 0o644)):
        _touch(rootfs / path, mode)
    if "libpam-runtime" in names:
        # --force as on a first install: there are no common-* files to keep
        _run(["pam-auth-update", "--root", str(rootfs), "--package", "--force"], "pam-auth-update")
    if "tzdata" in names:
        (rootfs / "etc/timezone").write_text(f"{TIMEZONE}\n")
        _symlink(f"/usr/share/zoneinfo/{TIMEZONE}", rootfs / "etc/localtime")
    if "ca-certificates" in names:
        _ca_certificates(rootfs)
    for version in _python_versions(rootfs):
        (rootfs / f"usr/local/lib/{version}/dist-packages").mkdir(parents=True, exist_ok=True)
        _touch(rootfs / f"var/lib/python/{version}_installed", 0o644)  # python3.X-minimal's preinst
    if "python3" in names and not (rootfs / "etc/python3/debian_config").exists():
        (rootfs / "etc/python3").mkdir(exist_ok=True)
        (rootfs / "etc/python3/debian_config").write_text(
            "[DEFAULT]\n# how to byte-compile (comma separated: standard, optimize)\nbyte-compile = standard\n")
    if (rootfs / "proc").is_symlink():  # the first stage's stand-in; the container runtime mounts /proc
        (rootfs / "proc").unlink()
        (rootfs / "proc").mkdir()
        (rootfs / "proc").chmod(0o755)
    # The one program of the image run: the host's ldconfig skips another architecture's libraries, and the
    # cache is what `ldconfig -p` (Python's ctypes.util.find_library) reads. Static, about a second emulated.
    _run([str(rootfs / "sbin/ldconfig"), "-r", str(rootfs)], "ldconfig of the image")


def _accounts(rootfs: Path) -> None:
    """base-passwd's accounts (passwd, group), shadowed as `shadowconfig on` (passwd's postinst) does."""
    days = int(time.time() // 86400)
    shared = rootfs / "usr/share/base-passwd"
    passwd = [line for line in (shared / "passwd.master").read_text().splitlines() if line]
    group = [line for line in (shared / "group.master").read_text().splitlines() if line]
    shadow_gid = next(int(line.split(":")[2]) for line in group if line.startswith("shadow:"))
    etc = rootfs / "etc"
    (etc / "passwd").write_text("".join(f"{_hide(line)}\n" for line in passwd))
    (etc / "group").write_text("".join(f"{_hide(line)}\n" for line in group))
    for name, text in (("shadow", "".join(f"{shadow_line(line, days)}\n" for line in passwd)),
                       ("gshadow", "".join(f"{line.split(':')[0]}:*::{line.split(':')[3]}\n" for line in group))):
        (etc / name).write_text(text)
        os.chown(etc / name, 0, shadow_gid)
        (etc / name).chmod(0o640)
    for name in ("passwd", "group"):
        (etc / name).chmod(0o644)


def _hide(line: str) -> str:
    fields = line.split(":")
    fields[1] = "x"
    return ":".join(fields)


def _base_files(rootfs: Path) -> None:
    """base-files' postinst on a first install: default dot files, the /usr/local tree, /var/run -> /run."""
    utmp = _gid(rootfs, "utmp")
    mail = _gid(rootfs, "mail")
    if not (rootfs / "etc/dpkg/origins/default").exists() and (rootfs / "etc/dpkg/origins/debian").exists():
        _symlink("debian", rootfs / "etc/dpkg/origins/default")
    for source, target in (("dot.profile", "root/.profile"), ("dot.bashrc", "root/.bashrc"),
                           ("profile", "etc/profile"), ("motd", "etc/motd"), ("info.dir", "usr/share/info/dir")):
        _copy_default(rootfs, f"usr/share/base-files/{source}", target)
    for directory, mode, gid in (("mnt", 0o755, 0), ("srv", 0o755, 0), ("opt", 0o755, 0), ("etc/opt", 0o755, 0),
                                 ("var/opt", 0o755, 0), ("media", 0o755, 0), ("var/mail", 0o2775, mail),
                                 ("run/lock", 0o1777, 0)):
        path = rootfs / directory
        if not path.is_dir():
            path.mkdir()
            os.chown(path, 0, gid)
            path.chmod(mode)
    if not (rootfs / "var/spool/mail").is_symlink():
        _symlink("../mail", rootfs / "var/spool/mail")
    for directory, target in (("var/run", "/run"), ("var/lock", "/run/lock")):
        if not (rootfs / directory).is_symlink():
            (rootfs / directory).rmdir()
            _symlink(target, rootfs / directory)
    for sub in ("", "share", "share/man", "bin", "games", "lib", "include", "sbin", "src", "etc"):
        (rootfs / "usr/local" / sub).mkdir(parents=True, exist_ok=True)
    _symlink("share/man", rootfs / "usr/local/man")
    for log, mode in (("wtmp", 0o664), ("btmp", 0o660), ("lastlog", 0o664)):
        _touch(rootfs / "var/log" / log, mode, gid=utmp)


def _shells(rootfs: Path) -> None:
    """/etc/shells as debianutils' update-shells writes it: the template, then each shell packages declare,
    each also under its real path (/bin/bash and /usr/bin/bash on a merged-/usr system)."""
    shared = rootfs / "usr/share/debianutils"
    template = (shared / "shells").read_text()
    shells: list[str] = []
    for source in [shared / "shells", *sorted((shared / "shells.d").glob("*"))]:
        for line in source.read_text().splitlines():
            shell = line.split("#")[0].strip()
            if not shell:
                continue
            real = str(Path("/") / Path(os.path.realpath(rootfs / shell.lstrip("/"))).parent.relative_to(
                os.path.realpath(rootfs)) / Path(shell).name)
            shells.extend(s for s in (shell, real) if s not in shells)
    known = set(template.splitlines())
    (rootfs / "etc/shells").write_text(template + "".join(f"{s}\n" for s in shells if s not in known))
    (rootfs / "var/lib/shells.state").write_text("".join(f"{s}\n" for s in shells))


def _bin_sh(rootfs: Path) -> None:
    """dash's postinst on a first install: /bin/sh (and sh.1) are dash, the originals diverted to .distrib."""
    diversions = []
    for link, target, distrib in (("/usr/share/man/man1/sh.1.gz", "dash.1.gz", "/usr/share/man/man1/sh.distrib.1.gz"),
                                  ("/bin/sh", "dash", "/bin/sh.distrib")):
        if link == "/bin/sh" or (rootfs / "usr/share/man/man1").is_dir():
            _symlink(target, rootfs / link.lstrip("/"))
            diversions += [link, distrib, "dash"]
    (rootfs / "var/lib/dpkg/diversions").write_text("".join(f"{line}\n" for line in diversions))


def _ca_certificates(rootfs: Path) -> None:
    """ca-certificates' postinst: every shipped CA trusted (/etc/ca-certificates.conf), linked into
    /etc/ssl/certs, concatenated into ca-certificates.crt, and hashed for OpenSSL's lookup by subject (the
    host's `openssl rehash`, run on links to the image's files)."""
    shared = rootfs / "usr/share/ca-certificates"
    certs = sorted(str(path.relative_to(shared)) for path in shared.rglob("*.crt"))
    (rootfs / "etc/ca-certificates.conf").write_text(
        "# This file lists certificates that you wish to use or to ignore to be\n"
        "# installed in /etc/ssl/certs.\n"
        "# update-ca-certificates(8) will update /etc/ssl/certs by reading this file.\n#\n"
        "# This is autogenerated by dpkg-reconfigure ca-certificates.\n"
        "# Certificates should be installed under /usr/share/ca-certificates\n"
        "# and files with extension '.crt' is recognized as available certs.\n#\n"
        "# line begins with # is comment.\n"
        "# line begins with ! is certificate filename to be deselected.\n#\n"
        + "".join(f"{cert}\n" for cert in certs)
    )
    local = rootfs / "usr/local/share/ca-certificates"
    local.mkdir(parents=True, exist_ok=True)
    certs_dir = rootfs / "etc/ssl/certs"
    certs_dir.mkdir(parents=True, exist_ok=True)
    bundle = []
    with tempfile.TemporaryDirectory(prefix="tfsmith-certs-") as tmp:
        for cert in certs:
            pem = Path(cert).stem.replace(" ", "_").replace("(", "=").replace(")", "=").replace(",", "_") + ".pem"
            _symlink(f"/usr/share/ca-certificates/{cert}", certs_dir / pem)
            (Path(tmp) / pem).symlink_to(shared / cert)
            text = (shared / cert).read_text()
            bundle.append(text if text.endswith("\n") else text + "\n")
        _run(["openssl", "rehash", tmp], "openssl rehash")
        for link in sorted(Path(tmp).iterdir()):
            if link.is_symlink() and not os.readlink(link).startswith("/"):
                _symlink(os.readlink(link), certs_dir / link.name)
    (certs_dir / "ca-certificates.crt").write_text("".join(bundle))


def _python_versions(rootfs: Path) -> list[str]:
    return sorted(path.name for path in (rootfs / "usr/lib").glob("python3.*")
                  if (path / "os.py").exists())


def _byte_compile(rootfs: Path) -> None:
    """Byte-compile the image's standard library as the python3.11 postinst scripts do, with the host's
    Python when it is the same version (bytecode does not depend on the architecture); otherwise leave it:
    Python compiles what it imports on first use."""
    here = f"python{sys.version_info.major}.{sys.version_info.minor}"
    if here not in _python_versions(rootfs):
        return
    for directory in (rootfs / "usr/lib" / here, rootfs / "usr/share/python3"):
        if directory.is_dir():
            compileall.compile_dir(directory, quiet=2, stripdir=str(rootfs), prependdir="/",
                                   invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP,
                                   rx=re.compile(r"/(lib2to3/tests/data|test/bad)"))


def _copy_default(rootfs: Path, source: str, target: str) -> None:
    """`cp -p` a default file into place unless there is one (as postinst scripts install defaults)."""
    if (rootfs / source).exists() and not (rootfs / target).exists():
        shutil.copy2(rootfs / source, rootfs / target)


def _touch(path: Path, mode: int, gid: int = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(exist_ok=True)
    os.chown(path, 0, gid)
    path.chmod(mode)


def _symlink(target: str, link: Path) -> None:
    """`ln -sf target link`, never following an existing link."""
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(target)


def _gid(rootfs: Path, name: str) -> int:
    for line in (rootfs / "etc/group").read_text().splitlines():
        fields = line.split(":")
        if fields[0] == name:
            return int(fields[2])
    raise EngineUnavailable(f"no group {name} in {rootfs / 'etc/group'}")


def _md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest() if path.is_file() else "newconffile"


def _run(argv: Iterable[str], what: str) -> subprocess.CompletedProcess[bytes]:
    result = subprocess.run(list(argv), capture_output=True, check=False)
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).decode("utf-8", "replace").strip().splitlines()[-1:]
        raise EngineUnavailable(f"{what} failed: {' '.join(tail) or f'exit {result.returncode}'}")
    return result
