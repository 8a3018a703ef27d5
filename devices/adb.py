"""The `adb` runner: the agent on an Android phone over USB or Wi-Fi debugging.

push agent + model to a fresh folder under `remote_root` (default
/data/local/tmp, the one folder `adb shell` may write and execute in), run it
with `adb shell`, pull the JSON, remove the folder. The phone needs a Python
with numpy and onnxruntime that the shell user can run (README, "Profiling on
a phone"). `adb shell` joins its arguments into one device shell line, so each
is quoted here; the folder name is ours (random hex), never a user's path.
"""

from __future__ import annotations

import secrets
import shlex
import tempfile
from pathlib import Path, PurePosixPath

from pydantic import Field

from edgekd.devices.base import RemoteDevice, RemoteOptions, run_command

ANDROID_TMP = "/data/local/tmp"


class AdbOptions(RemoteOptions):
    serial: str | None = Field(None, description="Device serial (`adb devices`); one phone: unset.")
    adb: str = Field("adb", description="The adb executable.")
    remote_root: str = Field(
        ANDROID_TMP, description="Folder on the phone under which a temp folder is made."
    )


class AdbDevice(RemoteDevice):
    Config = AdbOptions
    opts: AdbOptions

    def adb_argv(self, *args: str) -> list[str]:
        serial = ["-s", self.opts.serial] if self.opts.serial else []
        return [self.opts.adb, *serial, *args]

    def shell_argv(self, argv: list[str]) -> list[str]:
        return self.adb_argv("shell", " ".join(shlex.quote(a) for a in argv))

    def run(self, argv: list[str], what: str) -> str:
        fix = "check `adb devices` lists the phone and `serial:` names it"
        return run_command(argv, f"{what} on {self.spec.name}", self.spec.timeout_s, fix)

    def make_dir(self) -> PurePosixPath:
        folder = PurePosixPath(self.opts.remote_root) / f"edgekd-{secrets.token_hex(6)}"
        self.shell(["mkdir", "-p", str(folder)])
        return folder

    def push(self, local: Path, remote: PurePosixPath) -> None:
        self.run(self.adb_argv("push", str(local.resolve()), str(remote)), "adb push")

    def shell(self, argv: list[str]) -> str:
        return self.run(self.shell_argv(argv), f"{argv[0]} (adb shell)")

    def fetch(self, remote: PurePosixPath) -> str:
        with tempfile.TemporaryDirectory() as tmp:
            local = Path(tmp) / "result.json"
            self.run(self.adb_argv("pull", str(remote), str(local)), "adb pull")
            return local.read_text(encoding="utf-8")
