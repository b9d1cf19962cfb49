"""``execute_command``, the one Strands tool of the Harbor environment, and its FireFlash harness options.

Both options are off by default (stage 05's tool text is unchanged); the FireFlash variant turns them on
through the env spec (``harbor:...,redirect_outputs=1,background_long_commands=1``):

* ``redirect_outputs``: a stream longer than the tool's budget is saved whole to a file in the sandbox
  (``/tmp/rufus_outputs/cmd_N.out`` or ``.err``) and the tool returns a cut preview plus that file's name,
  so the agent can ``grep``/``sed -n`` the part it needs instead of running the command again;
* ``background_long_commands``: a command that runs past the command timeout is left running in the
  background instead of killed; the tool returns ``moved to background: pid N, output in FILE`` (and the
  file its exit status goes to when it ends). The sandbox's teardown (verification kills every job
  process, closing kills the sandbox) still ends it.

The files live in a root-owned folder of the sandbox the agent can read but not write (see
:mod:`infra.agents.harbor.runtime` and :mod:`infra.agents.harbor.sandboxed_shell`), a tmpfs of
:data:`OUTPUTS_MB` MiB for the whole episode: a stream that no longer fits there is only cut, as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from infra.agents.harbor.runtime import Session

#: Size of the sandbox's outputs folder when an option is on (saved outputs and background output).
OUTPUTS_MB = 64


def flag_option(owner: str, name: str, value: Any) -> bool:
    """Return the boolean of spec option ``name`` (1/0/true/false); ValueError naming it otherwise."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
        return value.lower() in ("true", "1", "yes")
    raise ValueError(f"{owner} option {name}={value!r}: expected 1 or 0 (true/false)")


@dataclass(frozen=True)
class HarnessOptions:
    """The FireFlash harness behaviours of ``execute_command`` (both off: stage 05's tool)."""

    redirect_outputs: bool = False  # long streams saved to a sandbox file, a preview returned
    background_long_commands: bool = False  # a command past its timeout keeps running in the background

    @property
    def enabled(self) -> bool:
        """True when the sandbox needs its outputs folder."""
        return self.redirect_outputs or self.background_long_commands

    def execute_kwargs(self, budget_tokens: int) -> dict[str, Any]:
        """``Session.execute`` keywords of these options for a tool of ``budget_tokens`` per stream."""
        if not self.enabled:
            return {}
        save_over = 4 * budget_tokens if self.redirect_outputs else None
        return {"save_over": save_over, "background": self.background_long_commands}


def render(res: Any, clip: Any, timeout_s: float) -> str:
    """Return the tool text of :class:`~infra.agents.harbor.runtime.CommandResult` ``res``."""
    text = clip(res.stdout)
    if "stdout" in res.saved and res.background_pid is None:
        text += f"\n[stdout was {res.stdout_bytes} bytes, cut above; all of it is in {res.saved['stdout']}]"
    if res.stderr:
        text += f"\n[stderr]: {clip(res.stderr)}"
        if "stderr" in res.saved and res.background_pid is None:
            text += f"\n[stderr was {res.stderr_bytes} bytes; all of it is in {res.saved['stderr']}]"
    if res.background_pid is not None:
        text += (
            f"\n[moved to background after {timeout_s:g}s: pid {res.background_pid}, output in "
            f"{res.saved['stdout']} (stderr in {res.saved['stderr']}); its exit status will be written "
            f"to {res.saved['exit']} when it ends]"
        )
    elif res.timed_out:
        text += f"\n[timed out after {timeout_s:g}s]"
    elif res.exit_code != 0:
        text += f"\n[exit code]: {res.exit_code}"
    return text.strip() or "(no output)"


def execute_command_tool(
    session: Session,
    budget_tokens: int = 512,
    tokenizer: Any = None,
    timeout_s: float | None = None,
    harness: HarnessOptions = HarnessOptions(),  # noqa: B008 - frozen, never mutated
) -> Any:
    """The stage's one Strands tool: ``execute_command(command)`` → stdout, ``[stderr]``, ``[exit code]``.

    The text follows strands-env's Harbor tool: stdout, then ``\\n[stderr]: …`` when stderr is non-empty,
    then ``\\n[exit code]: N`` when it is not 0, or ``(no output)``; a timeout adds ``[timed out after Ns]``.
    Each stream is cut to ``budget_tokens`` tokens (``tokenizer``'s, else about 4 characters a token) with
    a visible marker. A non-zero exit is a normal result, not a tool error; a broken sandbox raises
    ``EnvironmentFailure``, which aborts the episode (:mod:`infra.agents.tools`). ``harness``: the
    FireFlash options of this module (a saved stream's file, a background command's pid and files).
    """
    from strands.tools.tools import PythonAgentTool

    from infra.agents.tools import truncate_to_tokens

    def clip(text: str) -> str:
        if tokenizer is not None:
            return truncate_to_tokens(text, tokenizer, budget_tokens)[0]
        limit = 4 * budget_tokens
        return text if len(text) <= limit else text[:limit] + f"\n[truncated from {len(text)} characters]"

    spec = {
        "name": "execute_command",
        "description": "Execute a bash command in the task's environment (working directory /app).",
        "inputSchema": {"json": {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "The command, e.g. 'ls -la'."}},
            "required": ["command"],
        }},
    }  # fmt: skip
    options = harness.execute_kwargs(budget_tokens)

    def run(tool_use: dict[str, Any], **_: Any) -> dict[str, Any]:
        command = (tool_use.get("input") or {}).get("command")
        if not isinstance(command, str) or not command.strip():
            text = "Error: execute_command needs a non-empty string argument 'command'."
            return {"toolUseId": tool_use["toolUseId"], "status": "error", "content": [{"text": text}]}
        res = session.execute(command, timeout_s, **options)
        text = render(res, clip, timeout_s or session.rt.command_timeout_s)
        return {"toolUseId": tool_use["toolUseId"], "status": "success", "content": [{"text": text}]}

    return PythonAgentTool("execute_command", spec, run)
