"""A small local HTTP server speaking the subset of SGLang's native ``/generate`` the agent loop uses.

SGLang needs CUDA, so on CPU the same agent code (strands-sglang's client and model provider) talks to
this server instead. It is hand-written because no installed library serves token-ids-in / token-ids-
and-logprobs-out over SGLang's wire format; it stays a thin shell around a generation backend:

* ``POST /generate`` — in: ``input_ids`` and ``sampling_params`` (``max_new_tokens``, ``temperature``,
  ``top_p``, ``stop_token_ids``, ``sampling_seed``, ``skip_special_tokens``, ``no_stop_trim``) and
  ``return_logprob``; out: ``text``, ``output_ids`` and ``meta_info`` with ``output_token_logprobs``
  (``[[logprob, token_id, None], ...]``), ``finish_reason`` (``{"type": "stop"|"length", ...}``),
  ``prompt_tokens``, ``completion_tokens``, ``cached_tokens``, ``e2e_latency``. A prompt that fills the
  context answers 400 with SGLang's "maximum context length" wording; ``max_new_tokens`` is clamped to
  the room left.
* ``GET /health``, ``GET /model_info``.

It binds 127.0.0.1 only, on a free port, and serves requests one generation at a time (one model), or,
given a :class:`~infra.agents.lockstep.LockstepBatcher`, in deterministic batches across the rollout's
episodes.
:func:`start_model_server` backs it with :func:`infra.embedded.generation.generate` for any local model
folder, :func:`start_micro_server` with the embedded ``micro`` model.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from transformers import PreTrainedTokenizerBase

from infra.agents.lockstep import BatchBackend, LockstepBatcher
from infra.embedded.generation import Generation

#: ``backend(input_ids, max_new_tokens=, temperature=, top_p=, stop_token_ids=, seed=) -> Generation``
Backend = Callable[..., Generation]
HOST = "127.0.0.1"


def send_json(handler: BaseHTTPRequestHandler, payload: Any, status: int = 200) -> None:
    """Write ``payload`` as a JSON response with its length (the wire format HTTP JSON clients expect)."""
    data = json.dumps(payload).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


class RequestError(ValueError):
    """A malformed ``/generate`` request (answered with HTTP 400)."""


class GenerateServer:
    """The ``/generate`` server; use as a context manager or call :meth:`start` / :meth:`stop`."""

    def __init__(
        self,
        backend: Backend,
        tokenizer: PreTrainedTokenizerBase,
        *,
        max_context_tokens: int,
        model_path: str = "local",
        port: int = 0,
        batcher: LockstepBatcher | None = None,
    ) -> None:
        self.backend = backend
        self.batcher = batcher  # lockstep batches of the rollout's workers (else one request at a time)
        self.tokenizer = tokenizer
        self.max_context_tokens = max_context_tokens
        self.model_path = model_path
        self.vocab_size = len(tokenizer)
        self.requests: list[dict[str, Any]] = []  # every answered /generate: input_ids, output_ids
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer((HOST, port), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """Return the base URL, e.g. ``http://127.0.0.1:40123``."""
        return f"http://{HOST}:{self._httpd.server_address[1]}"

    def start(self) -> GenerateServer:
        """Start serving in a daemon thread and return self."""
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="generate-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> GenerateServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def generate(self, body: dict[str, Any]) -> dict[str, Any]:
        """Answer one ``/generate`` request body (raise :class:`RequestError` when it is malformed)."""
        ids = body.get("input_ids")
        if not isinstance(ids, list) or not ids or not all(isinstance(t, int) for t in ids):
            raise RequestError(
                "'input_ids' must be a non-empty list of ints (text and batched input unsupported)"
            )
        if min(ids) < 0 or max(ids) >= self.vocab_size:
            raise RequestError(f"'input_ids' has a token id outside the vocabulary of {self.vocab_size}")
        params = body.get("sampling_params") or {}
        if not isinstance(params, dict):
            raise RequestError("'sampling_params' must be an object")
        room = self.max_context_tokens - len(ids)
        if room <= 0:
            raise RequestError(
                f"Requested token count exceeds the model's maximum context length of "
                f"{self.max_context_tokens} tokens. You requested a total of {len(ids)} tokens."
            )
        try:
            max_new = min(int(params.get("max_new_tokens", 128)), room)
            temperature = float(params.get("temperature", 1.0))
            top_p = float(params.get("top_p", 1.0))
            stops = [int(t) for t in params.get("stop_token_ids") or []]
            seed = params.get("sampling_seed")
            seed = None if seed is None else int(seed)
        except (TypeError, ValueError) as exc:
            raise RequestError(f"bad sampling_params: {exc}") from None
        if max_new < 1:
            raise RequestError(
                f"'sampling_params.max_new_tokens' must be >= 1, got {params.get('max_new_tokens')}"
            )
        started = time.perf_counter()
        kw = {"max_new_tokens": max_new, "temperature": temperature, "top_p": top_p, "stop_token_ids": stops}
        if self.batcher is not None:
            gen = self.batcher.submit(ids, seed=seed, **kw)
        else:
            with self._lock:
                gen = self.backend(ids, seed=seed, **kw)
        out_ids = list(gen.token_ids)
        shown = out_ids
        if gen.finish_reason == "stop" and not params.get("no_stop_trim", False):
            shown = out_ids[:-1]
        text = self.tokenizer.decode(shown, skip_special_tokens=bool(params.get("skip_special_tokens", True)))
        finish: dict[str, Any] = (
            {"type": "stop", "matched": out_ids[-1]}
            if gen.finish_reason == "stop"
            else {"type": "length", "length": len(out_ids)}
        )
        meta: dict[str, Any] = {
            "id": uuid.uuid4().hex,
            "finish_reason": finish,
            "prompt_tokens": len(ids),
            "completion_tokens": len(out_ids),
            "cached_tokens": 0,
            "e2e_latency": time.perf_counter() - started,
        }
        if body.get("return_logprob"):
            meta["output_token_logprobs"] = [
                [float(lp), t, None] for lp, t in zip(gen.logprobs, out_ids, strict=True)
            ]
            meta["input_token_logprobs"] = None
        with self._lock:
            self.requests.append({"input_ids": list(ids), "output_ids": out_ids})
        return {"text": text, "output_ids": out_ids, "meta_info": meta}

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
                return

            def _send(self, status: int, payload: Any) -> None:
                try:
                    send_json(self, payload, status)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True  # the client left (timed out or killed): no one to answer

            def do_GET(self) -> None:  # noqa: N802 - stdlib naming
                if self.path == "/health":
                    self._send(200, {"status": "ok"})
                elif self.path == "/model_info":
                    info = {"model_path": server.model_path, "tokenizer_path": server.model_path}
                    self._send(200, {**info, "is_generation": True, "has_image_understanding": False})
                else:
                    self._send(404, {"error": f"unknown path {self.path}"})

            def do_POST(self) -> None:  # noqa: N802 - stdlib naming
                if self.path != "/generate":
                    self._send(404, {"error": f"unknown path {self.path}"})
                    return
                try:
                    body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                    if not isinstance(body, dict):
                        raise RequestError("request body must be a JSON object")
                    self._send(200, server.generate(body))
                except (RequestError, json.JSONDecodeError) as exc:
                    self._send(400, {"error": {"message": str(exc)}})
                except Exception as exc:  # noqa: BLE001 - a backend crash is a 500 for the client to classify
                    self._send(500, {"error": {"message": f"{type(exc).__name__}: {exc}"}})

        return Handler


def embedded_backend(model: Any, tokenizer: PreTrainedTokenizerBase) -> Backend:
    """Return a backend sampling from an HF causal LM with :func:`infra.embedded.generation.generate`."""
    from infra.embedded.generation import generate

    def backend(ids: list[int], **kw: Any) -> Generation:
        return generate(model, tokenizer, [ids], **kw)[0]

    return backend


def embedded_batch_backend(
    model: Any, tokenizer: PreTrainedTokenizerBase, drop_finished: bool = False, eager_decode: bool = False
) -> BatchBackend:
    """Return a batch backend for :class:`~infra.agents.lockstep.LockstepBatcher` over an HF causal LM.

    ``drop_finished`` and ``eager_decode`` are :func:`~infra.embedded.generation.generate_rows`'s.
    """
    from infra.embedded.generation import generate_rows
    from infra.embedded.prefix_cache import PrefixKVCache

    cache = PrefixKVCache()  # one set of weights: the rollout that built this backend drops it after
    options = {"prefix_cache": cache, "drop_finished": drop_finished, "eager_decode": eager_decode}

    def run(rows: list[Any], **kw: Any) -> list[Generation]:
        return generate_rows(model, tokenizer, rows, **options, **kw)

    return run


def start_model_server(path: str | Path, *, port: int = 0) -> GenerateServer:
    """Load the HF model folder ``path`` on CPU and return a started server for it."""
    from infra.embedded.models import load_model, load_tokenizer

    tokenizer = load_tokenizer(Path(path))
    model = load_model(Path(path), "cpu")
    context = int(getattr(model.config, "max_position_embeddings", 4096))
    server = GenerateServer(
        embedded_backend(model, tokenizer),
        tokenizer,
        max_context_tokens=context,
        model_path=str(path),
        port=port,
    )
    return server.start()


def micro_model_dir(seed: int = 0) -> Path:
    """Materialize the embedded ``micro`` model (cached) and return its HF folder."""
    from infra.embedded.models import cache_root, materialize

    return materialize("micro", cache_root() / f"agents-micro-seed{seed}", seed=seed)


def start_micro_server(seed: int = 0, *, port: int = 0) -> GenerateServer:
    """Return a started server backed by the embedded ``micro`` model."""
    return start_model_server(micro_model_dir(seed), port=port)
