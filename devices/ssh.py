"""The `ssh` runner: the agent on a board or server reached with OpenSSH.

Host keys are verified against the spec's known_hosts file
(StrictHostKeyChecking=yes): an unknown or changed key stops the run instead of
being trusted on first use. BatchMode forbids password prompts, so CI never
hangs. Commands are argv lists; what reaches the remote shell is quoted here and
holds only this module's own names under a `mktemp -d` folder.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path, PurePosixPath

from pydantic import Field

from edgekd.devices.base import DeviceSpec, RemoteDevice, RemoteOptions, run_command
from edgekd.errors import EdgeKDError

# What `mktemp -d` may print: an absolute path of ordinary characters.
SAFE_PATH = re.compile(r"^/[A-Za-z0-9_./-]+$")


class SshOptions(RemoteOptions):
    host: str | None = Field(None, description="Host name or address ([user@]host).")
    user: str | None = Field(None, description="Login user (default: yours).")
    port: int = Field(22, ge=1, le=65535, description="ssh port.")
    identity_file: str | None = Field(None, description="Private key file.")
    known_hosts: str = Field(
        "~/.ssh/known_hosts", description="Host keys; the host's key must be in it."
    )


class SshDevice(RemoteDevice):
    Config = SshOptions
    opts: SshOptions

    def __init__(self, spec: DeviceSpec) -> None:
        super().__init__(spec)
        host = self.opts.host
        if not host:
            raise EdgeKDError(
                f"device {spec.name} needs a host; pass --host USER@HOST or set `host:` "
                "in a copy of its spec (edgekd devices --show NAME > my.yaml)"
            )
        if host.startswith("-"):
            raise EdgeKDError(f"host {host!r} starts with '-'; fix `host:`")
        known = Path(self.opts.known_hosts).expanduser()
        if not known.is_file():
            raise EdgeKDError(
                f"known_hosts file {known} does not exist; add the host's key "
                f"(ssh-keyscan -p {self.opts.port} {host}, after checking its fingerprint)"
            )
        self.known_hosts = known

    @property
    def target(self) -> str:
        host = self.opts.host or ""
        return f"{self.opts.user}@{host}" if self.opts.user and "@" not in host else host

    def options(self) -> list[str]:
        opts = [
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            f"UserKnownHostsFile={self.known_hosts}",
            "-o",
            "ConnectTimeout=15",
        ]
        if self.opts.identity_file:
            key = Path(self.opts.identity_file).expanduser()
            opts += ["-o", "IdentitiesOnly=yes", "-i", str(key)]
        return opts

    def ssh_argv(self, argv: list[str]) -> list[str]:
        """`ssh OPTIONS -- host 'quoted command'`: ssh joins its arguments into one
        remote shell line, so each is quoted here; `--` keeps a host from reading
        as an option."""
        remote = " ".join(shlex.quote(a) for a in argv)
        return ["ssh", *self.options(), "-p", str(self.opts.port), "--", self.target, remote]

    def upload_argv(self, remote: PurePosixPath) -> list[str]:
        """`cat > REMOTE` over ssh, the file on stdin: needs only a POSIX shell on
        the target (no sftp subsystem, which dropbear-based boards lack)."""
        line = f"cat > {shlex.quote(str(remote))}"
        return ["ssh", *self.options(), "-p", str(self.opts.port), "--", self.target, line]

    def run(self, argv: list[str], what: str, stdin: Path | None = None) -> str:
        fix = (
            f"check that {self.known_hosts} holds {self.opts.host}'s key"
            if what.startswith("connect")
            else ""
        )
        return run_command(argv, f"{what} on {self.spec.name}", self.spec.timeout_s, fix, stdin)

    def make_dir(self) -> PurePosixPath:
        out = self.run(
            self.ssh_argv(["mktemp", "-d", f"{self.opts.remote_root}/edgekd.XXXXXX"]),
            "connect (ssh)",
        ).strip()
        if not SAFE_PATH.match(out):
            raise EdgeKDError(f"mktemp on {self.spec.name} printed {out!r}; check remote_root")
        return PurePosixPath(out)

    def push(self, local: Path, remote: PurePosixPath) -> None:
        self.run(self.upload_argv(remote), f"copy {local.name} (ssh)", stdin=local)

    def shell(self, argv: list[str]) -> str:
        return self.run(self.ssh_argv(argv), f"{argv[0]} (ssh)")

    def fetch(self, remote: PurePosixPath) -> str:
        return self.shell(["cat", str(remote)])
