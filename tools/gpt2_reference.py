# The reference GPT-2 tokenizer: tiktoken's `gpt2` encoding built from the repo's bundled
# encoder.json / vocab.bpe (tiktoken cannot download them here). Shared by the fixture writer and
# the speed comparison.
import hashlib
import os

import tiktoken
from tiktoken.load import data_gym_to_mergeable_bpe_ranks

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.environ.get("FRUGAL_DATA_DIR", os.path.join(REPO, "data"))

# tiktoken's r50k/gpt2 pre-tokenizer pattern (tiktoken_ext/openai_public.py, r50k_pat_str).
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""

# The SHA-256 pins tiktoken uses for OpenAI's files; the bundled files must match them.
VOCAB_BPE_SHA256 = "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
ENCODER_JSON_SHA256 = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"


def gpt2_encoding() -> tiktoken.Encoding:
    bpe_dir = os.path.join(DATA, "gpt2-bpe")
    vocab_bpe = os.path.join(bpe_dir, "vocab.bpe")
    encoder_json = os.path.join(bpe_dir, "encoder.json")
    for path, expected in ((vocab_bpe, VOCAB_BPE_SHA256), (encoder_json, ENCODER_JSON_SHA256)):
        with open(path, "rb") as f:
            if hashlib.sha256(f.read()).hexdigest() != expected:
                raise SystemExit(f"{path} is not OpenAI's GPT-2 file (sha256 mismatch)")
    os.environ["TIKTOKEN_CACHE_DIR"] = ""  # read the local files directly, no cache copy in /tmp
    ranks = data_gym_to_mergeable_bpe_ranks(vocab_bpe_file=vocab_bpe, encoder_json_file=encoder_json)
    return tiktoken.Encoding(
        name="gpt2",
        pat_str=GPT2_PATTERN,
        mergeable_ranks=ranks,
        special_tokens={"<|endoftext|>": 50256},
        explicit_n_vocab=50257,
    )


def read_text(path: str) -> str:
    """Reads a UTF-8 text file, decompressing .xz."""
    if path.endswith(".xz"):
        import lzma

        with lzma.open(path, "rb") as f:
            return f.read().decode("utf-8")
    with open(path, "rb") as f:
        return f.read().decode("utf-8")
