"""A tokenizer file is bounded before it is read: a path from a replay bundle (`tokenizer: hf:/proc/self/pagemap`
read 2.17 GB before the fix) is refused in one line, whatever loader names it."""

from __future__ import annotations

import os
import resource

import pytest

from gym.format.tokenizer import MAX_TOKENIZER_BYTES, TokenizerError, load_tokenizer, tokenizer_bytes
from tests.tokenizer_support import train_tokenizer


@pytest.mark.parametrize("name", ["hf", "bpe"])
@pytest.mark.parametrize(
    "path", ["/proc/self/pagemap", "/proc/self/mem", "/sys/kernel/mm/transparent_hugepage/enabled", "/dev/zero"]
)
def test_kernel_views_are_not_tokenizer_files(name, path):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(TokenizerError) as caught:
        load_tokenizer(f"{name}:{path}")
    assert "\n" not in str(caught.value) and path in str(caught.value)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 64 << 10  # KiB: nothing was read


def test_a_file_past_the_bound_is_refused_before_it_is_read(tmp_path):
    huge = tmp_path / "tokenizer.json"
    with huge.open("wb") as handle:
        handle.truncate(MAX_TOKENIZER_BYTES + 1)  # sparse: no disk
    for spec in (f"hf:{huge}", f"hf:{tmp_path}", f"bpe:{huge}"):
        with pytest.raises(TokenizerError, match="past the 256 MiB bound"):
            load_tokenizer(spec)


def test_a_fifo_and_a_directory_are_refused(tmp_path):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    for spec in (f"bpe:{fifo}", f"hf:{fifo}", f"bpe:{tmp_path}"):
        with pytest.raises(TokenizerError):  # never a read that blocks on a FIFO without a writer
            load_tokenizer(spec)
    with pytest.raises(TokenizerError, match="not a regular file"):
        tokenizer_bytes(fifo)  # the check itself, past the loaders' is_file()


def test_an_honest_tokenizer_file_still_loads(tmp_path):
    tokenizer = load_tokenizer(f"hf:{train_tokenizer(tmp_path / 'tokenizer.json')}")
    assert tokenizer.vocab_size > 0 and tokenizer.decode(tokenizer.encode("hello world")) == "hello world"
