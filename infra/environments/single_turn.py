"""The default environment: one sampled response per prompt row, scored by the row's registered reward.

Stages 01–03 train in it. A rollout renders every row with the chat template, samples all
``rows × n`` responses in one batched, KV-cached, seeded call (:func:`infra.embedded.generation.generate`)
and scores each response text (stop token removed, special tokens kept) with the row's
``metadata.reward`` or the stage's reward. In production slime's own generate does the sampling, so the
environment adds nothing to the command line.
"""

from __future__ import annotations

from data_prep.schema import PromptRow
from infra.embedded.chat_format import render_prompt_ids, stop_token_ids
from infra.embedded.generation import generate
from infra.environments.base import SINGLE_TURN, Environment, Episode, Group, Policy, Sampling


class SingleTurnEnvironment(Environment):
    """Prompt rows and registered rewards, one model turn per episode."""

    name = SINGLE_TURN

    def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003 - Environment's signature
        super().__init__(*args, **kwargs)
        self._prompt_cache: dict[tuple[int, str], list[int]] = {}

    def prompt_ids(self, tokenizer, row: PromptRow) -> list[int]:  # noqa: ANN001
        """Return the chat-template token ids of ``row`` (cached per tokenizer and row id)."""
        key = (id(tokenizer), row.id)
        if key not in self._prompt_cache:
            self._prompt_cache[key] = render_prompt_ids(tokenizer, row.prompt, row.tools)
        return self._prompt_cache[key]

    def rollout(self, policy: Policy, rows: list[PromptRow], n: int, sampling: Sampling) -> list[Group]:
        """Sample ``n`` responses per row in one batched call and score them."""
        tok = policy.tokenizer
        prompts = [self.prompt_ids(tok, r) for r in rows for _ in range(n)]
        gens = generate(
            policy.model,
            tok,
            prompts,
            max_new_tokens=sampling.max_new_tokens,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            stop_token_ids=stop_token_ids(tok),
            seed=sampling.seed,
            batch_size=sampling.batch_size,
        )
        groups = []
        for gi, row in enumerate(rows):
            episodes = []
            for g in gens[gi * n : (gi + 1) * n]:
                body = g.token_ids[:-1] if g.finish_reason == "stop" else g.token_ids
                text = tok.decode(body, skip_special_tokens=False)
                episodes.append(
                    Episode(g.token_ids, g.logprobs, g.finish_reason, self.score(row, text), text)
                )
            groups.append(Group(row, prompts[gi * n], episodes))
        return groups
