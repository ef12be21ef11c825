"""A seeded random-weight Llama and a byte-level BPE tokenizer trained here (no download)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
SPECIAL_TOKENS = ["<s>", "</s>", "<unk>", "<|system|>", "<|user|>", "<|assistant|>"]
VOCAB_SIZE = 768

# The benchmark's model sizes (Llama shapes; head_dim 64 or 32, which vLLM's CPU attention takes).
# "small" is the model; "prefill" has about 8x its compute per token, so prefill dominates.
MODEL_SHAPES: dict[str, dict[str, int]] = {
    "small": {"hidden_size": 512, "intermediate_size": 1376, "num_hidden_layers": 6,
              "num_attention_heads": 8, "num_key_value_heads": 4, "max_position_embeddings": 8192},
    "prefill": {"hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 12,
                "num_attention_heads": 16, "num_key_value_heads": 8, "max_position_embeddings": 8192},
}


def words(rng: random.Random, count: int) -> list[str]:
    """Pronounceable pseudo-words: a corpus the BPE learns merges from, and the prompts' text."""
    consonants, vowels = "bdfgklmnprstvz", "aeiou"
    return [
        "".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(rng.randint(1, 3))) for _ in range(count)
    ]


def text(rng: random.Random, count: int) -> str:
    """A sentence of ``count`` pseudo-words."""
    return " ".join(words(rng, count)) + "."


def build_tokenizer(directory: Path) -> int:
    """A byte-level BPE trained here on a seeded corpus, saved with a chat template; returns its
    vocabulary size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    rng = random.Random(7)
    corpus = [text(rng, 40) for _ in range(400)]
    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, special_tokens=SPECIAL_TOKENS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(corpus, trainer)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
        additional_special_tokens=SPECIAL_TOKENS[3:],
    )
    wrapped.chat_template = CHAT_TEMPLATE
    wrapped.save_pretrained(directory)
    return len(wrapped)


def build_model(directory: Path, shape: dict[str, Any], weight_scale: float) -> Path:
    """The tokenizer and a Llama of ``shape`` and that vocabulary, seeded, its matrices scaled by
    ``weight_scale`` (so that a random model's greedy tokens depend on the whole prefix)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    vocab = build_tokenizer(directory)
    torch.manual_seed(0)
    config = LlamaConfig(**{**shape, "vocab_size": vocab}, bos_token_id=0, eos_token_id=1)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() == 2:
                parameter.mul_(weight_scale)
    model.save_pretrained(directory)
    return directory


def parameter_count(shape: dict[str, int], vocab: int = VOCAB_SIZE) -> int:
    """The parameters of a Llama of ``shape`` (untied embeddings), for the report."""
    hidden, inter, layers = shape["hidden_size"], shape["intermediate_size"], shape["num_hidden_layers"]
    head = hidden // shape["num_attention_heads"]
    attention = 2 * hidden * hidden + 2 * hidden * head * shape["num_key_value_heads"]
    return layers * (attention + 3 * hidden * inter + 2 * hidden) + 2 * vocab * hidden + hidden
