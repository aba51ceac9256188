import hashlib

import pytest
import torch

from pigviz.model import texts


class CharTokenizer:
    """One id per character: enough to test slicing and the length check without a model."""

    def __call__(self, text, verbose=True):
        return {"input_ids": [ord(c) for c in text]}


def test_long_text_is_deterministic_and_hashed():
    text, digest = texts.long_text()
    again, digest_again = texts.long_text()
    assert text == again and digest == digest_again
    assert digest == hashlib.sha256(text.encode("utf-8")).hexdigest()
    # the whole stdlib reference topics, not an excerpt
    assert len(text) > 300_000


def test_long_text_joins_topics_in_sorted_key_order():
    from pydoc_data.topics import topics

    text, _ = texts.long_text()
    keys = sorted(topics)
    assert text.startswith(topics[keys[0]])
    assert text.endswith(topics[keys[-1]])
    assert text.index(topics[keys[1]]) < text.index(topics[keys[2]])


def test_first_tokens_returns_exactly_n_leading_ids():
    ids = texts.first_tokens(CharTokenizer(), 5, text="abcdefgh")
    assert ids.dtype == torch.long and ids.shape == (5,)
    assert ids.tolist() == [ord(c) for c in "abcde"]


def test_first_tokens_defaults_to_long_text():
    text, _ = texts.long_text()
    ids = texts.first_tokens(CharTokenizer(), 100)
    assert ids.tolist() == [ord(c) for c in text[:100]]


def test_first_tokens_too_long_names_n():
    with pytest.raises(ValueError, match=r"n must be at most 3"):
        texts.first_tokens(CharTokenizer(), 4, text="abc")


@pytest.mark.parametrize("bad, err", [(0, ValueError), (-2, ValueError), ("8", TypeError), (2.5, TypeError)])
def test_first_tokens_rejects_bad_n(bad, err):
    with pytest.raises(err, match="n must"):
        texts.first_tokens(CharTokenizer(), bad, text="abcdef")


def test_first_tokens_rejects_non_string_text():
    with pytest.raises(TypeError, match="text must be a str"):
        texts.first_tokens(CharTokenizer(), 2, text=b"abc")


@pytest.mark.slow
@pytest.mark.model
def test_real_tokenizer_has_room_for_8k_context(smollm2):
    _, tokenizer = smollm2
    text, _ = texts.long_text()
    total = len(tokenizer(text, verbose=False)["input_ids"])
    assert total > 8192 * 10  # about 113k SmolLM2 tokens
    ids = texts.first_tokens(tokenizer, 8192)
    assert ids.shape == (8192,)
    # cutting after tokenising the whole text equals tokenising a generous prefix: no boundary effect
    prefix_ids = tokenizer(text[:60_000], verbose=False)["input_ids"]
    assert ids[:4096].tolist() == prefix_ids[:4096]
