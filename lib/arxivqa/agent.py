"""The ReAct retrieval agent: prompt, tool schemas, tolerant tool-call parsing, policies, the episode loop.

One source for the prompt and the tool schemas: ``SYSTEM_PROMPT`` and ``tool_schemas()`` (built from
``ArxivEnv``'s methods exactly as TRL builds them) serve the agent here and the trainer later.

Policies (``make_policy``) are named like every other LLM of the project (``llm.get_endpoint``):

- an endpoint of ``configs/endpoints.toml`` — ``local`` (default: the packaged Qwen2.5-Coder-0.5B-Instruct)
  and any other local endpoint run in this process (a Hugging Face causal LM, its chat template with
  tools, greedy by default); ``local:<model>`` names any packaged model, folder or hub ID the same way;
- a remote endpoint (``vllm-qwen3-8b``, ``openai-gpt-4.1-mini``, ...) or ``openai:<model>[@<base_url>]`` —
  any OpenAI-compatible chat server with native tool calling; its key from the variable the endpoint
  names (a local server needs none);
- ``run:<folder or name>`` — what a training run produced (``arxivqa.train``): its base model with the
  LoRA adapter of ``final/`` merged; a bare name is looked up under ``config.run_roots()``.

Small models often write tool calls as bare JSON, JSON in a code fence, or broken JSON instead of
``<tool_call>`` tags: ``parse_tool_calls`` accepts all of these, and what it cannot read goes back to
the agent as an error message while the episode goes on.
"""

from __future__ import annotations

import functools
import json
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Protocol

from .config import secret
from .corpus import Query
from .records import TOOL_NAMES, AssistantTurn, Budgets, ToolCall, ToolCallRecord, Trajectory
from .tools import ArxivEnv

SYSTEM_PROMPT = """You are a research retrieval agent for arXiv AI papers. Your job: find the papers that best answer the user's research query.

Work in turns. In each turn, think briefly about what is still missing, then call one or more tools (calls in the same turn run in parallel):
- keyword_search: exact terms, names, acronyms; returns paper IDs, dates, titles and matching snippets.
- semantic_search: a description of the idea; returns paper IDs, dates, titles and abstracts.
- read_page: read one paper by its ID when a result looks relevant but you are unsure.
- finish: submit up to 10 paper IDs, most relevant first. This ends the task.

Search from several angles (different terms, sub-topics, related methods) before you finish. Use only paper IDs that tools returned; never invent one. Always end by calling finish.

Call a tool by writing, for each call:
<tool_call>
{"name": "keyword_search", "arguments": {"query": "your search terms"}}
</tool_call>"""


def tool_schemas(env: ArxivEnv | None = None) -> list[dict]:
    """The tools' JSON schemas of ``env``'s class (default ``ArxivEnv``; ``tools.CompactArxivEnv`` is the
    terse view), from its type hints and docstrings, as TRL builds them and sends the model."""
    return list(_schemas(type(env) if env is not None else ArxivEnv))


@lru_cache(maxsize=4)
def _schemas(cls: type[ArxivEnv]) -> tuple[dict, ...]:
    from transformers.utils import get_json_schema

    env = cls(index=None)  # bound methods, as TRL sees them; no index is opened
    return tuple(get_json_schema(getattr(env, name)) for name in TOOL_NAMES)


# --------------------------------------------------------------------------- parsing


_TAGGED = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)
_FENCE = re.compile(r"```(?:json|tool_call|tool)?\s*(.*?)```", re.S)


def _objects(text: str) -> tuple[list[Any], list[str]]:
    """Every top-level JSON value embedded in ``text`` (objects or lists), and fragments that look
    like JSON but do not parse."""
    dec = json.JSONDecoder()
    values, broken, i = [], [], 0
    while i < len(text):
        if text[i] in "{[":
            try:
                value, end = dec.raw_decode(text, i)
                values.append(value)
                i = end
                continue
            except RecursionError:  # thousands of nested brackets: nothing a tool call needs
                broken.append(text[i : i + 60] + " … (nested too deeply)")
                break
            except ValueError:  # not JSON (or a number too long for int(): thousands of digits)
                if text[i] == "{" and re.match(r'\{\s*"(name|function|tool)"', text[i : i + 40]):
                    broken.append(text[i : i + 200])
        i += 1
    return values, broken


def _as_call(value: Any) -> ToolCall | None:
    if not isinstance(value, dict):
        return None
    if isinstance(value.get("function"), dict):  # OpenAI style {"type": "function", "function": {...}}
        value = value["function"]
    name = value.get("name") or value.get("tool") or value.get("tool_name")
    if not isinstance(name, str):
        return None
    args = value.get("arguments", value.get("parameters", value.get("args", {})))
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except (ValueError, RecursionError):
            pass  # keep the raw string: the environment answers with an error message
    return ToolCall(name=name.strip(), arguments=args)


def parse_tool_calls(text: str) -> tuple[str, list[ToolCall], list[str]]:
    """Split a model's raw output into (reasoning text, tool calls, problems).

    Accepts ``<tool_call>{...}</tool_call>`` (Qwen), ```` ```json {...}``` ```` fences, bare JSON objects
    or lists of them, OpenAI-style ``{"function": {...}}``, and ``arguments`` given as a JSON string.
    Problems (JSON that does not parse, an object without a tool name) are returned as messages
    for the agent; they never raise.
    """
    problems: list[str] = []
    tagged = _TAGGED.findall(text)
    if tagged:
        sources = tagged
        reasoning = _TAGGED.sub("", text)
    else:
        fenced = _FENCE.findall(text)
        sources = fenced or [text]
        reasoning = _FENCE.sub("", text) if fenced else text
    calls: list[ToolCall] = []
    spans_used = False
    for src in sources:
        values, broken = _objects(src)
        for v in values:
            items = v if isinstance(v, list) else [v]
            for item in items:
                call = _as_call(item)
                if call is not None:
                    calls.append(call)
                    spans_used = True
                elif isinstance(item, dict) and tagged:
                    problems.append(f"a tool call needs a 'name' and 'arguments'; got {json.dumps(item)[:200]}")
        problems.extend(f"could not parse this tool call as JSON: {b!r}" for b in broken)
        if tagged and not values and not broken:
            problems.append(f"could not parse this tool call as JSON: {src[:200]!r}")
    if spans_used and not tagged and not _FENCE.search(text):
        # bare JSON: keep only the prose around it as reasoning
        reasoning = re.sub(r"[\{\[].*[\}\]]", "", text, flags=re.S)
    if len(problems) > 3:  # a model repeating a broken call: the first few say it all
        problems = problems[:3] + [f"{len(problems) - 3} more problems like these"]
    return reasoning.strip(), calls, problems


# --------------------------------------------------------------------------- policies


class Policy(Protocol):
    name: str

    def chat(self, messages: list[dict], tools: list[dict], max_new_tokens: int) -> AssistantTurn: ...


class LocalHFPolicy:
    """A causal LM in this process; chat template with tools; greedy unless ``temperature`` > 0. Sampled,
    ``min_p`` (as TRL's GRPOConfig and transformers name it) drops every token whose probability is below
    ``min_p`` times the most likely one's, after the temperature.

    ``verbatim_context``: this policy renders its own chat template, so an episode's context keeps each
    assistant turn as the policy wrote it (``AssistantTurn.raw``), as a GRPO rollout's does (TRL's tool loop
    concatenates the generated tokens and never re-renders them)."""

    verbatim_context = True

    def __init__(self, model: str | None = None, temperature: float = 0.0, threads: int | None = None,
                 adapter: str | os.PathLike | None = None, dtype: str = "auto", name: str | None = None,
                 min_p: float | None = None) -> None:
        if min_p is not None and not 0.0 <= min_p <= 1.0:
            raise ValueError(f"min_p must lie in [0, 1], got {min_p}")
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from .models import model_setting, resolve_dtype, resolve_model

        self.model_name = model or model_setting()
        path = resolve_model(self.model_name)
        if threads:
            torch.set_num_threads(threads)
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, resolve_dtype(dtype))).eval()
        if adapter is not None:  # a trained LoRA adapter (a run's final/), merged for generation
            from peft import PeftModel

            self.model = PeftModel.from_pretrained(self.model, str(adapter)).merge_and_unload().eval()
        self.temperature, self.min_p = temperature, min_p
        self.name = name or f"local:{self.model_name}"

    @property
    def context_window(self) -> int | None:
        """The model's context window from its config (``max_position_embeddings``)."""
        n = getattr(self.model.config, "max_position_embeddings", None)
        return int(n) if isinstance(n, int) and n > 0 else None

    def _prompt_ids(self, messages: list[dict], tools: list[dict]) -> list[int]:
        ids = self.tokenizer.apply_chat_template(_for_template(messages), tools=tools, add_generation_prompt=True,
                                                 tokenize=True, return_dict=True)["input_ids"]
        return list(ids[0] if ids and isinstance(ids[0], list) else ids)

    def count_tokens(self, messages: list[dict], tools: list[dict]) -> int:
        """The prompt's length in tokens, exactly as ``chat`` encodes it."""
        return len(self._prompt_ids(messages, tools))

    def chat(self, messages: list[dict], tools: list[dict], max_new_tokens: int) -> AssistantTurn:
        """One turn with ``generate`` on the whole re-encoded conversation (the plain path)."""
        import torch

        t0 = time.perf_counter()
        prompt = self.tokenizer.apply_chat_template(_for_template(messages), tools=tools, add_generation_prompt=True,
                                                    tokenize=False)
        enc = self.tokenizer(prompt, return_tensors="pt")
        kwargs = {"max_new_tokens": max_new_tokens, "pad_token_id": self.tokenizer.eos_token_id}
        kwargs |= ({"do_sample": True, "temperature": self.temperature, "min_p": self.min_p}
                   if self.temperature > 0 else {"do_sample": False})
        with torch.no_grad():
            out = self.model.generate(**enc, **kwargs)
        new = out[0, enc.input_ids.shape[1]:]
        return self._turn(new.tolist(), int(enc.input_ids.shape[1]), time.perf_counter() - t0)

    def _turn(self, new: list[int], prompt_tokens: int, seconds: float, reused: int = 0) -> AssistantTurn:
        raw = self.tokenizer.decode(new, skip_special_tokens=True)
        text, calls, problems = parse_tool_calls(raw)
        return AssistantTurn(text=text, raw=raw, tool_calls=calls, parse_problems=problems, prompt_tokens=prompt_tokens,
                             completion_tokens=len(new), seconds=seconds, cached_prompt_tokens=reused)

    # ------------------------------------------------------------------ many episodes in lockstep

    def _stop_ids(self) -> set[int]:
        eos = self.model.generation_config.eos_token_id
        ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if self.tokenizer.eos_token_id is not None:
            ids.add(self.tokenizer.eos_token_id)
        return ids

    def forget(self, key: str) -> None:
        """Drop the cached prefix of conversation ``key`` (its episode ended)."""
        getattr(self, "_kv", {}).pop(key, None)

    def chat_many(self, requests: Sequence[tuple[str, list[dict]]], tools: list[dict],
                  max_new_tokens: int | Sequence[int]) -> list[AssistantTurn]:
        """One turn of several conversations at once: ``requests`` are ``(key, messages)``; a key names a
        conversation across turns. Each conversation's prompt prefix is kept as a KV cache between its
        turns, so only the new part (the last turn's tool results) is encoded; the decoding of all
        conversations runs as one batch (left-padded caches, per-row positions). The same tokens as
        ``chat`` (greedy), up to floating-point reordering. A batch's wall time is split evenly among
        its turns (``AssistantTurn.seconds``)."""
        import torch
        from transformers import DynamicCache

        t0 = time.perf_counter()
        store: dict[str, tuple[list[int], list]] = self.__dict__.setdefault("_kv", {})
        limits = [max_new_tokens] * len(requests) if isinstance(max_new_tokens, int) else list(max_new_tokens)
        stop = self._stop_ids()
        rows, logits, reused = [], [], []
        with torch.no_grad():
            for key, messages in requests:  # prefill: only what the cache does not hold
                ids = self._prompt_ids(messages, tools)
                old_ids, kv = store.get(key, ([], None))
                p = 0
                while p < min(len(old_ids), len(ids) - 1) and old_ids[p] == ids[p]:
                    p += 1
                cache = DynamicCache()
                if kv is not None and p > 0:
                    for i, (k, v) in enumerate(kv):
                        cache.update(k[:, :, :p], v[:, :, :p], i)
                else:
                    p = 0
                out = self.model(input_ids=torch.tensor([ids[p:]]), **{self._cache_kw: cache},
                                 position_ids=torch.arange(p, len(ids))[None], use_cache=True)
                logits.append(out.logits[:, -1].float())
                rows.append((key, ids, [(layer.keys, layer.values) for layer in cache.layers]))
                reused.append(p)
            lengths = [len(ids) for _, ids, _ in rows]
            width = max(lengths)
            batched = DynamicCache()
            for li in range(len(rows[0][2])):
                ks, vs = [], []
                for (_, ids, kv), n in zip(rows, lengths):
                    k, v = kv[li]
                    pad = width - n
                    ks.append(torch.nn.functional.pad(k, (0, 0, pad, 0)))
                    vs.append(torch.nn.functional.pad(v, (0, 0, pad, 0)))
                batched.update(torch.cat(ks), torch.cat(vs), li)
            mask = torch.zeros(len(rows), width, dtype=torch.long)
            for r, n in enumerate(lengths):
                mask[r, width - n:] = 1
            gen: list[list[int]] = [[] for _ in rows]
            fed: list[list[int]] = [[] for _ in rows]
            done = [limit <= 0 for limit in limits]
            nxt = self._pick(torch.cat(logits))
            step = 0
            while True:
                for r, tok in enumerate(nxt.tolist()):
                    if not done[r]:
                        gen[r].append(tok)
                        done[r] = tok in stop or len(gen[r]) >= limits[r]
                if all(done):
                    break
                for r, tok in enumerate(nxt.tolist()):
                    if gen[r] and len(fed[r]) < len(gen[r]):
                        fed[r].append(tok)
                mask = torch.cat([mask, torch.ones(len(rows), 1, dtype=torch.long)], dim=1)
                pos = torch.tensor([[n + step] for n in lengths])
                out = self.model(input_ids=nxt[:, None], **{self._cache_kw: batched}, attention_mask=mask,
                                 position_ids=pos, use_cache=True)
                nxt = self._pick(out.logits[:, -1].float())
                step += 1
            for r, ((key, ids, _), n) in enumerate(zip(rows, lengths)):  # keep each row's real tokens
                keep = n + len(fed[r])
                store[key] = (ids + fed[r], [(layer.keys[r:r + 1, :, width - n: width - n + keep],
                                              layer.values[r:r + 1, :, width - n: width - n + keep])
                                             for layer in batched.layers])
        share = (time.perf_counter() - t0) / len(rows)
        return [self._turn([t for t in g if t not in stop], n, share, reused=p)
                for g, n, p in zip(gen, lengths, reused)]

    @functools.cached_property
    def _cache_kw(self) -> str:
        """The forward argument that takes a KV cache: ``cache`` in recent transformers, ``past_key_values``
        before (looked up once, not per decoded token)."""
        import inspect

        return "cache" if "cache" in inspect.signature(self.model.forward).parameters else "past_key_values"

    def _pick(self, logits):
        import torch

        if self.temperature > 0:
            return torch.multinomial(sampling_probs(logits, self.temperature, self.min_p), 1)[:, 0]
        return logits.argmax(dim=-1)


def sampling_probs(logits, temperature: float, min_p: float | None = None):
    """The distribution a sampled token is drawn from: transformers' own warpers, as ``generate`` applies
    them — the temperature, then min-p (tokens below ``min_p`` × the top probability dropped)."""
    import torch
    from transformers import LogitsProcessorList, MinPLogitsWarper, TemperatureLogitsWarper

    warpers = LogitsProcessorList([TemperatureLogitsWarper(temperature)] + ([MinPLogitsWarper(min_p)] if min_p else []))
    return torch.softmax(warpers(None, logits), dim=-1)


def run_policy(run_dir: str | os.PathLike, **kwargs) -> LocalHFPolicy:
    """The policy a training run produced: its base model (``config.json``) with the LoRA adapter in
    ``final/`` (or the last ``checkpoint-N/`` of an unfinished run)."""
    from pathlib import Path

    run = Path(run_dir)
    if not (run / "config.json").exists():
        raise FileNotFoundError(f"{run} is not a training run folder (no config.json); train it first")
    cfg = json.loads((run / "config.json").read_text())
    adapter = run / "final"
    if not (adapter / "adapter_config.json").exists():
        ckpts = sorted(run.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
        if not ckpts:
            raise FileNotFoundError(f"{run} has neither final/ nor a checkpoint: the run has not saved a step yet")
        adapter = ckpts[-1]
    if (run / "warm_start.json").exists():  # its adapter belongs on the warm-start build it was trained from
        from .models import check_warm_start

        check_warm_start(json.loads((run / "warm_start.json").read_text()), cfg.get("model"), f"load run:{run.name}")
    return LocalHFPolicy(cfg.get("model"), adapter=adapter, name=f"run:{run.name}", **kwargs)


class OpenAIPolicy:
    """Any OpenAI-compatible chat endpoint with native tool calling; the ``openai`` client retries
    with exponential backoff (``max_retries``)."""

    def __init__(self, model: str, base_url: str | None = None, api_key_env: str | None = "OPENAI_API_KEY",
                 temperature: float = 0.0, timeout: float = 120.0, max_retries: int = 4, name: str | None = None,
                 context_window: int | None = None, source: str | None = None, min_p: float | None = None) -> None:
        """``context_window``: the served model's window (default: asked of the server once, see
        ``llm.served_context_window``); ``source``: where ``base_url`` comes from, for error messages."""
        from openai import OpenAI

        key = secret(api_key_env) or "not-needed-for-a-local-server"
        self.client = OpenAI(base_url=base_url, api_key=key, timeout=timeout, max_retries=max_retries)
        self.model_name, self.temperature, self.min_p = model, temperature, min_p
        self.base_url, self.api_key_env = base_url or "https://api.openai.com/v1", api_key_env
        self.name = name or f"openai:{model}" + (f"@{base_url}" if base_url else "")
        self.source = source or f"the URL in the policy name {self.name!r}"
        self._window = context_window
        self._window_asked = context_window is not None
        self._models: Any = None
        self._chars_per_token: float | None = None  # the smallest ratio observed (usage.prompt_tokens)

    def check(self, chosen_by: str = "--policy") -> None:
        """Is the server there? Raises ``llm.EndpointUnreachable`` naming the URL and the setting (one
        request, before a run starts)."""
        from .llm import check_reachable

        self._models = check_reachable(self.base_url, name=self.name, api_key_env=self.api_key_env,
                                       chosen_by=f"{chosen_by}, or change {self.source}")

    @property
    def context_window(self) -> int | None:
        """The served model's context window: given, or asked of the server once (None if it does not say)."""
        if not self._window_asked:
            from .llm import served_context_window

            self._window_asked = True
            self._window = served_context_window(self.base_url, self.model_name, self.api_key_env, self._models)
        return self._window

    def count_tokens(self, messages: list[dict], tools: list[dict]) -> int:
        """An estimate (the server's tokenizer is not at hand): characters of the request over a
        characters-per-token ratio — 3 until a response reports its prompt tokens, then 95 % of the
        smallest ratio seen (so it errs towards more tokens)."""
        from .context import CHARS_PER_TOKEN, approx_tokens

        cpt = self._chars_per_token
        return approx_tokens(messages, tools, CHARS_PER_TOKEN if cpt is None else 0.95 * cpt)

    def chat(self, messages: list[dict], tools: list[dict], max_new_tokens: int) -> AssistantTurn:
        from .context import approx_tokens

        t0 = time.perf_counter()
        resp = self.client.chat.completions.create(model=self.model_name, messages=messages, tools=tools,
                                                   temperature=self.temperature, max_tokens=max_new_tokens,
                                                   # min-p is not in OpenAI's API; vLLM and llama.cpp servers read it
                                                   **({"extra_body": {"min_p": self.min_p}} if self.min_p else {}))
        used = getattr(resp.usage, "prompt_tokens", 0) or 0
        if used > 0:  # calibrate count_tokens on what the server counted
            ratio = approx_tokens(messages, tools, 1.0) / used
            self._chars_per_token = ratio if self._chars_per_token is None else min(self._chars_per_token, ratio)
        msg = resp.choices[0].message
        content = msg.content or ""
        calls: list[ToolCall] = []
        problems: list[str] = []
        for tc in msg.tool_calls or []:
            call = _as_call({"name": tc.function.name, "arguments": tc.function.arguments})
            if call is not None:
                call.id = tc.id or call.id
                calls.append(call)
        text = content
        if not calls:  # the server did not parse tool calls itself: read them from the text
            text, calls, problems = parse_tool_calls(content)
        usage = resp.usage
        return AssistantTurn(text=text, raw=content, tool_calls=calls, parse_problems=problems,
                             prompt_tokens=getattr(usage, "prompt_tokens", 0) or 0,
                             completion_tokens=getattr(usage, "completion_tokens", 0) or 0,
                             seconds=time.perf_counter() - t0)


def make_policy(spec: str | None = None, **kwargs) -> Policy:
    """A policy by name: ``run:<run folder, or a run's name under the run roots>`` (a trained adapter), or
    any LLM name ``llm.get_endpoint`` knows — an endpoint of ``configs/endpoints.toml``, ``local[:<model>]``
    or ``openai:<model>[@<base_url>]``. A local endpoint runs in this process (``LocalHFPolicy``); any
    other is called over its OpenAI-compatible API with native tool calling (``OpenAIPolicy``)."""
    from .llm import get_endpoint

    spec = spec or "local"
    kind, _, rest = spec.partition(":")
    if kind == "run":
        return run_policy(find_run_folder(rest), **kwargs)
    from .llm import endpoint_source

    ep = get_endpoint(spec)
    if ep.local:
        return LocalHFPolicy(ep.model, name=f"local:{ep.model}", **kwargs)
    return OpenAIPolicy(ep.model, ep.base_url, api_key_env=ep.api_key_env, name=spec,
                        context_window=ep.context_window, source=endpoint_source(ep), **kwargs)


def find_run_folder(name: str) -> str:
    """A run folder given as a path, or by its name under one of ``config.run_roots()``."""
    from .config import run_roots

    if os.path.isdir(name) or os.sep in name:
        return name
    for root in run_roots():
        if (root / name).is_dir():
            return str(root / name)
    raise FileNotFoundError(f"no run {name!r} under {[str(r) for r in run_roots()]}")


def _for_template(messages: list[dict]) -> list[dict]:
    """OpenAI-format messages -> what HF chat templates expect (arguments as dicts)."""
    out = []
    for m in messages:
        m = dict(m)
        if m.get("tool_calls"):
            m["tool_calls"] = [{"type": "function", "function": {"name": c["function"]["name"],
                                "arguments": _loads(c["function"]["arguments"])}} for c in m["tool_calls"]]
        out.append(m)
    return out


def _loads(s: Any) -> Any:
    if isinstance(s, str):
        try:
            return json.loads(s)
        except json.JSONDecodeError:
            return {"_raw": s}
    return s


# --------------------------------------------------------------------------- trajectories


# --------------------------------------------------------------------------- the loop


@dataclass
class Agent:
    """The episode loop. ``context_window`` (tokens; default the setting ``context_window``, else the
    policy's own: its model config, or what its server reports; 0 or unknown: no limit): before each
    turn the request is trimmed to ``context_window − max_new_tokens`` tokens by ``context.fit_context``
    (older tool results to IDs and titles, then the oldest turns dropped with a note), and the trajectory
    records each trimmed turn (``Trajectory.context_trims``)."""

    policy: Policy
    budgets: Budgets = field(default_factory=Budgets)
    system_prompt: str = SYSTEM_PROMPT
    context_window: int | None = None
    user_template: str = "{query}"  # the user message: the query, or a framing of it ("Search query: {query}")

    def window(self) -> int | None:
        """The context window the episodes keep to (None: no limit)."""
        from .config import settings

        n = self.context_window if self.context_window is not None else settings().context_window
        if n is None:
            n = getattr(self.policy, "context_window", None)
        return n or None

    def _counter(self, env: ArxivEnv | None = None):
        tools = tool_schemas(env)
        count = getattr(self.policy, "count_tokens", None)
        if count is not None:
            return lambda messages: count(messages, tools)
        from .context import approx_tokens

        return lambda messages: approx_tokens(messages, tools)

    def run(self, query: Query, env: ArxivEnv) -> Trajectory:
        """One episode, one turn at a time (``policy.chat``)."""
        episode = self.episode(query, env)
        try:  # an episode may end before its first request (a query that cannot fit the context window)
            request = next(episode)
            while True:
                try:
                    out = self.policy.chat(request[0], tool_schemas(env), request[1])
                except Exception as exc:  # noqa: BLE001 - an endpoint failure ends this episode, recorded
                    out = exc
                request = episode.send(out)
        except StopIteration as stop:
            return stop.value

    def run_many(self, queries: Sequence[Query], make_env, batch_size: int = 8, progress=None) -> list[Trajectory]:
        """Many episodes in lockstep: each round, every active episode's next turn is generated in one
        ``policy.chat_many`` call (batched decoding, each episode's prompt prefix reused from a KV cache);
        up to ``batch_size`` episodes are active, a finished one is replaced by the next query.
        ``make_env()`` gives a fresh environment per episode. Trajectories come back in query order;
        ``progress`` (a callable) is told of each finished episode. Policies without ``chat_many`` run
        the same loop one turn at a time."""
        tools: list[dict] | None = None  # the schemas of the environments make_env gives (one class)
        out: list[Trajectory | None] = [None] * len(queries)
        waiting = list(enumerate(queries))[::-1]
        active: dict[str, tuple[int, Any, tuple[list[dict], int]]] = {}
        many = getattr(self.policy, "chat_many", None)

        def settle(key: str, i: int, episode, reply) -> None:
            try:
                active[key] = (i, episode, episode.send(reply) if reply is not None else next(episode))
            except StopIteration as stop:
                out[i] = stop.value
                active.pop(key, None)
                if hasattr(self.policy, "forget"):
                    self.policy.forget(key)
                if progress is not None:
                    progress(stop.value)

        while waiting or active:
            while waiting and len(active) < max(1, batch_size):
                i, q = waiting.pop()
                env = make_env()
                tools = tools or tool_schemas(env)
                settle(f"episode-{i}", i, self.episode(q, env), None)
            if not active:
                continue
            keys = list(active)
            try:
                if many is not None:
                    replies: list = many([(k, active[k][2][0]) for k in keys], tools, [active[k][2][1] for k in keys])
                else:
                    replies = []
                    for k in keys:
                        try:
                            replies.append(self.policy.chat(active[k][2][0], tools, active[k][2][1]))
                        except Exception as exc:  # noqa: BLE001 - recorded on that episode
                            replies.append(exc)
            except Exception as exc:  # noqa: BLE001 - a failed batch ends its episodes, recorded
                replies = [exc] * len(keys)
            for k, reply in zip(keys, replies):
                i, episode, _ = active[k]
                settle(k, i, episode, reply)
        return out  # type: ignore[return-value]

    def episode(self, query: Query, env: ArxivEnv):
        """The episode as a generator: it yields ``(messages, max_new_tokens)`` for each turn and is sent
        the policy's ``AssistantTurn`` (or the exception the policy raised); it returns the trajectory.
        ``run`` drives one episode, ``run_many`` drives many in lockstep."""
        env.reset(**query.model_dump())
        messages: list[dict] = [{"role": "system", "content": self.system_prompt},
                                {"role": "user", "content": self.user_template.format(query=query.query)}]
        traj = Trajectory.start(query, self.policy.name)
        b = self.budgets
        t_start = time.perf_counter()
        calls_made = 0
        window = self.window()
        count = self._counter(env) if window else None
        trim = None
        for turn in range(1, b.max_turns + 1):
            remaining = b.max_tokens - traj.completion_tokens
            if remaining <= 0:
                traj.stop_reason = "token_budget"
                break
            request = messages
            if window:
                from .context import fit_context

                request, trim = fit_context(messages, count, window - b.max_new_tokens, previous=trim)
                if trim.trimmed or not trim.fits:
                    traj.context_trims.append(trim.model_copy(update={"turn": turn}))
                if not trim.fits:
                    traj.stop_reason = "context_budget"
                    break
            out = yield request, min(b.max_new_tokens, remaining)
            if isinstance(out, BaseException):  # an endpoint failure ends this episode, recorded
                traj.stop_reason = f"policy_error: {type(out).__name__}: {out}"[:500]
                break
            traj.prompt_tokens += out.prompt_tokens
            traj.completion_tokens += out.completion_tokens
            traj.generation_seconds += out.seconds
            step = traj.add_step(out)
            calls = out.tool_calls
            over = max(0, calls_made + len(calls) - b.max_tool_calls)
            allowed, refused = calls[: len(calls) - over], calls[len(calls) - over:]
            messages.append(_assistant_message(out, calls, verbatim=getattr(self.policy, "verbatim_context", False)))
            if not calls:
                if out.parse_problems:
                    feedback = "Error: " + "; ".join(out.parse_problems) + \
                        '. Call a tool as JSON: {"name": "keyword_search", "arguments": {"query": "..."}}.'
                    messages.append({"role": "user", "content": feedback})
                    continue
                traj.stop_reason = "no_tool_call"
                break
            t0 = time.perf_counter()
            batch = env._run_batch([(c.name, c.arguments) for c in allowed], turn=turn)
            traj.tool_seconds += time.perf_counter() - t0
            for c, (_text, rec) in zip(allowed, batch):
                rec.call_id = c.id
                step.results.append(rec)
            for c in refused:
                step.results.append(ToolCallRecord(call_id=c.id, turn=turn, name=c.name, arguments=c.arguments,
                                                   error=True, error_code="budget",
                                                   result=f"Error: tool-call budget of {b.max_tool_calls} calls used up"))
            calls_made += len(allowed)
            for r in step.results:
                messages.append({"role": "tool", "tool_call_id": r.call_id, "name": r.name, "content": r.result})
            if out.parse_problems:
                messages.append({"role": "user", "content": "Error: " + "; ".join(out.parse_problems)})
            if env.episode.finished:
                traj.stop_reason = "finished"
                break
            if calls_made >= b.max_tool_calls:
                traj.stop_reason = "tool_call_budget"
                break
        else:
            traj.stop_reason = "max_turns"
        traj.submitted = env.episode.submitted
        traj.seconds = time.perf_counter() - t_start
        return traj


def _assistant_message(out: AssistantTurn, calls: Sequence[ToolCall], verbatim: bool = False) -> dict:
    """The assistant turn as the next request carries it. ``verbatim`` (a policy that renders its own chat
    template): the text it wrote, calls included in whatever form it wrote them, because that is the context
    its training rollouts had — a policy trained to write its calls as bare JSON lines (``sft.calls_as_text``)
    and shown them re-rendered in the template's ``<tool_call>`` markers sees a context it never saw (README,
    "A train/eval context mismatch"). Otherwise (an endpoint, which needs calls it can answer): the reasoning
    text and structured ``tool_calls``."""
    if verbatim and out.raw:
        return {"role": "assistant", "content": out.raw}
    msg: dict = {"role": "assistant", "content": out.text or ""}
    if calls:
        msg["tool_calls"] = [{"id": c.id, "type": "function",
                              "function": {"name": c.name, "arguments": c.arguments if isinstance(c.arguments, str)
                                           else json.dumps(c.arguments)}} for c in calls]
    return msg
