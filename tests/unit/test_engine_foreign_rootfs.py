"""Finishing another architecture's root filesystem on the host: what dpkg's database and the postinst scripts
would hold, derived from the packages' own control data. The end-to-end proof (the arm64 image runs, apt and
dpkg accept it) is tests/engine/test_arm64.py; these pin the pieces that decide it."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.engine.base import EngineUnavailable
from builder.engine.foreign_rootfs import (
    Package,
    _shells,
    alternatives,
    conffile_paths,
    finish_second_stage,
    not_repeated,
    control_fields,
    list_entry,
    shadow_line,
    status_entry,
    trigger_interests,
)

CONTROL = """Package: libc-bin
Source: glibc
Version: 2.36-9+deb12u14
Architecture: arm64
Essential: yes
Maintainer: GNU Libc Maintainers <debian-glibc@lists.debian.org>
Installed-Size: 2303
Depends: libc6 (>> 2.36), libc6 (<< 2.37)
Section: libs
Priority: required
Multi-Arch: foreign
Homepage: https://www.gnu.org/software/libc/libc.html
Description: GNU C Library: Binaries
 This package contains utility programs related to the GNU C Library.
"""


def test_a_status_entry_is_installed_in_dpkgs_field_order_with_its_conffiles() -> None:
    entry = status_entry(CONTROL, [("/etc/ld.so.conf", "4317c6de8564b68d628c21efa96b37e4")])
    names = [line.partition(":")[0] for line in entry.splitlines() if not line.startswith(" ")]
    assert names == ["Package", "Essential", "Status", "Priority", "Section", "Installed-Size", "Maintainer",
                     "Architecture", "Multi-Arch", "Source", "Version", "Depends", "Conffiles", "Description",
                     "Homepage"]
    assert "Status: install ok installed\n" in entry
    assert "Conffiles:\n /etc/ld.so.conf 4317c6de8564b68d628c21efa96b37e4\nDescription: GNU C Library: Binaries\n" \
        " This package contains" in entry
    assert entry.endswith("libc.html\n")


def test_a_package_without_conffiles_has_no_conffiles_field() -> None:
    assert "Conffiles" not in status_entry(CONTROL, [])


def test_multi_arch_same_packages_are_filed_under_their_architecture() -> None:
    same = CONTROL.replace("Multi-Arch: foreign", "Multi-Arch: same").replace("libc-bin", "libc6")
    assert Package("libc6", Path("x.deb"), same, {}).info_name == "libc6:arm64"
    assert Package("libc-bin", Path("x.deb"), CONTROL, {}).info_name == "libc-bin"
    assert control_fields(CONTROL)["Version"] == "2.36-9+deb12u14"


def test_file_lists_name_paths_as_dpkg_does() -> None:
    assert [list_entry(m) for m in ("./", "./usr/", "./usr/bin/bash", "./bin/")] == ["/.", "/usr", "/usr/bin/bash", "/bin"]


def test_conffiles_flagged_remove_on_upgrade_are_not_installed() -> None:
    assert conffile_paths("/etc/a.conf\nremove-on-upgrade /etc/old.conf\n\n/etc/b.conf\n") == ["/etc/a.conf", "/etc/b.conf"]


def test_alternatives_are_read_from_continued_lines() -> None:
    postinst = """#!/bin/sh
set -e
if [ "$1" = "configure" ]; then
        update-alternatives --install /usr/bin/awk awk /usr/bin/mawk 5 \\
            --slave /usr/bin/nawk nawk /usr/bin/mawk
fi
update-alternatives --install \\
     /usr/share/man/man7/builtins.7.gz \\
     builtins.7.gz \\
     /usr/share/man/man7/bash-builtins.7.gz \\
     10 \\
   || true
"""
    assert alternatives(postinst) == [
        ["--install", "/usr/bin/awk", "awk", "/usr/bin/mawk", "5", "--slave", "/usr/bin/nawk", "nawk", "/usr/bin/mawk"],
        ["--install", "/usr/share/man/man7/builtins.7.gz", "builtins.7.gz", "/usr/share/man/man7/bash-builtins.7.gz", "10"],
    ]
    assert alternatives("#!/bin/sh\nexit 0\n") == []


def test_an_alternative_built_from_shell_variables_is_refused_not_guessed() -> None:
    with pytest.raises(EngineUnavailable, match="cannot repeat on the host"):
        alternatives('update-alternatives --install /usr/bin/x x "$DIR/x" 10\n')


def test_trigger_interests_keep_their_await_mode() -> None:
    assert trigger_interests("interest-noawait ldconfig\n# note\ninterest /usr/share/x\nactivate-noawait y\n") == [
        ("ldconfig", True), ("/usr/share/x", False)]


def test_shadowed_accounts_are_locked_with_debians_password_ages() -> None:
    assert shadow_line("root:*:0:0:root:/root:/bin/bash", 20786) == "root:*:20786:0:99999:7:::"
    assert shadow_line("_apt:x:42:65534::/nonexistent:/usr/sbin/nologin", 1) == "_apt:*:1:0:99999:7:::"


def test_shells_are_listed_under_both_paths_of_a_merged_usr(tmp_path: Path) -> None:
    (tmp_path / "usr/bin").mkdir(parents=True)
    (tmp_path / "bin").symlink_to("usr/bin")
    (tmp_path / "etc").mkdir()
    (tmp_path / "var/lib").mkdir(parents=True)
    shared = tmp_path / "usr/share/debianutils"
    (shared / "shells.d").mkdir(parents=True)
    (shared / "shells").write_text("# /etc/shells: valid login shells\n/bin/sh\n")
    (shared / "shells.d" / "dash").write_text("/bin/dash\n")
    (shared / "shells.d" / "bash").write_text("/bin/bash\n/bin/rbash\n")
    _shells(tmp_path)
    assert (tmp_path / "etc/shells").read_text().splitlines() == [
        "# /etc/shells: valid login shells", "/bin/sh", "/usr/bin/sh", "/bin/bash", "/usr/bin/bash",
        "/bin/rbash", "/usr/bin/rbash", "/bin/dash", "/usr/bin/dash"]
    assert (tmp_path / "var/lib/shells.state").read_text().startswith("/bin/sh\n/usr/bin/sh\n/bin/bash\n")


def test_a_package_whose_scripts_were_not_read_is_named_not_configured() -> None:
    scripted = Package("newpkg", Path("newpkg.deb"), CONTROL.replace("libc-bin", "newpkg"), {"postinst": b"#!/bin/sh\n"})
    quiet = Package("libzstd1", Path("z.deb"), CONTROL.replace("libc-bin", "libzstd1"), {"md5sums": b""})
    known = Package("dash", Path("dash.deb"), CONTROL.replace("libc-bin", "dash"), {"postinst": b"#!/bin/sh\n"})
    assert not_repeated([scripted, quiet, known]) == ["newpkg"]
    with pytest.raises(EngineUnavailable, match="maintainer scripts of newpkg are not repeated"):
        finish_second_stage(Path("/nonexistent"), [scripted])
