"""scripts/install_system.sh decides with stand-ins for dpkg-query, apt-get, sudo and id on PATH:
it installs only what is missing, as root or with password-less sudo, and otherwise says what
it would install and exits 0 without ever asking for a password."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "install_system.sh"
BASH = shutil.which("bash")

# Every stand-in appends its command line to calls.txt.
DPKG_QUERY = """#!{bash}
echo "dpkg-query $*" >> "$CALLS"
pkg=${{@: -1}}
for p in $INSTALLED; do [[ $p == "$pkg" ]] && {{ printf 'install ok installed'; exit 0; }}; done
[[ $pkg == removed-pkg ]] && {{ printf 'deinstall ok config-files'; exit 0; }}
exit 1
"""
APT_GET = '#!{bash}\necho "apt-get $*" >> "$CALLS"\n'
ID = '#!{bash}\necho "$UID_FAKE"\n'
# sudo: -n fails unless password-less sudo is on; with it, runs the command.
SUDO = """#!{bash}
echo "sudo $*" >> "$CALLS"
[[ $1 == -n ]] || {{ echo "sudo: a password is required" >&2; exit 1; }}
[[ $SUDO_OK == 1 ]] || {{ echo "sudo: a password is required" >&2; exit 1; }}
shift; "$@"
"""


def run(tmp_path: Path, *, uid: int, installed: str = "", sudo: bool | None = None):
    """Run the script with a PATH holding only the stand-ins (sudo: None = no sudo at all)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    tools = {"dpkg-query": DPKG_QUERY, "apt-get": APT_GET, "id": ID}
    if sudo is not None:
        tools["sudo"] = SUDO
    for name, text in tools.items():
        (bin_dir / name).write_text(text.format(bash=BASH))
        (bin_dir / name).chmod(0o755)
    for tool in ("true", "env"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    calls = tmp_path / "calls.txt"
    calls.write_text("")
    env = {
        "PATH": str(bin_dir),
        "CALLS": str(calls),
        "INSTALLED": installed,
        "UID_FAKE": str(uid),
        "SUDO_OK": "1" if sudo else "0",
    }
    done = subprocess.run([BASH, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)
    return done, calls.read_text().splitlines()


ALL = (
    "sctk g++ make cmake libboost-program-options-dev libboost-system-dev libboost-thread-dev libboost-test-dev "
    "zlib1g-dev libbz2-dev liblzma-dev iproute2"
)


def installs(calls: list[str]) -> list[str]:
    return [c for c in calls if c.startswith("apt-get install")]


def test_nothing_missing_installs_nothing(tmp_path):
    done, calls = run(tmp_path, uid=1000, installed=ALL, sudo=False)
    assert done.returncode == 0 and done.stderr == ""
    assert not [c for c in calls if not c.startswith("dpkg-query")]


def test_root_installs_only_the_missing_packages(tmp_path):
    done, calls = run(tmp_path, uid=0, installed=ALL.replace("sctk ", "").replace(" iproute2", ""))
    assert done.returncode == 0
    assert installs(calls) == ["apt-get install -y -qq --no-install-recommends sctk iproute2"]
    assert not [c for c in calls if c.startswith("sudo")]


def test_a_package_removed_but_not_purged_counts_as_missing(tmp_path):
    done, calls = run(tmp_path, uid=0, installed=ALL.replace("sctk", "removed-pkg"))
    assert installs(calls) == ["apt-get install -y -qq --no-install-recommends sctk"]


def test_password_less_sudo_installs_with_sudo_n(tmp_path):
    done, calls = run(tmp_path, uid=1000, installed=ALL.replace("sctk ", ""), sudo=True)
    assert done.returncode == 0
    assert "sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends sctk" in calls
    assert installs(calls) == ["apt-get install -y -qq --no-install-recommends sctk"]


def test_sudo_that_wants_a_password_says_what_it_would_install_and_goes_on(tmp_path):
    done, calls = run(tmp_path, uid=1000, installed=ALL.replace("sctk ", ""), sudo=False)
    assert done.returncode == 0
    assert not installs(calls) and not [c for c in calls if c.startswith("apt-get")]
    assert all(c.startswith(("dpkg-query", "sudo -n")) for c in calls)  # never a sudo that could prompt
    assert "Missing: sctk" in done.stderr and "sudo apt-get install -y --no-install-recommends sctk" in done.stderr


def test_no_sudo_at_all_says_what_it_would_install(tmp_path):
    done, calls = run(tmp_path, uid=1000, installed=ALL.replace(" iproute2", ""), sudo=None)
    assert done.returncode == 0 and not installs(calls)
    assert "Missing: iproute2" in done.stderr


def test_not_debian_names_the_packages_and_exits_0(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "id").write_text(ID.format(bash=BASH))
    (bin_dir / "id").chmod(0o755)
    done = subprocess.run(
        [BASH, str(SCRIPT)], env={"PATH": str(bin_dir), "UID_FAKE": "1000"}, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and "not a Debian system" in done.stderr and "sctk" in done.stderr
