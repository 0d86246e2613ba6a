"""What a `timeline doctor` row is, and the hooks a family has there
(Family.doctor names its FamilyDoctor; timeline/commands/doctor.py runs them)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = False  # recording cannot work without it

    @property
    def status(self) -> str:
        if self.ok:
            return "OK"
        return "MISSING" if self.required else "missing"


class FamilyDoctor:
    """A family's own rows.  Its "family NAME" row is the doctor's (loaded and
    attached as `record` would), except where a hook here says otherwise."""

    def __init__(self, family):
        self.family = family  # its Family descriptor

    @property
    def row_name(self) -> str:
        return f"family {self.family.name}"

    def unsupported(self) -> Check:
        """Its row where the kernel cannot run it (Family.supported() is false)."""
        return Check(self.row_name, False, "not supported by this kernel", self.family.requires)

    def without_bpf(self) -> list[Check]:
        """Its rows when it loads no BPF (its records come from elsewhere)."""
        return [Check(self.row_name, True, "no eBPF program: its plugin writes its records")]

    def loaded(self, session) -> list[Check]:
        """Rows after its row, checked while its BPF is loaded and attached (a BpfSession of it alone)."""
        return []

    def environment(self, python: str) -> list[Check]:
        """Rows for the libraries and devices it needs, looked for where the
        interpreter `python` finds them (after every family's row)."""
        return []
