"""The LLM layer: endpoints, structured output with retries, the cache, accounting, secrets.

Most tests talk to a real loopback HTTP server speaking the OpenAI protocol with scripted answers
(deterministic invalid JSON, HTTP errors); the last ones use the real local model server."""

import json
import logging

import pytest
from pydantic import BaseModel, Field

from arxivqa.llm import Endpoint, LLM, LLMError, ResponseCache, get_endpoint, load_endpoints


class Answer(BaseModel):
    label: str
    score: int = Field(ge=0, le=3)


def _llm(url, cache=None, name="scripted", model="m", **kw) -> LLM:
    return LLM(Endpoint(name=name, model=model, base_url=url, transport_retries=0, **kw), cache=cache)


def _msgs(text="Classify this."):
    return [{"role": "user", "content": text}]


def test_endpoints_come_from_the_configuration_file(tmp_path, monkeypatch):
    cfg = tmp_path / "endpoints.toml"
    cfg.write_text('[judge-a]\nbase_url = "http://127.0.0.1:1/v1"\nmodel = "x"\nconcurrency = 3\n'
                   '["hosted.v1"]\nbase_url = "https://example.invalid/v1"\nmodel = "y"\napi_key_env = "SOME_KEY"\n')
    monkeypatch.setenv("ARXIVQA_ENDPOINTS", str(cfg))
    eps = load_endpoints()
    assert set(eps) == {"judge-a", "hosted.v1", "local"} and eps["local"].local and not eps["judge-a"].local
    assert eps["judge-a"].concurrency == 3 and eps["hosted.v1"].api_key_env == "SOME_KEY"
    with pytest.raises(KeyError, match="judge-a"):
        get_endpoint("nope")
    cfg.write_text("[bad]\nmodel = 3\nnot_a_field = 1\n")
    with pytest.raises(ValueError, match=r"\[bad\]"):
        load_endpoints()


def test_the_shipped_configuration_is_valid():
    eps = load_endpoints()
    from arxivqa.models import PACKAGED

    assert eps["local"].local and eps["local-smollm2"].local
    # an endpoint the project serves itself must name a packaged model (offline); the others are URLs
    assert all(ep.model in PACKAGED for ep in eps.values() if ep.local)
    assert all(ep.base_url.startswith("http") for ep in eps.values() if not ep.local)
    # one served by llama.cpp names a model that ships a GGUF
    assert all(PACKAGED[ep.model].gguf_name for ep in eps.values() if ep.local and ep.engine == "llamacpp")
    assert any(ep.engine == "llamacpp" for ep in eps.values())


def test_a_local_endpoint_is_served_by_the_engine_it_names(tmp_path, monkeypatch):
    import arxivqa.llm as llm_mod

    started = []

    class Fake:
        def __init__(self, model, port=None, log_path=None):
            started.append((type(self).__name__, model))

        def start(self, startup_timeout=300.0):
            return "http://127.0.0.1:9/v1"

        def stop(self):
            pass

    monkeypatch.setattr(llm_mod, "SERVER_ENGINES", {"transformers": type("Transformers", (Fake,), {}),
                                                    "llamacpp": type("LlamaCpp", (Fake,), {})})
    monkeypatch.delenv("ARXIVQA_LOCAL_LLM_URL", raising=False)
    cfg = tmp_path / "endpoints.toml"
    cfg.write_text('[a]\nmodel = "qwen2.5-coder-0.5b-instruct"\n[b]\nmodel = "qwen2.5-coder-0.5b-instruct"\n'
                   'engine = "llamacpp"\n')
    monkeypatch.setenv("ARXIVQA_ENDPOINTS", str(cfg))
    for name in ("a", "b"):
        llm_mod.open_llm(name, cache=False).close()
    assert started == [("Transformers", "qwen2.5-coder-0.5b-instruct"), ("LlamaCpp", "qwen2.5-coder-0.5b-instruct")]
    cfg.write_text('[c]\nmodel = "x"\nengine = "ollama"\n')
    with pytest.raises(ValueError, match=r"\[c\]"):
        load_endpoints()


def test_invalid_json_is_retried_with_the_error_and_then_parsed(scripted_endpoint, tmp_path):
    answers = iter(["I think it is relevant.", '```json\n{"label": "relevant", "score": 2}\n```'])
    srv = scripted_endpoint(lambda body: next(answers))
    llm = _llm(srv.base_url, ResponseCache(tmp_path / "c.sqlite"))
    out = llm.structured(_msgs(), Answer)
    assert out.model_dump() == {"label": "relevant", "score": 2}
    assert len(srv.requests) == 2
    retry_messages = json.dumps(srv.requests[1]["body"]["messages"])
    assert "I think it is relevant." in retry_messages  # instructor re-asks with the failed answer and the error
    rec = llm.calls[-1]
    assert rec.ok and rec.attempts == 2 and rec.parse_errors == 1 and rec.prompt_tokens == 22
    assert llm.stats.requests == 2 and llm.stats.failures == 0


def test_a_schema_violation_counts_as_invalid_too(scripted_endpoint):
    answers = iter(['{"label": "x", "score": 9}', '{"label": "x", "score": 3}'])
    srv = scripted_endpoint(lambda body: next(answers))
    assert _llm(srv.base_url).structured(_msgs(), Answer).score == 3 and len(srv.requests) == 2


def test_every_attempt_invalid_raises_counts_and_caches_nothing(scripted_endpoint, tmp_path):
    srv = scripted_endpoint(lambda body: "no json here")
    cache = ResponseCache(tmp_path / "c.sqlite")
    llm = _llm(srv.base_url, cache, max_retries=3)
    with pytest.raises(LLMError, match="Answer"):
        llm.structured(_msgs(), Answer)
    assert len(srv.requests) == 3 and llm.stats.failures == 1 and llm.stats.parse_errors == 3
    assert len(cache) == 0


def test_output_cut_at_max_tokens_counts_as_invalid_and_is_retried(scripted_endpoint):
    answers = iter([('{"label": "rel', "length"), '{"label": "relevant", "score": 1}'])
    srv = scripted_endpoint(lambda body: next(answers))
    llm = _llm(srv.base_url)
    assert llm.structured(_msgs(), Answer).score == 1
    rec = llm.calls[-1]
    assert rec.ok and rec.attempts == 2 and rec.parse_errors == 1 and len(srv.requests) == 2


def test_http_errors_are_retried_by_the_client(scripted_endpoint):
    answers = iter([500, '{"label": "a", "score": 1}'])
    srv = scripted_endpoint(lambda body: next(answers))
    llm = LLM(Endpoint(name="s", model="m", base_url=srv.base_url, transport_retries=2))
    assert llm.structured(_msgs(), Answer).label == "a" and len(srv.requests) == 2


def test_a_rerun_is_served_from_the_cache(scripted_endpoint, tmp_path):
    srv = scripted_endpoint(lambda body: '{"label": "a", "score": 1}')
    path = tmp_path / "c.sqlite"
    first = _llm(srv.base_url, ResponseCache(path)).structured(_msgs(), Answer)
    again = _llm(srv.base_url, ResponseCache(path))  # a new process would do the same
    assert again.structured(_msgs(), Answer).model_dump() == first.model_dump()
    assert len(srv.requests) == 1 and again.stats.cache_hits == 1 and again.calls[-1].cached
    assert again.calls[-1].completion_tokens == 7  # the original call's accounting travels with the entry
    # another prompt, model or endpoint is another key
    again.structured(_msgs("Something else."), Answer)
    _llm(srv.base_url, ResponseCache(path), model="m2").structured(_msgs(), Answer)
    _llm(srv.base_url, ResponseCache(path), name="other").structured(_msgs(), Answer)
    assert len(srv.requests) == 4


def test_map_keeps_order_and_failures_in_place(scripted_endpoint):
    def reply(body):
        text = body["messages"][-1]["content"]
        return "broken" if "bad" in text else json.dumps({"label": text.split()[0], "score": 1})

    srv = scripted_endpoint(reply)
    llm = _llm(srv.base_url, max_retries=1, concurrency=3)
    outs = llm.map([(_msgs(w), Answer) for w in ["one", "two", "bad", "four"]])
    assert [o.label for o in outs if not isinstance(o, LLMError)] == ["one", "two", "four"]
    assert isinstance(outs[2], LLMError) and llm.stats.failures == 1 and llm.stats.calls == 4


def test_the_api_key_goes_to_the_server_and_nowhere_else(scripted_endpoint, tmp_path, monkeypatch, caplog):
    secret = "sk-test-9f8e7d6c5b4a"
    monkeypatch.setenv("ARXIVQA_TEST_KEY", secret)
    answers = iter(["nope", '{"label": "a", "score": 1}'] + ["nope"] * 10)
    srv = scripted_endpoint(lambda body: next(answers))
    cache_path = tmp_path / "c.sqlite"
    caplog.set_level(logging.DEBUG)
    llm = LLM(Endpoint(name="hosted", model="m", base_url=srv.base_url, api_key_env="ARXIVQA_TEST_KEY",
                       transport_retries=0, max_retries=2), cache=ResponseCache(cache_path))
    llm.structured(_msgs(), Answer)
    with pytest.raises(LLMError) as failed:
        llm.structured(_msgs("again"), Answer)
    assert srv.requests[0]["headers"]["authorization"] == f"Bearer {secret}"
    leaks = [cache_path.read_bytes().decode("latin-1"), caplog.text, str(failed.value),
             json.dumps([c.model_dump() for c in llm.calls]), json.dumps(llm.stats.as_dict()),
             repr(llm.endpoint), llm.endpoint.model_dump_json()]
    assert not any(secret in text for text in leaks)


def test_a_missing_key_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("ARXIVQA_TEST_MISSING_KEY", raising=False)
    with pytest.raises(LLMError, match="ARXIVQA_TEST_MISSING_KEY"):
        LLM(Endpoint(name="h", model="m", base_url="http://127.0.0.1:9/v1", api_key_env="ARXIVQA_TEST_MISSING_KEY"))


# --------------------------------------------------------------------------- the real local model


class Topic(BaseModel):
    topic: str
    is_machine_learning: bool


def test_structured_output_from_the_local_model(llm_server, tmp_path):
    llm = LLM(Endpoint(name="local", model="qwen2.5-coder-0.5b-instruct"), base_url=llm_server,
              cache=ResponseCache(tmp_path / "c.sqlite"))
    msgs = _msgs('What is the topic of the paper "Sparse attention for long-context transformers"? '
                 'Answer with JSON: {"topic": "...", "is_machine_learning": true or false}')
    out = llm.structured(msgs, Topic, max_tokens=64)
    assert isinstance(out, Topic) and out.topic.strip()
    assert llm.calls[-1].prompt_tokens > 0 and llm.calls[-1].completion_tokens > 0
    assert llm.structured(msgs, Topic, max_tokens=64).model_dump() == out.model_dump() and llm.stats.cache_hits == 1


def test_truncated_json_from_the_local_model_is_retried_then_reported(llm_server):
    llm = LLM(Endpoint(name="local", model="qwen2.5-coder-0.5b-instruct", max_retries=2), base_url=llm_server)
    msgs = _msgs('Answer with JSON: {"topic": "...", "is_machine_learning": true or false}. Paper: diffusion models.')
    with pytest.raises(LLMError):
        llm.structured(msgs, Topic, max_tokens=4)  # four tokens cannot hold the object: invalid every time
    rec = llm.calls[-1]
    assert not rec.ok and rec.attempts == 2 and rec.parse_errors == 2 and llm.stats.failures == 1


def test_the_second_local_model_ships_in_its_package():
    from arxivqa.models import PACKAGED, _gguf_sources

    (path,) = list(_gguf_sources(PACKAGED["smollm2-135m-instruct"]))
    assert path.is_file() and path.stat().st_size > 50_000_000


def test_serving_llamacpp_without_its_extra_says_how_to_install_it(monkeypatch):
    import arxivqa.llm as llm_module

    monkeypatch.setattr(llm_module, "llamacpp_installed", lambda: False)
    with pytest.raises(SystemExit, match="make setup-llamacpp"):
        llm_module.main(["serve", "--engine", "llamacpp"])
    with pytest.raises(ValueError, match="unknown server engine"):
        with llm_module.local_server(engine="vllm"):
            pass


def test_a_packaged_gguf_converts_to_a_checkpoint_with_the_same_outputs(tmp_path, monkeypatch):
    """prepare_model writes the dequantised weights without a second model copy; loading them back must give
    the GGUF model's own logits (SmolLM2-135M: its output layer is tied to the embedding, which is not written twice)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from arxivqa import models

    (tmp_path / "gguf").mkdir()
    (tmp_path / "gguf" / "smollm2-135m-instruct.gguf").symlink_to(models.gguf_file("smollm2-135m-instruct"))
    monkeypatch.setenv("ARXIVQA_MODELS_DIR", str(tmp_path))
    folder = models.prepare_model("smollm2-135m-instruct")
    assert folder == tmp_path / "smollm2-135m-instruct" and not (tmp_path / "smollm2-135m-instruct.tmp").exists()
    assert json.loads((folder / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    plain = AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    gguf = tmp_path / "gguf" / "smollm2-135m-instruct.gguf"
    reference = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32).eval()
    ids = AutoTokenizer.from_pretrained(str(folder))("Search query: retrieval agents for arXiv", return_tensors="pt").input_ids
    with torch.no_grad():
        assert torch.equal(plain(ids).logits, reference(ids).logits)
    assert models.prepare_model("smollm2-135m-instruct") == folder  # made once


def test_a_model_from_an_optional_extra_says_which_extra_installs_it():
    from arxivqa.models import PACKAGED, PackagedGGUF, _gguf_sources

    spec = PACKAGED["qwen2.5-coder-1.5b-instruct"]
    assert spec.extra == "requirements-judge.txt" and spec.parts == 22
    missing = PackagedGGUF(name="x", module_prefix="arxivqa_no_such_part", parts=2, sha256="0" * 64,
                           gguf_name="x.gguf", extra="requirements-judge.txt")
    with pytest.raises(ImportError, match=r"make setup-judge.*requirements-judge\.txt"):
        list(_gguf_sources(missing))
