"""AgentWorldModel (AWM) environments: the public release format, sandboxed servers and code verifiers.

* :mod:`.release` reads the release's JSONL files (one ``scenario`` key across them) and builds each
  scenario's pristine SQLite database;
* :mod:`.sandboxed` is the module that runs *inside* the project sandbox: it boots a scenario's generated
  FastAPI server on the episode's database copy, dispatches tool calls into it without HTTP or a port,
  and runs the task's verifier on read-only copies;
* :mod:`.server` is the host side: a pool of warm sandboxed server workers and the verifier runner;
* :mod:`.env` is the ``awm`` agent environment (one tool per endpoint, registered by name);
* :mod:`.selfcheck` checks generated tasks: gold actions pass their verifier, doing nothing fails it.
"""
