"""Shared fixtures: a small hand-written corpus and an index built from it (bm25s, whoosh, static embeddings)."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from arxivqa.corpus import Paper

TOPICS = [
    ("Graph neural networks for molecule property prediction", "We apply message passing graph neural networks to predict molecular properties such as solubility and toxicity from molecular graphs."),
    ("Sparse attention for long-context transformers", "We propose a sparse attention pattern that lets transformers process documents of one million tokens with linear memory."),
    ("Reinforcement learning from human feedback for chat models", "Reward models trained on human preference comparisons guide proximal policy optimisation of large language model assistants."),
    ("Group relative policy optimization for mathematical reasoning", "GRPO removes the value network and normalises rewards within a group of sampled answers to improve math reasoning."),
    ("Retrieval-augmented generation with dense passage retrieval", "A dual-encoder retriever fetches passages that a generator conditions on, improving open-domain question answering."),
    ("Diffusion models for high-resolution image synthesis", "Latent diffusion models denoise in a compressed latent space, producing high-resolution images at a fraction of the compute."),
    ("Speech recognition with self-supervised audio encoders", "Self-supervised pre-training on unlabelled audio yields encoders that transcribe speech with few labelled hours."),
    ("Robotic grasping with vision-language-action models", "A vision-language-action model maps camera images and instructions to robot arm actions for grasping novel objects."),
    ("Federated learning under client data heterogeneity", "We study federated averaging when clients hold non-identically distributed data and propose a drift correction."),
    ("Mixture-of-experts language models at scale", "Sparse mixture-of-experts layers route each token to a few experts, scaling parameters without scaling compute."),
    ("Tool-using agents that call search APIs", "Language model agents learn to call keyword and semantic search tools over many turns to answer research questions."),
    ("Rubrics as rewards for open-ended tasks", "An LLM judge scores responses against a rubric of criteria; the normalised score is used as the reinforcement learning reward."),
    ("Quantisation of large language models to four bits", "Post-training quantisation to 4-bit weights keeps perplexity close to the 16-bit model while cutting memory fourfold."),
    ("Protein structure prediction with deep learning", "Attention-based networks predict three-dimensional protein structures from amino acid sequences with atomic accuracy."),
    ("Time series forecasting with foundation models", "A decoder-only model pre-trained on billions of time points forecasts unseen series zero-shot."),
    ("Adversarial robustness of image classifiers", "Small adversarial perturbations fool convolutional classifiers; adversarial training improves robustness at a cost in accuracy."),
    ("Knowledge distillation into small students", "A small student network is trained to match the softened output distribution of a large teacher network."),
    ("Causal inference with observational data", "We estimate treatment effects from observational data with doubly robust estimators and sensitivity analysis."),
    ("Neural machine translation for low-resource languages", "Back-translation and multilingual pre-training improve translation quality for languages with little parallel data."),
    ("Autonomous driving perception with lidar point clouds", "A point cloud network detects vehicles and pedestrians from lidar sweeps for autonomous driving."),
    ("Code generation benchmarks for language models", "We release a benchmark of programming problems with unit tests to evaluate code generation by language models."),
    ("Entropy collapse in reinforcement learning of language models", "Policy entropy drops early in RL fine-tuning, and the model converges to a narrow set of behaviours; we analyse the collapse."),
    ("Recommender systems with graph convolution", "Graph convolution over the user-item interaction graph yields embeddings for collaborative filtering recommendation."),
    ("Weather prediction with machine learning", "A graph neural network trained on reanalysis data produces medium-range global weather forecasts faster than numerical models."),
    ("Hallucination detection in large language models", "We detect hallucinated statements by checking the consistency of sampled answers from the same model."),
    ("Multi-hop question answering over documents", "Multi-hop questions require chaining evidence from several documents; we train a retriever that follows bridge entities."),
    ("Curriculum learning from easy to hard examples", "Presenting training examples from easy to hard accelerates convergence and improves generalisation in some regimes."),
    ("Music generation with transformers", "An autoregressive transformer over audio tokens generates coherent music conditioned on text descriptions."),
    ("Medical image segmentation with U-Net", "A U-Net with attention gates segments organs and tumours in CT scans with high Dice scores."),
    ("Privacy-preserving machine learning with differential privacy", "DP-SGD clips per-example gradients and adds noise, giving formal differential privacy guarantees for deep learning."),
]


def make_papers() -> list[Paper]:
    papers = []
    for i, (title, abstract) in enumerate(TOPICS):
        year = 2019 + i % 8
        papers.append(Paper(
            arxiv_id=f"{year % 100:02d}{(i % 12) + 1:02d}.{10000 + i}",
            title=title, abstract=abstract,
            authors=[f"Author {i}", "Shared Coauthor"] if i % 3 else [],
            categories=["cs.LG", "cs.CL"] if i % 2 else ["cs.CV"],
            primary_category="cs.LG" if i % 2 else "cs.CV",
            published=dt.date(year, (i % 12) + 1, 1 + i % 28),
            comment="10 pages" if i % 4 == 0 else None,
        ))
    return papers


@pytest.fixture(scope="session")
def papers() -> list[Paper]:
    return make_papers()


@pytest.fixture(scope="session")
def corpus_file(tmp_path_factory, papers):
    path = tmp_path_factory.mktemp("data") / "arxiv_ai_papers.jsonl"
    path.write_text("".join(p.model_dump_json() + "\n" for p in papers))
    return path


@pytest.fixture(scope="session")
def built_index(tmp_path_factory, papers):
    from arxivqa.index import SearchIndex

    folder = tmp_path_factory.mktemp("index") / "tiny"
    idx = SearchIndex(folder)
    idx.build(papers, keyword_engines=["bm25s", "whoosh"])
    return idx


def by_title(papers, words: str) -> Paper:
    return next(p for p in papers if p.title.startswith(words))


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# --------------------------------------------------------------------------- LLM endpoints


@pytest.fixture(scope="session")
def llm_server():
    """A real ``transformers serve`` process serving the packaged Qwen2.5-Coder-0.5B-Instruct on loopback."""
    from arxivqa.llm import local_server
    from arxivqa.models import DEFAULT_MODEL

    with local_server(DEFAULT_MODEL) as base_url:
        yield base_url


class ScriptedEndpoint:
    """A real HTTP server speaking the OpenAI chat-completions protocol on loopback, whose answers come
    from ``reply(body) -> str | int | (str, finish_reason) | (str, finish_reason, usage) | (status, error body)``
    (an int is an HTTP error status). ``get(path) -> (status, JSON value)`` answers GET requests (default:
    none, 501). Records every request (``reply`` can read the current one's headers in ``requests[-1]``)."""

    def __init__(self, reply, get=None):
        import http.server
        import threading

        self.reply, self.get, self.requests = reply, get, []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                if outer.get is None:
                    self.send_error(501)
                    return
                status, value = outer.get(self.path)
                data = json.dumps(value).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append({"headers": {k.lower(): v for k, v in self.headers.items()}, "body": body})
                content = outer.reply(body)
                if isinstance(content, int):
                    self.send_response(content)
                    self.end_headers()
                    return
                if isinstance(content, tuple) and isinstance(content[0], int):  # (status, error body)
                    data = content[1].encode()
                    self.send_response(content[0])
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                usage = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
                if isinstance(content, tuple) and len(content) == 3:
                    content, finish, usage = content
                else:
                    content, finish = content if isinstance(content, tuple) else (content, "stop")
                data = json.dumps({
                    "id": f"c{len(outer.requests)}", "object": "chat.completion", "created": 0, "model": body["model"],
                    "choices": [{"index": 0, "finish_reason": finish,
                                 "message": {"role": "assistant", "content": content}}],
                    "usage": usage}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def scripted_endpoint():
    servers = []

    def make(reply, get=None):
        s = ScriptedEndpoint(reply, get)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.close()


@pytest.fixture(scope="session")
def tiny_qwen(tmp_path_factory):
    """A randomly initialised two-layer Qwen2 with the packaged model's tokenizer and chat template: the real
    code paths (chat template with tools, LoRA, TRL) in seconds instead of minutes."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from arxivqa.models import resolve_model

    base = resolve_model("qwen2.5-coder-0.5b-instruct")
    cfg = AutoConfig.from_pretrained(base)
    cfg.update({"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                "num_key_value_heads": 2, "head_dim": 16, "layer_types": ["full_attention"] * 2})
    folder = tmp_path_factory.mktemp("models") / "tiny-qwen"
    AutoModelForCausalLM.from_config(cfg).save_pretrained(folder)
    AutoTokenizer.from_pretrained(base).save_pretrained(folder)
    return str(folder)


# --------------------------------------------------------------------------- one tiny GRPO run, shared

# The settings (as `--set KEY=VALUE` strings, the way the command line takes them) of a 3-step GRPO run of
# the tiny model on six queries; tests that interrupt, export, revive or resume a run compare with it.
TINY_RUN_SETS = ["split=all", "max_steps=3", "num_generations=2", "max_completion_length=16",
                 "max_tool_calling_iterations=1", "save_steps=1", "lora_r=2", "threads=1", "dtype=float32",
                 "tensorboard=false", "learning_rate=0.001"]


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory, tiny_qwen, built_index, papers):
    """``(sets, config, folder)``: the tiny model's uninterrupted 3-step run (in process) and the settings
    that made it, ``sets`` naming the model, the query file and the index for the command line."""
    from arxivqa.train import _parse_value, preset, train

    root = tmp_path_factory.mktemp("tiny-run")
    qfile = write_jsonl(root / "q.jsonl", [
        {"qid": f"t{i}", "query": p.title, "gold_in_corpus": [p.arxiv_id], "difficulty": "easy"}
        for i, p in enumerate(papers[:6])])
    sets = [f"model={tiny_qwen}", f"queries={qfile}", *TINY_RUN_SETS]
    cfg = preset("cpu-demo", **{k: _parse_value(v) for k, v in (s.split("=", 1) for s in sets)})
    train(cfg, root / "straight", index=built_index)
    return sets + [f"index={built_index.folder}"], cfg, root / "straight"
