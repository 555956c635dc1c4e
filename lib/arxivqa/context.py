"""The context budget: keep a conversation inside the model's context window, by one stated policy.

``fit_context(messages, count_tokens, budget, previous)`` is a pure function over an OpenAI-format message
list ``[system, user, (assistant, tool…, [user])…]``; it returns the messages to send and a
``records.ContextTrim`` saying what it trimmed. The agent calls it before every turn (``Agent.episode``)
with ``budget = context window − max_new_tokens``; anything else that builds a conversation turn by turn
(a custom rollout loop) can call it the same way. The stages, each tried only when the previous one is
not enough:

1. **compact older tool results**, oldest first: a search result keeps its header and one line per
   paper (ID, date, title) — abstracts and snippets go; a page read keeps its header and title line;
   a marker says so to the model. The latest turn's results stay whole.
2. **drop the oldest turns** (an assistant message with its tool results), oldest first, never the
   system prompt, the query or the latest turn; a note right after the query tells the model how many
   earlier turns were removed and that the paper IDs they showed still work. Once it has to drop, it
   drops until ``slack`` tokens are free, so that the next turns can grow without another drop.
3. **compact the latest turn's results** too.

If the conversation still does not fit, ``ContextTrim.fits`` is False (the agent stops the episode with
``context_budget`` instead of sending a request the server would refuse).

Trimming is deterministic and monotone: pass the previous turn's ``ContextTrim`` as ``previous`` and a
message compacted or dropped once stays so. Between two turns the prompt therefore changes only from
the first newly compacted message on (a KV cache of the prefix stays valid up to there), or after the
query when turns are dropped (rare: compacted turns are small).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from .records import ContextTrim

COMPACT_MARK = "(shortened to fit the context window: abstracts, snippets and page text removed)"
DROP_NOTE = ("[Context note: {n} earlier turn(s) of this conversation were removed to fit the model's context "
             "window. Paper IDs that their results showed are still valid for read_page and finish.]")
MAX_COMPACT_CHARS = 1500  # a compacted result that is still longer (an error text, a huge header) is cut here
CHARS_PER_TOKEN = 3.0  # a conservative estimate for servers whose tokenizer is not at hand


def compact_tool_result(text: str) -> str:
    """A tool result reduced to its IDs and titles: a search result keeps its header and the paper lines
    (``[1] id: P-… | published: … | title: …``), not the indented abstract/snippet lines; a page read
    keeps its header and ``Title:`` line. Short results (errors, ``finish``) stay as they are. Idempotent."""
    if COMPACT_MARK in text:
        return text
    lines = text.splitlines()
    if lines and lines[0].startswith("Paper ") and " — page " in lines[0]:
        kept = lines[:2]
    else:
        kept = [line for line in lines if line.strip() and not line[:1].isspace()]
    out = "\n".join(kept)
    if len(out) > MAX_COMPACT_CHARS:
        out = out[:MAX_COMPACT_CHARS] + " …"
    if len(out) >= len(text):
        return text
    return out + "\n" + COMPACT_MARK


def approx_tokens(messages: Sequence[dict], tools: Sequence[dict] | None = None,
                  chars_per_token: float = CHARS_PER_TOKEN) -> int:
    """A token estimate from the characters of the request as JSON (messages and tool schemas)."""
    chars = len(json.dumps(list(messages), ensure_ascii=False, default=str))
    if tools:
        chars += len(json.dumps(list(tools), ensure_ascii=False, default=str))
    return int(chars / chars_per_token) + 1


def _split(messages: Sequence[dict]) -> tuple[list[dict], list[list[dict]]]:
    """(head: everything up to the first user message, turns: groups that each start at an assistant message)."""
    head_end = next((i + 1 for i, m in enumerate(messages) if m.get("role") == "user"), len(messages))
    head, turns = list(messages[:head_end]), []
    for m in messages[head_end:]:
        if m.get("role") == "assistant" or not turns:
            turns.append([m])
        else:
            turns[-1].append(m)
    return head, turns


def _render(head: list[dict], turns: list[list[dict]], compacted: int, dropped: int) -> list[dict]:
    out = list(head)
    if dropped:
        out.append({"role": "user", "content": DROP_NOTE.format(n=dropped)})
    seen = 0  # tool messages of the whole history, in order: the first `compacted` are compacted
    for t, group in enumerate(turns):
        for m in group:
            if m.get("role") == "tool":
                seen += 1
                if t >= dropped and seen <= compacted:
                    m = {**m, "content": compact_tool_result(str(m.get("content") or ""))}
            if t >= dropped:
                out.append(m)
    return out


def fit_context(messages: Sequence[dict], count_tokens: Callable[[list[dict]], int], budget: int,
                previous: ContextTrim | None = None, slack: int | None = None) -> tuple[list[dict], ContextTrim]:
    """The messages to send so that ``count_tokens(messages) <= budget``, by the stages of the module
    docstring, starting from ``previous`` (the last turn's trim of the same conversation: nothing it
    trimmed comes back). ``slack`` (default an eighth of the budget) is what a drop frees beyond the
    budget. Returns (messages, trim); ``trim.trimmed`` says whether anything was trimmed, ``trim.fits``
    whether the result fits."""
    head, turns = _split(messages)
    n_tools = [sum(m.get("role") == "tool" for m in g) for g in turns]
    older_tools = sum(n_tools[:-1])
    all_tools = sum(n_tools)
    compacted = min(previous.compacted, all_tools) if previous else 0
    dropped = min(previous.dropped_turns, max(0, len(turns) - 1)) if previous else 0
    slack = budget // 8 if slack is None else slack
    before = count_tokens(list(messages)) if (compacted or dropped) else None
    out = _render(head, turns, compacted, dropped)
    tokens = count_tokens(out)
    if before is None:
        before = tokens
    while tokens > budget and compacted < older_tools:  # 1. older tool results to IDs and titles
        compacted += 1
        if sum(n_tools[:dropped]) >= compacted:  # in a dropped turn already: nothing changes
            continue
        out = _render(head, turns, compacted, dropped)
        tokens = count_tokens(out)
    if tokens > budget:  # 2. drop the oldest turns, until `slack` tokens are free
        while tokens > budget - slack and dropped < len(turns) - 1:
            dropped += 1
            out = _render(head, turns, compacted, dropped)
            tokens = count_tokens(out)
    while tokens > budget and compacted < all_tools:  # 3. the latest turn's results too
        compacted += 1
        out = _render(head, turns, compacted, dropped)
        tokens = count_tokens(out)
    return out, ContextTrim(budget=budget, tokens_before=before, tokens_after=tokens, compacted=compacted,
                            dropped_turns=dropped, fits=tokens <= budget)
