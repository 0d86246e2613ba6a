"""User-facing errors: a short sentence and an exit code, never a traceback."""


class UserError(Exception):
    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code


DOCTOR_HINT = "run `timeline doctor`"


class MachineError(UserError):
    """The machine cannot record (privileges, kernel, libbpf, a BPF load or
    attach refused): the message ends by pointing to `timeline doctor`."""

    def __init__(self, message: str, exit_code: int = 2):
        if "\n" in message:  # libbpf's log below the error: the hint comes last
            message = f"{message.rstrip()}\n{DOCTOR_HINT} for what this machine supports"
        else:
            message = f"{message.rstrip('.')}; {DOCTOR_HINT}"
        super().__init__(message, exit_code)
