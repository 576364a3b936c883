#!/usr/bin/env python3
# Writes the GPT-2 tokenizer fixtures the C++ tests compare against, using tiktoken's `gpt2`
# encoding built from the bundled files (tools/gpt2_reference.py):
#   tests/data/tokenizer/hard_strings.json    hard strings with tiktoken's ids, <|endoftext|> read
#                                             both as plain text and as the special token
#   tests/data/tokenizer/wikitext2_digest.json per corpus file: token count and sha256 of the ids
#                                             as little-endian uint32
# Usage: python3 tools/make_tokenizer_fixtures.py
import hashlib
import json
import os
import struct

from gpt2_reference import DATA, REPO, gpt2_encoding, read_text

HARD_STRINGS = [
    "",
    "Hello world",
    "hello   world",
    "  leading and trailing spaces  ",
    "tabs\tand\t\tmore\ttabs\t",
    "line one\nline two\n\nline four\n",
    "windows\r\nline\r\nendings\r\n",
    "mixed \t\n \r\n\t  whitespace   \n",
    "\n\n\n",
    "   ",
    " ",
    "trailing newline spaces \n   ",
    "I'm can't won't they're we've you'll he'd it's",
    "UPPER CASE CONTRACTIONS: IT'S, I'M, WE'LL, THEY'RE, SHE'D, YOU'VE, DON'T",
    "Mixed 'S 's 'd 'D 'LL 'll 'Ve",
    "quote 'single' and \"double\" quotes, ''' and '''s",
    "numbers 1234567890 3.14159 -42 1e10 0x1F 1,000,000",
    "2024-01-01T12:34:56Z and 192.168.0.1:8080",
    "def f(x):\n    return x ** 2  # square\n\tif x>0: print(f'{x!r}')\n",
    "int main() { std::vector<int> v{1,2,3}; for (auto& x : v) x += 1; }\n",
    "<html><body class=\"a b\">&nbsp;&lt;tag&gt;</body></html>",
    "Ünïcödé àccents, Straße, façade, naïve, Ærøskøbing",
    "Русский текст, Ελληνικά, עברית, العربية مرحبا",
    "中文字符测试，日本語のテキスト、한국어 텍스트",
    "हिन्दी देवनागरी, ไทย ภาษา, தமிழ்",
    "combining: e\u0301 a\u0308 n\u0303 \u0915\u094d\u0937 Z\u0351\u0352\u0353",
    "emoji: 😀 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️ 🇫🇷🇯🇵",
    "math ∑∫√∞ ≠ ≤ ≥ ± × ÷ → ⇒ ∀x∈ℝ",
    "non-breaking\u00a0space, em\u2003space, ideographic\u3000space, nnbsp\u202fx",
    "mongolian vowel separator a\u180eb and zero width space a\u200bb and bom \ufeffx",
    "space then MVS x \u180e\u180ey, NBSP run x \u00a0\u00a0y, FS/GS/RS/US \x1c\x1d\x1e\x1f end",
    "line separator a\u2028b paragraph separator c\u2029d next line e\u0085f",
    "control chars \x00 \x01 \x1b[31mred\x1b[0m \x7f",
    "digits in scripts: ١٢٣ ४५६ ๗๘๙ Ⅻ ½ ²",
    "<|endoftext|>",
    "first doc<|endoftext|>second doc",
    "tokens <|endoftext|> in  <|endoftext|>\n<|endoftext|>middle <|endoftext",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "!!!!!!!!!!??????........------======________",
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    " = Valkyria Chronicles III = \n Senjō no Valkyria 3 : <unk> Chronicles @-@ 1 @,@ 000\n",
    "word" * 40 + " " + "9" * 50,
    "\u00a0" * 5 + " x" + "\t" * 7 + "y",
]

CORPUS_FILES = [
    ("wikitext-2/train.txt.xz", "wikitext-2/train.txt"),
    ("wikitext-2/valid.txt", "wikitext-2/valid.txt"),
    ("wikitext-2/test.txt", "wikitext-2/test.txt"),
    ("tinyshakespeare/input.txt", "tinyshakespeare/input.txt"),
]


def ids_digest(ids: list[int]) -> str:
    return hashlib.sha256(struct.pack(f"<{len(ids)}I", *ids)).hexdigest()


def main() -> None:
    enc = gpt2_encoding()
    out_dir = os.path.join(REPO, "tests", "data", "tokenizer")
    os.makedirs(out_dir, exist_ok=True)

    cases = [
        {
            "text": s,
            "ids_plain": enc.encode_ordinary(s),
            "ids_special": enc.encode(s, allowed_special="all"),
        }
        for s in HARD_STRINGS
    ]
    with open(os.path.join(out_dir, "hard_strings.json"), "w", encoding="utf-8") as f:
        # one case per line keeps the file small and its diffs readable
        lines = ",\n".join(json.dumps(c, ensure_ascii=True) for c in cases)
        f.write('{"encoding": "tiktoken gpt2", "cases": [\n' + lines + "\n]}\n")

    digests = []
    for rel, name in CORPUS_FILES:
        ids = enc.encode_ordinary(read_text(os.path.join(DATA, rel)))
        digests.append({"file": rel, "name": name, "tokens": len(ids), "sha256_u32le": ids_digest(ids)})
        print(f"{rel}: {len(ids)} tokens")
    with open(os.path.join(out_dir, "wikitext2_digest.json"), "w", encoding="utf-8") as f:
        json.dump({"encoding": "tiktoken gpt2", "files": digests}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
