"""Batched sampling with a KV cache, returning per-token logprobs and a finish reason per sample.

Hand-written rather than ``model.generate`` because RL needs, per sample, the log-probability of every
sampled token under the exact distribution the trainer scores (``log_softmax(logits / temperature)``,
before top-p truncation, as SGLang reports it), a finish reason that tells a stop token from the length
budget, and a private seeded ``torch.Generator`` so sampling neither reads nor disturbs the global RNG
(exact resume). The same function backs the local ``/generate`` server of agent stages.

With ``top_k`` set, each step also records the ``k`` most likely ids of that same distribution and their
log-probs (what SGLang returns for ``top_logprobs_num``: FireFlash's score centering centres each token's
score on them). ``topk`` reads no random state, so the sampled tokens are the same with or without it.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel
from transformers import PreTrainedTokenizerBase as Tok

from infra.embedded.decode_attention import NAME as DECODE_ATTENTION
from infra.embedded.kv_cache import GrowingCache
from infra.embedded.prefix_cache import LayerKV, PrefixKVCache


@dataclass
class Generation:
    """One sampled continuation: its tokens (stop token included), their logprobs and why it ended."""

    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str = "length"
    top_ids: list[list[int]] | None = None  # per token, the sampler's top-k ids (only when asked)
    top_logprobs: list[list[float]] | None = None  # their log-probs, same distribution as ``logprobs``

    def _record(self, token: int, logprob: float, top: tuple[list[int], list[float]] | None) -> None:
        """Append one sampled token, its log-prob and (when captured) the step's top-k."""
        self.token_ids.append(token)
        self.logprobs.append(logprob)
        if top is not None:
            if self.top_ids is None or self.top_logprobs is None:
                self.top_ids, self.top_logprobs = [], []
            self.top_ids.append(top[0])
            self.top_logprobs.append(top[1])

    @property
    def truncated(self) -> bool:
        """True when the length budget, not a stop token, ended the sample."""
        return self.finish_reason == "length"


def _top_p_filter(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Return ``probs`` with the tail outside the top-p nucleus zeroed (the top token always stays)."""
    sorted_p, idx = probs.sort(dim=-1, descending=True)
    drop = (sorted_p.cumsum(dim=-1) - sorted_p) >= top_p
    sorted_p = sorted_p.masked_fill(drop, 0.0)
    return torch.zeros_like(probs).scatter(-1, idx, sorted_p)


def _sample(
    logits: torch.Tensor,
    temperature: float,
    top_p: float,
    gen: torch.Generator | None,
    top_k: int | None = None,
):
    """Return ``(tokens, logprobs, top)`` for one decoding step of a batch of last-position logits.

    ``top`` is ``(ids [B, k], log-probs [B, k])`` of the distribution the logprobs come from when
    ``top_k`` is set (k capped at the vocabulary), else None.
    """
    logits = logits.float()
    if temperature <= 0:
        logp = torch.log_softmax(logits, dim=-1)
        tokens = logits.argmax(dim=-1)
    else:
        logp = torch.log_softmax(logits / temperature, dim=-1)
        probs = logp.exp()
        if top_p < 1.0:
            probs = _top_p_filter(probs, top_p)
        tokens = torch.multinomial(probs, 1, generator=gen).squeeze(-1)
    top = None
    if top_k is not None:
        values, ids = logp.topk(min(int(top_k), logp.shape[-1]), dim=-1)
        top = (ids, values)
    return tokens, logp.gather(-1, tokens[:, None]).squeeze(-1), top


def _row_top(top: tuple[torch.Tensor, torch.Tensor] | None, i: int) -> tuple[list[int], list[float]] | None:
    """Row ``i`` of a step's ``top`` as plain lists (None when not captured)."""
    return None if top is None else (top[0][i].tolist(), top[1][i].tolist())


def _cache_kw(model: PreTrainedModel) -> str:
    """Return the forward() keyword of the KV cache (``cache`` in transformers >= 5.2x, else the old name)."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _empty_cache() -> object:
    """The KV cache a sampling run starts from (appended in place as tokens are decoded)."""
    return GrowingCache()


def _cache_from(layers: list[tuple[torch.Tensor, torch.Tensor]]) -> object:
    """A KV cache holding ``(keys, values)`` per layer, ready to decode from."""
    return GrowingCache(layers)


def _cache_of(out: object) -> object:
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


@torch.inference_mode()
def _generate_batch(
    model, pad_id, prompts, max_new_tokens, temperature, top_p, stops, gen, top_k=None
) -> list[Generation]:
    device = model.device
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
        mask[i, width - len(p) :] = 1
    ids, mask = ids.to(device), mask.to(device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cache_kw = _cache_kw(model)
    fresh = {cache_kw: _empty_cache()}
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, **fresh)
    past, logits = _cache_of(out), out.logits[:, -1]
    last_pos = positions[:, -1]
    results = [Generation() for _ in prompts]
    done = torch.zeros(len(prompts), dtype=torch.bool, device=device)
    stop_t = torch.tensor(sorted(stops), dtype=torch.long, device=device)
    for _ in range(max_new_tokens):
        tokens, logps, top = _sample(logits, temperature, top_p, gen, top_k)
        tokens = torch.where(done, torch.full_like(tokens, pad_id), tokens)
        for i, (t, lp) in enumerate(zip(tokens.tolist(), logps.tolist(), strict=False)):
            if not done[i]:
                results[i]._record(t, lp, _row_top(top, i))
        if len(stops):
            hit = torch.isin(tokens, stop_t) & ~done
            for i in hit.nonzero().flatten().tolist():
                results[i].finish_reason = "stop"
            done |= hit
        if bool(done.all()):
            break
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=-1)
        last_pos = last_pos + 1
        out = model(
            input_ids=tokens[:, None],
            attention_mask=mask,
            position_ids=last_pos[:, None],
            use_cache=True,
            **{cache_kw: past},
        )
        past, logits = _cache_of(out), out.logits[:, -1]
    return results


def generate(
    model: PreTrainedModel,
    tokenizer: Tok,
    prompt_ids: list[list[int]],
    *,
    max_new_tokens: int,
    temperature: float,
    top_p: float = 1.0,
    stop_token_ids: list[int] | None = None,
    seed: int | None = None,
    batch_size: int | None = None,
    top_k: int | None = None,
) -> list[Generation]:
    """Return one :class:`Generation` per prompt (token ids in, token ids out), sampled in batches.

    ``temperature`` 0 is greedy. Logprobs are of the sampled token under ``softmax(logits/temperature)``
    (``softmax(logits)`` when greedy), before top-p truncation. A fixed ``seed`` makes the output
    deterministic for a given batching. ``top_k`` also records each step's top-k ids and log-probs of
    that distribution (``Generation.top_ids`` / ``top_logprobs``) without changing what is sampled.
    """
    if any(len(p) == 0 for p in prompt_ids):
        raise ValueError("generate: every prompt needs at least one token")
    if max_new_tokens < 1:
        raise ValueError(f"generate: max_new_tokens must be >= 1, got {max_new_tokens}")
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    gen = None
    if seed is not None:
        gen = torch.Generator(device=model.device).manual_seed(int(seed))
    was_training = model.training
    model.eval()
    size = batch_size or len(prompt_ids) or 1
    out: list[Generation] = []
    try:
        for start in range(0, len(prompt_ids), size):
            chunk = prompt_ids[start : start + size]
            stops = set(stop_token_ids or [])
            out.extend(
                _generate_batch(model, pad_id, chunk, max_new_tokens, temperature, top_p, stops, gen, top_k)
            )
    finally:
        model.train(was_training)
    return out


@dataclass
class RowRequest:
    """One prompt of :func:`generate_rows`: its tokens, its own budget and its own sampling seed."""

    ids: list[int]
    max_new_tokens: int
    seed: int | None = None


@torch.inference_mode()
def generate_rows(
    model: PreTrainedModel,
    tokenizer: Tok,
    rows: list[RowRequest],
    *,
    temperature: float,
    top_p: float = 1.0,
    stop_token_ids: list[int] | None = None,
    prefix_cache: PrefixKVCache | None = None,
    top_k: int | None = None,
    drop_finished: bool = False,
    eager_decode: bool = False,
) -> list[Generation]:
    """Sample ``rows`` as one batch, each with its own budget and its own seeded generator.

    A row's tokens depend on its seed and on the batch it ran in (padding and batched kernels), not on
    the order the requests arrived: the agent server batches a deterministic set of requests
    (:mod:`infra.agents.lockstep`) and gets the same trajectories on every run. With ``prefix_cache`` each
    row encodes only what the cache does not hold (then the batch decodes together) and its sequence is
    stored for the next call. ``top_k`` records each step's top-k as :func:`generate` does.

    ``drop_finished`` takes a row out of the batch once it stops (SGLang frees a finished request too);
    otherwise it is fed padding until the longest row ends. Every decoded token reads each batch row's keys
    and values, so with one long row among short ones (a deliverable beside tool calls) dropping pays
    (2.2x a skewed 16-row SmolLM2 round at 1.2K tokens of context, bf16). The smaller batches run other kernel
    shapes, so log-probs can move at float rounding (seen: ~1e-6 float32, ~1e-2 bf16) and a sample change.

    ``eager_decode`` runs the one-token decoding forwards with eager attention (a matmul over the cached
    keys; :mod:`infra.embedded.decode_attention`, which reads a grouped-query model's keys and values without
    copying them per head) instead of the model's own (SDPA, whose CPU flash kernel spends most of a decode
    step at one query token: 390 ms of a 16-row SmolLM2 step at 1.2K tokens of context, transformers' eager
    205 ms); the prefill keeps the model's. Other arithmetic, other rounding: a sample can change.
    """
    if not rows or any(len(r.ids) == 0 or r.max_new_tokens < 1 for r in rows):
        raise ValueError("generate_rows: every row needs at least one token and max_new_tokens >= 1")
    device = model.device
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    gens = [None if r.seed is None else torch.Generator(device=device).manual_seed(int(r.seed)) for r in rows]
    width = max(len(r.ids) for r in rows)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        mask[i, width - len(r.ids) :] = 1
    mask = mask.to(device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    was_training, attention = model.training, model.config._attn_implementation
    model.eval()
    try:
        if prefix_cache is None:
            ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
            for i, r in enumerate(rows):
                ids[i, width - len(r.ids) :] = torch.tensor(r.ids, dtype=torch.long)
            out = model(
                input_ids=ids.to(device), attention_mask=mask, position_ids=positions, use_cache=True,
                **{_cache_kw(model): _empty_cache()},
            )  # fmt: skip
            past, logits = _cache_of(out), out.logits[:, -1]
        else:
            past, logits = _prefill_with_cache(model, rows, width, prefix_cache)
        cache_kw, last_pos = _cache_kw(model), positions[:, -1]
        if eager_decode:
            model.config._attn_implementation = DECODE_ATTENTION  # the decoding forwards; restored after
        results = [Generation() for _ in rows]
        live = list(range(len(rows)))  # the rows still in the batch, in batch order
        kept: dict[int, LayerKV] = {}  # a dropped row's keys/values, taken as it leaves the batch
        done = [False] * len(rows)
        stops = set(stop_token_ids or [])
        for _ in range(max(r.max_new_tokens for r in rows)):
            tokens, finished = [pad_id] * len(live), []
            for j, i in enumerate(live):
                if done[i]:
                    continue
                t, lp, top = _sample(logits[j : j + 1], temperature, top_p, gens[i], top_k)
                tokens[j] = int(t[0])
                res = results[i]
                res._record(tokens[j], float(lp[0]), _row_top(top, 0))
                stopped = tokens[j] in stops
                if stopped:
                    res.finish_reason = "stop"
                if stopped or len(res.token_ids) >= rows[i].max_new_tokens:
                    done[i] = True
                    finished.append(j)
            if all(done):
                break
            if drop_finished and finished:
                if prefix_cache is not None:
                    for j in finished:
                        kept[live[j]] = _row_kv(past, j, rows[live[j]], results[live[j]], width)
                stay = [j for j in range(len(live)) if not done[live[j]]]
                index = torch.tensor(stay, dtype=torch.long, device=device)
                past.batch_select_indices(index)
                mask, last_pos = mask[index], last_pos[index]
                live, tokens = [live[j] for j in stay], [tokens[j] for j in stay]
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=-1)
            last_pos = last_pos + 1
            step = torch.tensor(tokens, dtype=torch.long, device=device)[:, None]
            out = model(
                input_ids=step, attention_mask=mask, position_ids=last_pos[:, None], use_cache=True,
                **{cache_kw: past},
            )  # fmt: skip
            past, logits = _cache_of(out), out.logits[:, -1]
        if prefix_cache is not None:
            for j, i in enumerate(live):
                kept[i] = _row_kv(past, j, rows[i], results[i], width)
            for i, (r, res) in enumerate(zip(rows, results, strict=True)):  # in row order, as requested
                prefix_cache.put(r.ids + res.token_ids[:-1], kept[i])
    finally:
        model.train(was_training)
        model.config._attn_implementation = attention
    return results


def _row_kv(past: object, j: int, row: RowRequest, res: Generation, width: int) -> LayerKV:
    """A copy of batch row ``j``'s keys/values of its prompt and fed tokens.

    Copied, not views: a row that leaves the batch early would otherwise keep the batch's whole buffer
    (every row, with spare room) alive until the call ends, one such buffer per drop.
    """
    cols = slice(width - len(row.ids), width + len(res.token_ids) - 1)  # the last token was never fed
    return [(x.keys[j : j + 1, :, cols].clone(), x.values[j : j + 1, :, cols].clone()) for x in past.layers]


def _prefill_with_cache(
    model: PreTrainedModel, rows: list[RowRequest], width: int, cache: PrefixKVCache
) -> tuple[object, torch.Tensor]:
    """Encode each row past its longest cached prefix; return the left-padded batch cache and last logits."""
    from transformers import DynamicCache

    device, cache_kw = model.device, _cache_kw(model)
    layers: list[list[tuple[torch.Tensor, torch.Tensor]]] = []
    last = []
    for r in rows:
        n, kv = cache.lookup(r.ids)
        n = min(n, len(r.ids) - 1)  # at least one token is encoded, for its logits
        past = None
        if n > 0 and kv is not None:
            past = DynamicCache(
                ddp_cache_data=[(k[:, :, :n], v[:, :, :n]) for k, v in kv], config=model.config
            )
        cache.hits, cache.misses = cache.hits + n, cache.misses + len(r.ids) - n
        suffix = torch.tensor([r.ids[n:]], dtype=torch.long, device=device)
        pos = torch.arange(n, len(r.ids), device=device)[None]
        reuse = {cache_kw: past} if past is not None else {}
        out = model(input_ids=suffix, position_ids=pos, use_cache=True, **reuse)
        row_cache = _cache_of(out)
        pad = width - len(r.ids)
        layers.append(
            [(F.pad(x.keys, (0, 0, pad, 0)), F.pad(x.values, (0, 0, pad, 0))) for x in row_cache.layers]
        )
        last.append(out.logits[:, -1])
    merged = [(torch.cat([row[j][0] for row in layers]), torch.cat([row[j][1] for row in layers]))
              for j in range(len(layers[0]))]  # fmt: skip
    return _cache_from(merged), torch.cat(last)
